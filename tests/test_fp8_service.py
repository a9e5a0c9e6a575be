"""FP8 (e4m3) problems end to end on the CPU: POST /tune and GET /best take the dtype and a scaling,
the database keys the problem by its scales, the cost model and the tuner's transfers keep to
16-bit problems, and `tirtune.scaled_gemm`, `torch.ops.tirtune.scaled_gemm` and
`tirtune.nn.FP8Linear` serve a tuned FP8 kernel, else torch._scaled_mm.

Real databases (SQLite and PostgreSQL), the real app, real torch; the stand-ins are our own seams:
the GPU model of a CPU tensor and the loader (a CPU "kernel" for a tvm_ffi module)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker
from test_api_kernels import cache_entry, client, record, refused  # noqa: F401 (client: the API fixture)
from torch._subclasses.fake_tensor import FakeTensorMode

import tirtune
import tirtune.nn
from tirtune.core import EpilogueSpec, Problem, Source, SpaceError
from tirtune.core.epilogue import scaling_of, with_scaling
from tirtune.core.problem import FP8
from tirtune.db import repo, transaction
from tirtune.dispatch import ArtifactStore, Dispatcher, LocalBest, use
from tirtune.dispatch.scaled import scaling_operands
from tirtune.runner.inputs import draw_inputs
from tirtune.runner.verify import reference, relative_error, tolerance
from tirtune.space.branches import BRANCHES, DEFAULT_ARCH
from tirtune.space.hopper.knobs import config as hopper_config
from tirtune.tuner.start import transferred

Factory = sessionmaker[Session]
H200 = "NVIDIA H200"
FP8_CONFIG = hopper_config(128, 128, 128, 4, 2, True, persistent=True)
ROWCOL = Problem(64, 48, 256, FP8, "scale_row+scale_col")
BODY = {"m": 4096, "n": 4096, "k": 4096, "dtype": "fp8"}


# --- the scaling names -----------------------------------------------------------------------------


def test_a_scaling_names_its_ops_and_the_ops_name_the_scaling() -> None:
    bias = EpilogueSpec.parse("bias")
    assert str(with_scaling(bias, "tensor")) == "scale_a+scale_b+bias"
    assert str(with_scaling(bias, "RowCol")) == "scale_row+scale_col+bias"
    assert with_scaling(bias, "none") == bias
    assert with_scaling(EpilogueSpec.parse("scale_row+scale_col"), "rowcol") == EpilogueSpec.parse(
        "scale_row+scale_col"
    )
    assert [
        scaling_of(EpilogueSpec.parse(t))
        for t in ("none", "bias", "scale_a+scale_b", "scale_row+scale_col+residual", "scale_row")
    ] == ["none", "none", "tensor", "rowcol", "custom"]
    block = with_scaling(bias, "block")
    assert str(block) == "scale_a_block+scale_b_block+bias" and scaling_of(block) == "block"
    with pytest.raises(SpaceError, match="do not combine with the per-tensor or per-row scales"):
        with_scaling(EpilogueSpec.parse("scale_row"), "block")
    with pytest.raises(SpaceError, match="unknown scaling 'per-row'"):
        with_scaling(bias, "per-row")
    both = with_scaling(EpilogueSpec.parse("scale_row"), "tensor")  # beside a scale named already
    assert str(both) == "scale_a+scale_b+scale_row" and scaling_of(both) == "custom"


# --- the API ----------------------------------------------------------------------------------------


def test_tune_takes_an_fp8_problem_with_its_scaling(client: TestClient) -> None:
    made = client.post("/tune", json={**BODY, "scaling": "rowcol"})
    assert made.status_code == 202, made.text
    assert made.json()["problem"] == {
        "m": 4096,
        "n": 4096,
        "k": 4096,
        "dtype": FP8,
        "epilogue": "scale_row+scale_col",
        "scaling": "rowcol",
    }
    again = client.post("/tune", json={**BODY, "dtype": "e4m3", "epilogue": "scale_col+scale_row"})
    assert again.status_code == 200 and again.json()["id"] == made.json()["id"]  # the same problem
    tensor = client.post("/tune", json={**BODY, "scaling": "tensor", "epilogue": "bias"})
    assert tensor.status_code == 202 and tensor.json()["problem"]["epilogue"] == "scale_a+scale_b+bias"
    assert tensor.json()["problem"]["scaling"] == "tensor"
    plain16 = client.post("/tune", json={**BODY, "dtype": "bf16"})  # the same shape in bf16: its own job
    assert plain16.status_code == 202 and plain16.json()["problem"]["scaling"] == "none"
    fp16_d = client.post("/tune", json={**BODY, "scaling": "rowcol", "epilogue": "out_float16"})  # fp16 D: its own
    assert fp16_d.status_code == 202 and fp16_d.json()["problem"]["epilogue"] == "scale_row+scale_col+out_float16"
    assert fp16_d.json()["problem"]["scaling"] == "rowcol"
    assert client.get("/jobs").json()["total"] == 4


@pytest.mark.parametrize(
    ("change", "status", "code", "reason"),
    [
        ({"scaling": "block", "epilogue": "scale_row"}, 422, "invalid_problem", "do not combine with the per-tensor"),
        ({"scaling": "block", "dtype": "bf16"}, 422, "invalid_problem", "dequantize FP8 operands"),
        (
            {"scaling": "per-row"},
            422,
            "validation_error",
            "unknown scaling 'per-row': expected one of none, tensor, rowcol, block",
        ),
        ({"k": 4104}, 422, "invalid_problem", "K must be a multiple of 16"),
        ({"m": 1}, 422, "invalid_problem", "one-row operands are not built for FP8"),
        ({"epilogue": "swiglu"}, 422, "invalid_problem", "swiglu is not built for FP8"),
        ({"dtype": "fp16", "epilogue": "out_float16"}, 422, "invalid_problem", "for FP8 operands"),
    ],
)
def test_tune_refuses_what_fp8_cannot_take_with_the_reason(
    client: TestClient, change: dict[str, Any], status: int, code: str, reason: str
) -> None:
    message = refused(client.post("/tune", json={**BODY, **change}), status, code)
    assert reason in message
    assert client.get("/jobs").json()["total"] == 0


def test_best_keys_an_fp8_problem_by_its_scaling_and_predicts_nothing_for_it(
    client: TestClient, db_factory: Factory
) -> None:
    rowcol = Problem(4096, 4096, 4096, FP8, "scale_row+scale_col")
    record(db_factory, FP8_CONFIG, problem=rowcol)
    found = client.get("/best", params={"shape": "4096x4096x4096", "dtype": "fp8", "scaling": "rowcol"})
    assert found.status_code == 200, found.text
    assert found.json()["kind"] == "measured" and found.json()["problem"]["scaling"] == "rowcol"
    assert found.json()["config"]["blk_k"] == 128
    # The tensor-scaled problem of the same shape was not tuned, and the cost model does not speak for FP8.
    message = refused(
        client.get("/best", params={"shape": "4096x4096x4096", "dtype": "fp8", "scaling": "tensor"}), 404, "not_found"
    )
    assert "16-bit GEMMs only" in message
    message = refused(
        client.get("/best", params={"shape": "4096x4096x4096", "dtype": "fp8", "scaling": "block"}), 404, "not_found"
    )
    assert "16-bit GEMMs only" in message


# --- what the cost model and the transfers learn from -------------------------------------------------


def test_the_cost_model_learns_from_16_bit_problems_only(db_factory: Factory) -> None:
    record(db_factory, FP8_CONFIG, problem=Problem(4096, 4096, 4096, FP8))
    record(db_factory, hopper_config(), problem=Problem(4096, 4096, 4096, "float16"))
    with transaction(db_factory) as s:
        samples, _ = repo.training_samples(s, H200, "hopper-gemm/", source=Source.GPU)
    assert [smp.problem.dtype for smp in samples] == ["float16"]


def test_an_fp8_job_transfers_from_fp8_problems_and_a_16_bit_one_from_16_bit_ones(db_factory: Factory) -> None:
    fp16_config = hopper_config(128, 256, 64, 4, 2, True, persistent=True)
    record(db_factory, FP8_CONFIG, problem=Problem(4096, 4096, 4096, FP8))
    record(db_factory, fp16_config, problem=Problem(4096, 4096, 4096, "float16"))
    branch = BRANCHES[DEFAULT_ARCH]
    with transaction(db_factory) as s:
        to_fp8 = transferred(s, branch, Problem(4096, 4096, 8192, FP8), gpu_name=H200, source=Source.GPU)
        to_bf16 = transferred(s, branch, Problem(4096, 4096, 8192, "bfloat16"), gpu_name=H200, source=Source.GPU)
    assert to_fp8 == [FP8_CONFIG]
    assert to_bf16 == [fp16_config]


# --- serving: tirtune.scaled_gemm, the op, FP8Linear --------------------------------------------------


def h200(_device: Any) -> str:
    return H200


class ScaledLoader:
    """Loader stand-in for a kernel that names its parameters: D = (A @ B.T) times each scale, in bf16."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.calls: list[tuple[torch.Tensor, ...]] = []

    def load(self, path: Path) -> Any:
        outer = self

        class Kernel:
            operands = outer.names

            def __call__(self, *args: torch.Tensor) -> None:
                outer.calls.append(args)
                a, b, d, *extra = args
                ops = dict(zip(outer.names[3:], extra, strict=True))
                d.copy_(reference(a, b, EpilogueSpec(tuple(ops)), **ops))

        return Kernel()


def _fp8(problem: Problem, seed: int = 0) -> Any:
    return draw_inputs(torch, problem.m, problem.n, problem.k, FP8, problem.epilogue, device="cpu", seed=seed)


def test_scaled_gemm_serves_the_tuned_rowcol_kernel_with_its_scales(db_factory: Factory, tmp_path: Path) -> None:
    record(db_factory, FP8_CONFIG, problem=ROWCOL)
    cache_entry(tmp_path, FP8_CONFIG, problem=ROWCOL)
    loader = ScaledLoader(("A", "B", "D", "scale_col", "scale_row"))
    dispatcher = Dispatcher(
        LocalBest(db_factory), ArtifactStore(tmp_path, build=False), loader, device_name=h200, require_lead=False
    )
    inputs = _fp8(ROWCOL)
    per_token = inputs.operands["scale_row"].reshape(-1, 1)  # torch._scaled_mm's (M, 1) and (1, N)
    per_channel = inputs.operands["scale_col"].reshape(1, -1)
    with use(dispatcher):
        d = tirtune.scaled_gemm(inputs.a, inputs.b, per_token, per_channel)
    [args] = loader.calls
    assert args[2] is d and d.dtype == torch.bfloat16 and tuple(d.shape) == (ROWCOL.m, ROWCOL.n)
    assert torch.equal(args[3], inputs.operands["scale_col"]) and torch.equal(args[4], inputs.operands["scale_row"])
    [found] = dispatcher.resolved()
    assert found.problem == ROWCOL and found.kernel is not None


def test_scaled_gemm_runs_torch_scaled_mm_where_nothing_was_tuned(db_factory: Factory, tmp_path: Path) -> None:
    dispatcher = Dispatcher(
        LocalBest(db_factory), ArtifactStore(tmp_path, build=False), ScaledLoader(()), device_name=h200
    )
    tensor = Problem(32, 40, 128, FP8, "scale_a+scale_b")
    inputs = _fp8(tensor, seed=3)
    with use(dispatcher):
        d = tirtune.scaled_gemm(inputs.a, inputs.b, inputs.operands["scale_a"].reshape(()), inputs.operands["scale_b"])
        plain = tirtune.gemm(inputs.a, inputs.b)  # unscaled e4m3: a bf16 D too
    assert d.dtype == plain.dtype == torch.bfloat16
    assert relative_error(d, reference(inputs.a, inputs.b, tensor.epilogue, **inputs.operands)) < tolerance(FP8, 128)
    assert relative_error(plain, inputs.a.float() @ inputs.b.float().T) < tolerance(FP8, 128)
    assert {r.problem for r in dispatcher.resolved()} == {tensor, Problem(32, 40, 128, FP8)}


def test_an_fp16_d_is_its_own_problem_served_by_its_kernel_else_by_torch(db_factory: Factory, tmp_path: Path) -> None:
    """out_dtype=torch.float16 asks for the problem with out_float16: its tuned kernel writes an
    fp16 D (and takes an fp16 bias); where nothing was tuned for it, torch._scaled_mm writes one,
    within fp16's tolerance, and the bf16 problem's kernel is never run in its place."""
    tensor16 = Problem(64, 48, 256, FP8, "scale_a+scale_b+bias+out_float16")
    record(db_factory, FP8_CONFIG, problem=tensor16)
    cache_entry(tmp_path, FP8_CONFIG, problem=tensor16)
    loader = ScaledLoader(("A", "B", "D", "scale_a", "scale_b", "bias"))
    dispatcher = Dispatcher(
        LocalBest(db_factory), ArtifactStore(tmp_path, build=False), loader, device_name=h200, require_lead=False
    )
    inputs = _fp8(tensor16, seed=5)
    assert inputs.operands["bias"].dtype == torch.float16
    scale_a, scale_b = inputs.operands["scale_a"].reshape(()), inputs.operands["scale_b"]
    with use(dispatcher):
        d = tirtune.scaled_gemm(
            inputs.a, inputs.b, scale_a, scale_b, bias=inputs.operands["bias"], out_dtype=torch.float16
        )
        untuned = tirtune.scaled_gemm(inputs.a[:32], inputs.b, scale_a, scale_b, out_dtype=torch.float16)
    [args] = loader.calls
    assert args[2] is d and d.dtype == torch.float16 and torch.equal(args[5], inputs.operands["bias"])
    assert untuned.dtype == torch.float16
    plain = reference(
        inputs.a[:32],
        inputs.b,
        EpilogueSpec(("scale_a", "scale_b")),
        scale_a=inputs.operands["scale_a"],
        scale_b=scale_b,
    )
    assert relative_error(untuned, plain) < tolerance(FP8, 256, "float16") < tolerance(FP8, 256)
    assert {r.problem for r in dispatcher.resolved()} == {
        tensor16,
        Problem(32, 48, 256, FP8, "scale_a+scale_b+out_float16"),
    }
    with FakeTensorMode():
        a = torch.empty(16, 64, dtype=torch.float8_e4m3fn)
        b = torch.empty(32, 64, dtype=torch.float8_e4m3fn)
        faked = torch.ops.tirtune.scaled_gemm(a, b, torch.empty(()), torch.empty(()), None, torch.float16)
        assert faked.dtype == torch.float16


def test_fp8_linear_keeps_a_16_bit_layers_fp16_as_ds_dtype() -> None:
    torch.manual_seed(1)
    dense = torch.nn.Linear(128, 64).to(torch.float16)
    layer = tirtune.nn.FP8Linear.quantize(dense, "rowcol")
    assert layer.out_dtype == torch.float16 and layer.bias is not None and layer.bias.dtype == torch.float16
    x = torch.randn(5, 128, dtype=torch.float16)
    with torch.no_grad():
        y, want = layer(x), dense(x)
    assert y.dtype == torch.float16 and float((y.float() - want.float()).norm() / want.float().norm()) < 0.06
    assert tirtune.nn.FP8Linear.quantize(dense.to(torch.bfloat16)).out_dtype == torch.bfloat16
    with pytest.raises(ValueError, match="out_dtype must be torch.bfloat16 or torch.float16"):
        tirtune.nn.FP8Linear(layer.weight, layer.weight_scale, out_dtype=torch.float32)


def test_the_scales_shapes_name_the_ops_and_a_bad_one_is_refused_with_the_reason() -> None:
    one, m_values, n_values = torch.ones(()), torch.ones(8, 1), torch.ones(1, 16)
    assert sorted(scaling_operands(8, 16, one, torch.ones(1))) == ["scale_a", "scale_b"]
    assert sorted(scaling_operands(8, 16, m_values, n_values)) == ["scale_col", "scale_row"]
    assert sorted(scaling_operands(8, 16, one, torch.ones(16))) == ["scale_a", "scale_col"]
    with pytest.raises(ValueError, match="B's scale must hold one value .* N = 16"):
        scaling_operands(8, 16, one, torch.ones(8))
    with pytest.raises(ValueError, match="A's scale must be float32"):
        scaling_operands(8, 16, torch.ones((), dtype=torch.bfloat16), one)
    a8 = torch.zeros(8, 32).to(torch.float8_e4m3fn)
    with pytest.raises(RuntimeError, match="A and B must be float8_e4m3fn"):
        tirtune.scaled_gemm(a8, torch.zeros(16, 32), one, one)
    with pytest.raises(RuntimeError, match="out_dtype must be torch.bfloat16 or torch.float16"):
        tirtune.scaled_gemm(a8, a8, one, one, out_dtype=torch.float32)
    with pytest.raises(RuntimeError, match=r"bias must be torch.float16 \(D's dtype\)"):
        tirtune.scaled_gemm(a8, a8, one, one, bias=torch.zeros(8, dtype=torch.bfloat16), out_dtype=torch.float16)


def test_the_scaled_op_has_a_fake_and_traces_under_torch_compile() -> None:
    with FakeTensorMode():
        a = torch.empty(16, 64, dtype=torch.float8_e4m3fn)
        b = torch.empty(32, 64, dtype=torch.float8_e4m3fn)
        d = torch.ops.tirtune.scaled_gemm(a, b, torch.empty(16, 1), torch.empty(1, 32), None)
        assert tuple(d.shape) == (16, 32) and d.dtype == torch.bfloat16
    layer = tirtune.nn.FP8Linear.quantize(torch.nn.Linear(64, 32).to(torch.bfloat16))
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), layer(x))
    explained = torch._dynamo.explain(layer)(x)
    assert explained.graph_break_count == 0


@pytest.mark.parametrize("scaling", ["rowcol", "tensor"])
def test_fp8_linear_quantizes_a_layer_and_computes_it_within_e4m3s_error(scaling: str) -> None:
    torch.manual_seed(0)
    dense = torch.nn.Linear(256, 96).to(torch.bfloat16)
    layer = tirtune.nn.FP8Linear.quantize(dense, scaling)
    assert layer.weight.dtype == torch.float8_e4m3fn and layer.scaling == scaling
    x = torch.randn(3, 5, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        y, want = layer(x), dense(x)
    assert y.shape == want.shape and y.dtype == torch.bfloat16
    # e4m3 keeps 3 mantissa bits: each operand is off by up to 1/16, the product by a few percent.
    assert float((y.float() - want.float()).norm() / want.float().norm()) < 0.06


def test_fp8_linear_reads_a_checkpoints_layout_and_refuses_a_bad_one() -> None:
    w = torch.randn(48, 64).to(torch.float8_e4m3fn)
    state = {
        "proj.weight": w,
        "proj.weight_scale": torch.full((48, 1), 0.5),
        "proj.input_scale": torch.tensor(0.25),
        "proj.bias": torch.zeros(48, dtype=torch.bfloat16),
    }
    layer = tirtune.nn.FP8Linear.from_state_dict(state, "proj.")
    assert layer.scaling == "tensor"  # a static activation scale: one value for A
    x = torch.randn(2, 64, dtype=torch.bfloat16)
    x8 = (x.float() / 0.25).clamp(-448, 448).to(torch.float8_e4m3fn)
    want = (x8.float() @ w.float().T) * 0.25 * 0.5
    assert relative_error(layer(x), want) < tolerance(FP8, 64)
    with pytest.raises(ValueError, match="no proj.weight_scale"):
        tirtune.nn.FP8Linear.from_state_dict({"proj.weight": w}, "proj.")
    with pytest.raises(
        ValueError, match=r"weight_scale holds one value, N = 48 or \(ceil\(N/128\), ceil\(K/128\)\) = \(1, 1\)"
    ):
        tirtune.nn.FP8Linear(w, torch.ones(7))
    with pytest.raises(ValueError, match="weight must be 2-D float8_e4m3fn"):
        tirtune.nn.FP8Linear(w.float(), torch.ones(()))
