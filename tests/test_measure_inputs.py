"""The measuring child's inputs for fused problems, on CPU tensors (tirtune.runner.inputs and
`measure.check`): the operands drawn per epilogue (shape, dtype, order), the argument list a
loaded kernel gets, the unfused baseline against the float32 reference, and a plain problem's
inputs, arguments and baseline exactly as they were before epilogues existed.

The kernels here are stand-ins at our own seam, the loaded kernel's call shape
(`launcher.load_artifact`: fn(A, B, D, *operands), `fn.operands` its parameter names when it
has them): each computes in torch from the arguments it is handed, so a wrong order or a missing
operand shows in its result."""

from __future__ import annotations

from typing import Any

import pytest

from tirtune.core import EpilogueSpec, Problem
from tirtune.core.epilogue import EPILOGUE_NONE
from tirtune.runner.inputs import Inputs, baseline, baseline_label, draw_inputs, operand_mismatch
from tirtune.runner.measure import check
from tirtune.runner.verify import TOLERANCE, reference, relative_error

torch = pytest.importorskip("torch")

M, N, K = 96, 80, 256
SPECS = ["bias", "residual", "bias+residual", "scale_row", "scale_col", "scale_col+bias",
         "scale_row+scale_col+bias+residual"]
TYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def _draw(text: str, dtype: str = "float16", seed: int = 5) -> Inputs:
    return draw_inputs(torch, M, N, K, dtype, EpilogueSpec.parse(text), device="cpu", seed=seed)


def test_a_plain_problem_draws_exactly_the_inputs_it_drew_before() -> None:
    """The child's old draw: one generator, A then B, nothing after."""
    gen = torch.Generator(device="cpu").manual_seed(11)
    a = torch.randn(M, K, dtype=torch.bfloat16, device="cpu", generator=gen)
    b = torch.randn(N, K, dtype=torch.bfloat16, device="cpu", generator=gen)
    inputs = _draw("none", "bfloat16", seed=11)
    assert torch.equal(inputs.a, a) and torch.equal(inputs.b, b)
    assert inputs.epilogue == EPILOGUE_NONE and dict(inputs.operands) == {}
    d = torch.empty(M, N, dtype=torch.bfloat16)
    args = inputs.arguments(d, None)
    assert len(args) == 3 and args[0] is inputs.a and args[1] is inputs.b and args[2] is d
    assert inputs.arguments(d, ("A", "B", "D")) == args


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("text", SPECS)
def test_each_operand_is_drawn_of_its_shape_and_dtype_in_parameter_order(text: str, dtype: str) -> None:
    problem = Problem(M, N, K, dtype, text)
    inputs = _draw(text, dtype)
    wanted = problem.operands[3:]
    assert list(inputs.operands) == [o.name for o in wanted] == list(problem.epilogue.ops)
    for operand in wanted:
        value = inputs.operands[operand.name]
        assert tuple(value.shape) == operand.shape and value.dtype == TYPES[operand.dtype], operand
        assert value.device.type == "cpu" and bool(value.abs().sum() > 0)
    # A and B are the plain problem's for the same seed; the operands come after them.
    plain = _draw("none", dtype)
    assert torch.equal(inputs.a, plain.a) and torch.equal(inputs.b, plain.b)
    d = torch.empty(M, N, dtype=TYPES[dtype])
    args = inputs.arguments(d, tuple(o.name for o in problem.operands))
    assert len(args) == 3 + len(wanted)
    assert all(x is inputs.operands[o.name] for x, o in zip(args[3:], wanted, strict=True))


def test_fresh_draws_differ_by_seed_and_repeat_by_seed() -> None:
    one, again, other = _draw("bias+residual", seed=1), _draw("bias+residual", seed=1), _draw("bias+residual", seed=2)
    assert torch.equal(one.operands["residual"], again.operands["residual"])
    assert not torch.equal(one.operands["residual"], other.operands["residual"])
    assert not torch.equal(one.operands["bias"], other.operands["bias"])


def test_the_arguments_follow_the_kernels_own_names() -> None:
    inputs = _draw("bias+residual")
    d = torch.empty(M, N, dtype=torch.float16)
    bias, residual = inputs.operands["bias"], inputs.operands["residual"]
    spec_order = inputs.arguments(d, None)
    assert spec_order[3] is bias and spec_order[4] is residual
    named = inputs.arguments(d, ("A", "B", "D", "residual", "bias"))
    assert named[3] is residual and named[4] is bias


def test_a_kernel_whose_parameters_are_not_the_problems_is_named() -> None:
    both = EpilogueSpec.parse("bias+residual")
    assert operand_mismatch(None, both) is None  # a `.so` wrapper: it checks count and shapes itself
    assert operand_mismatch(("A", "B", "D", "bias", "residual"), both) is None
    assert operand_mismatch(("A", "B", "D", "residual", "bias"), both) is None
    assert operand_mismatch(("A", "B", "D"), EPILOGUE_NONE) is None
    assert operand_mismatch(("A", "B", "D"), both) == (
        "the kernel takes (A, B, D) but a problem of epilogue bias+residual gives (A, B, D, bias, residual)"
    )
    assert operand_mismatch(("A", "B", "D", "bias"), EPILOGUE_NONE) is not None
    assert operand_mismatch(("A", "B", "D", "bias"), both) is not None
    assert operand_mismatch(("D", "B", "A", "bias", "residual"), both) is not None


# --- the baseline ----------------------------------------------------------------------------------


def test_a_plain_problems_baseline_is_cublas_alone_bit_for_bit() -> None:
    inputs = _draw("none")
    d = torch.full((M, N), float("nan"), dtype=torch.float16)
    baseline(torch, inputs, d)()
    assert torch.equal(d, torch.mm(inputs.a, inputs.b.T))
    assert baseline_label(EPILOGUE_NONE) == "torch.mm"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("text", SPECS)
def test_the_unfused_baseline_computes_the_epilogue(text: str, dtype: str) -> None:
    """cuBLAS then each op eagerly: within the kernels' tolerance of the float32 reference (each
    step rounds once more to D's dtype), and far from the product without the ops."""
    inputs = _draw(text, dtype)
    d = torch.full((M, N), float("nan"), dtype=TYPES[dtype])
    baseline(torch, inputs, d)()
    ref = reference(inputs.a, inputs.b, inputs.epilogue, **inputs.operands)
    assert relative_error(d, ref) <= TOLERANCE[dtype], relative_error(d, ref)
    assert relative_error(d, reference(inputs.a, inputs.b)) > 0.1


def test_the_baseline_is_named_for_what_it_runs() -> None:
    names = {text: baseline_label(EpilogueSpec.parse(text)) for text in SPECS}
    assert names == {
        "bias": "torch.addmm(bias)",
        "residual": "torch.mm + residual",
        "bias+residual": "torch.addmm(bias) + residual",
        "scale_row": "torch.mm * scale_row",
        "scale_col": "torch.mm * scale_col",
        "scale_col+bias": "torch.mm * scale_col + bias",
        "scale_row+scale_col+bias+residual": "torch.mm * scale_row * scale_col + bias + residual",
    }


# --- what the child hands a loaded kernel, and how it judges it --------------------------------------


class StandIn:
    """A loaded kernel's call shape: fn(A, B, D, *operands), reading its operands by its own
    parameter names (`operands`; None: the problem's order, as a `.so` wrapper's)."""

    def __init__(self, epilogue: str, operands: tuple[str, ...] | None = None, drop: str = "") -> None:
        self.spec = EpilogueSpec.parse(epilogue)
        self.operands = operands
        self.drop = drop
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, a: Any, b: Any, d: Any, *rest: Any) -> None:
        self.calls.append((a, b, d, *rest))
        names = self.operands[3:] if self.operands is not None else self.spec.ops
        given = dict(zip(names, rest, strict=True))
        if self.drop:
            given[self.drop] = torch.zeros_like(given[self.drop])
        d.copy_(reference(a, b, self.spec, **given))


@pytest.mark.parametrize("names", [None, ("A", "B", "D", "bias", "residual"), ("A", "B", "D", "residual", "bias")],
                         ids=["so-wrapper", "spec-order", "spec-other-order"])
def test_a_fused_kernel_gets_its_operands_after_d_and_is_judged_against_the_epilogue(names: Any) -> None:
    inputs = _draw("bias+residual")
    kernel = StandIn("bias+residual", names)
    verdict, error = check(kernel, inputs, "float16")
    assert verdict is None and error is not None and 0 < error <= TOLERANCE["float16"]
    assert len(kernel.calls) == 2  # verify runs it twice on the same inputs
    a, b, d, *rest = kernel.calls[0]
    assert a is inputs.a and b is inputs.b and tuple(d.shape) == (M, N)
    order = names[3:] if names else ("bias", "residual")
    assert all(x is inputs.operands[name] for x, name in zip(rest, order, strict=True))


@pytest.mark.parametrize("dropped", ["bias", "residual"])
def test_a_fused_kernel_that_drops_an_op_is_a_wrong_result(dropped: str) -> None:
    verdict, error = check(StandIn("bias+residual", drop=dropped), _draw("bias+residual"), "float16")
    assert verdict is not None and verdict.outcome == "WRONG_RESULT" and "relative error" in verdict.message
    assert error is not None and error > 10 * TOLERANCE["float16"]


def test_a_plain_kernel_given_a_fused_problem_is_never_launched() -> None:
    kernel = StandIn("none", ("A", "B", "D"))
    verdict, error = check(kernel, _draw("bias"), "float16")
    assert verdict is not None and verdict.outcome == "LAUNCH_ERROR" and error is None
    assert verdict.message.startswith("the kernel takes (A, B, D) but a problem of epilogue bias")
    assert kernel.calls == []


@pytest.mark.parametrize("names", [None, ("A", "B", "D")], ids=["so", "cubin"])
def test_a_plain_kernel_gets_exactly_a_b_d(names: Any) -> None:
    inputs = _draw("none")
    kernel = StandIn("none", names)
    verdict, error = check(kernel, inputs, "float16")
    assert verdict is None and error is not None and error <= TOLERANCE["float16"]
    assert [len(call) for call in kernel.calls] == [3, 3]
    assert kernel.calls[0][0] is inputs.a and kernel.calls[0][1] is inputs.b
