"""The fused epilogue's spec (core/epilogue.py) and the problem that carries it (core/problem.py).

Parsing and its errors; the canonical order; the extra operands each op brings; and a problem
without an epilogue keeps the text, JSON, build key and measurement key it had before epilogues
existed (the keys below were computed by the code before `Problem.epilogue` was added).
"""

from __future__ import annotations

import json

import pytest

from tirtune.core import EPILOGUE_NONE, Candidate, EpilogueSpec, Operand, Problem, SpaceError, Stack
from tirtune.core.epilogue import BLOCK_OPS, OPS

# The ops applied to the whole sum (every op but the block scales, which stand apart from the scales).
SUM_OPS = tuple(op for op in OPS if op not in BLOCK_OPS)
from tirtune.space.hopper.knobs import config as hopper_config

STACK = Stack("NVIDIA H200", "570.1", "13.0", "0.27.0")
CONFIG = hopper_config(128, 256, 64, 4, 2, True, persistent=True, epilogue="tma")
# (problem, str, build key, measurement key, min_bytes) as recorded before epilogues existed.
RECORDED = (
    (Problem(4096, 4096, 4096), "4096x4096x4096 float16", "00b8586028173527db557912",
     "a80b55b4f797620c877f8743b0da4574", 100663296),
    (Problem(16, 4096, 4096, "bf16"), "16x4096x4096 bfloat16", "484a7e41b3cc2d0eaf255d65",
     "f1c56605717ebf3737e6e935a6a44054", 33816576),
    (Problem(1000, 1004, 136), "1000x1004x136 float16", "a570f18e5cdc6c70c8717775",
     "dcbf113b08ea8ba683480a8c9ddbed7b", 2553088),
)  # fmt: skip


@pytest.mark.parametrize(
    ("text", "ops", "canonical"),
    [
        ("none", (), "none"),
        (" NONE ", (), "none"),
        ("bias", ("bias",), "bias"),
        ("residual", ("residual",), "residual"),
        ("bias+residual", ("bias", "residual"), "bias+residual"),
        ("residual + Bias", ("bias", "residual"), "bias+residual"),
        ("scale_row", ("scale_row",), "scale_row"),
        ("scale_col", ("scale_col",), "scale_col"),
        (" SwiGLU ", ("swiglu",), "swiglu"),
        ("scale_b+SCALE_A", ("scale_a", "scale_b"), "scale_a+scale_b"),
        ("residual+bias+scale_col+scale_row", SUM_OPS[2:], "scale_row+scale_col+bias+residual"),
        (
            "residual+bias+scale_col+scale_row+scale_b+scale_a",
            SUM_OPS,
            "scale_a+scale_b+scale_row+scale_col+bias+residual",
        ),
    ],
)
def test_parse_keeps_the_ops_in_the_fixed_order(text: str, ops: tuple[str, ...], canonical: str) -> None:
    spec = EpilogueSpec.parse(text)
    assert spec.ops == ops and str(spec) == canonical
    assert EpilogueSpec.parse(str(spec)) == spec
    assert spec.is_none == (ops == ())
    assert EpilogueSpec(tuple(reversed(ops))) == spec  # built directly, any order: the same spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "bad epilogue ''"),
        ("   ", "bad epilogue"),
        ("bias+", "bad epilogue 'bias\\+'"),
        ("+bias", "bad epilogue"),
        ("bias++residual", "bad epilogue"),
        ("none+bias", "'none' stands alone"),
        ("gelu", "unknown epilogue op 'gelu'"),
        ("bias+swiglu", "swiglu stands alone \\(got it with 'bias'\\)"),
        ("swiglu+residual+scale_row", "swiglu stands alone"),
        ("scale", "unknown epilogue op 'scale'"),
        ("bias+Bias", "'bias' given more than once"),
        ("bias" * 100, "bad epilogue \\(400 characters\\)"),
    ],
)
def test_bad_text_is_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(SpaceError, match=message) as refused:
        EpilogueSpec.parse(text)
    assert "of scale_a, scale_b, scale_row, scale_col, bias, residual, out_float16 (e.g. 'bias+residual')" in str(
        refused.value
    )
    assert "or the block scales scale_a_block+scale_b_block with bias and residual at most" in str(refused.value)
    assert len(str(refused.value)) < 300  # never echoes a long input


def test_bad_values_are_refused() -> None:
    with pytest.raises(SpaceError, match="text such as"):
        EpilogueSpec.parse(3)  # type: ignore[arg-type]
    with pytest.raises(SpaceError, match="tuple of op names"):
        EpilogueSpec(["bias"])  # type: ignore[arg-type]
    with pytest.raises(SpaceError, match="unknown epilogue op"):
        EpilogueSpec(("bias", "relu"))
    with pytest.raises(SpaceError, match="more than once"):
        EpilogueSpec(("bias", "bias"))
    with pytest.raises(SpaceError, match="epilogue must be an EpilogueSpec or its text"):
        Problem(64, 64, 64, "float16", 7)  # type: ignore[arg-type]
    with pytest.raises(SpaceError, match="unknown epilogue op 'gelu'"):
        Problem.parse("64x64x64", epilogue="gelu")


def test_each_op_brings_its_operand_in_parameter_order() -> None:
    everything = EpilogueSpec(SUM_OPS).operands(300, 200, "bfloat16")
    assert everything == (
        Operand("scale_a", (1,), "float32"),
        Operand("scale_b", (1,), "float32"),
        Operand("scale_row", (300,), "float32"),
        Operand("scale_col", (200,), "float32"),
        Operand("bias", (200,), "bfloat16"),
        Operand("residual", (300, 200), "bfloat16"),
    )
    assert EPILOGUE_NONE.operands(300, 200, "float16") == ()
    problem = Problem.parse("300x200x64", "bf16", "residual+bias")
    assert [o.name for o in problem.operands] == ["A", "B", "D", "bias", "residual"]
    assert problem.operands[:3] == Problem(300, 200, 64, "bf16").operands
    assert problem.operands[0] == Operand("A", (300, 64), "bfloat16")
    # Bytes moved: A, B, D, and each operand once (bias 2 B an element, residual 2 B, scales 4 B).
    base = (300 * 64 + 200 * 64 + 300 * 200) * 2
    assert problem.min_bytes == base + 200 * 2 + 300 * 200 * 2
    assert Problem(300, 200, 64, "float16", EpilogueSpec(("scale_row",))).min_bytes == base + 300 * 4


@pytest.mark.parametrize(("problem", "text", "build_key", "measurement_key", "min_bytes"), RECORDED)
def test_a_problem_without_an_epilogue_keeps_its_keys_and_forms(
    problem: Problem, text: str, build_key: str, measurement_key: str, min_bytes: int
) -> None:
    assert problem.epilogue == EPILOGUE_NONE and problem.epilogue.is_none
    assert str(problem) == text
    assert problem.to_json() == {"m": problem.m, "n": problem.n, "k": problem.k, "dtype": problem.dtype}
    candidate = Candidate(CONFIG, problem, "hopper-gemm/5")
    assert candidate.build_key() == build_key
    assert candidate.measurement_key(STACK) == measurement_key
    assert problem.min_bytes == min_bytes
    assert Problem.parse(problem.shape, problem.dtype) == problem
    assert Problem.parse(problem.shape, problem.dtype, "none") == problem


def test_an_epilogue_problem_round_trips_and_keys_apart() -> None:
    plain = Problem(4096, 4096, 4096)
    keys = {Candidate(CONFIG, plain, "hopper-gemm/5").build_key()}
    for text in ("bias", "residual", "bias+residual", "scale_row", "scale_col"):
        problem = Problem.parse("4096x4096x4096", "float16", text)
        assert str(problem) == f"4096x4096x4096 float16 epilogue={text}"
        data = problem.to_json()
        assert data["epilogue"] == text
        back = Problem(**json.loads(json.dumps(data)))  # type: ignore[arg-type]
        assert back == problem and hash(back) == hash(problem) and back != plain
        keys.add(Candidate(CONFIG, problem, "hopper-gemm/5").build_key())
    assert len(keys) == 6  # a kernel with another epilogue is another build


# --- swiglu: B holds the gate and up weights, 2N rows; D is N wide ------------------------------------


def test_swiglu_is_a_gemm_twice_as_wide_with_no_operand() -> None:
    spec = EpilogueSpec.parse("swiglu")
    assert spec.gated and not EPILOGUE_NONE.gated and not EpilogueSpec(SUM_OPS).gated
    assert spec.operands(16, 14336, "float16") == ()
    assert spec.gemm_n(14336) == 28672 and EPILOGUE_NONE.gemm_n(14336) == 14336
    problem = Problem.parse("16x14336x4096", "bf16", "swiglu")
    assert problem.gemm_n == 28672 and problem.n == 14336
    assert [o.shape for o in problem.operands] == [(16, 4096), (28672, 4096), (16, 14336)]
    # FLOPs and bytes count the GEMM's 2N rows of B (both products), D's N columns.
    assert problem.flops == 2 * 16 * 28672 * 4096
    assert problem.min_bytes == (16 * 4096 + 28672 * 4096 + 16 * 14336) * 2
    assert problem.tflops(1.0) == pytest.approx(2 * 16 * 28672 * 4096 / 1e-3 / 1e12)
    assert str(problem) == "16x14336x4096 bfloat16 epilogue=swiglu"
    assert problem.to_json()["epilogue"] == "swiglu" and Problem(**problem.to_json()) == problem  # type: ignore[arg-type]
    # A plain problem's figures are as they were.
    assert Problem(16, 14336, 4096).gemm_n == 14336 and Problem(16, 14336, 4096).flops == 2 * 16 * 14336 * 4096


@pytest.mark.parametrize("n", [1, 4, 100, 14330])
def test_swiglu_needs_n_a_multiple_of_8(n: int) -> None:
    from tirtune.space import HOPPER

    problem = Problem(16, n, 64, "float16", "swiglu")  # can be named (a query), not tuned
    with pytest.raises(SpaceError, match=f"swiglu_n_aligned: N={n}: epilogue swiglu needs N a multiple of 8"):
        HOPPER.check_problem(problem)
    HOPPER.check_problem(Problem(16, n, 64, "float16", "bias"))  # the other ops take any N
    HOPPER.check_problem(Problem(16, 8 * n, 64, "float16", "swiglu"))


def test_swiglu_keys_differ_from_the_plain_gemms() -> None:
    plain, gated = Problem(16, 4096, 4096), Problem(16, 4096, 4096, "float16", "swiglu")
    keys = {Candidate(CONFIG, p, "hopper-gemm/5").build_key() for p in (plain, gated)}
    assert len(keys) == 2
