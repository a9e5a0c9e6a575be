"""torch.ops.tirtune.gemm / gemm_out as torch.library custom ops: their fake implementations give
the right shapes, dtypes and devices (FakeTensorMode, torch.library.opcheck, torch.compile), and
tirtune.nn.Linear is torch.nn.Linear through them (on the CPU every call runs torch.mm)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import tirtune
from tirtune.core.epilogue import EPILOGUE_TEXTS, SWIGLU, EpilogueSpec
from tirtune.dispatch.op import gemm_fused_op, gemm_fused_out_op, gemm_op, gemm_out_op, linear_op
from tirtune.runner.inputs import draw_inputs
from tirtune.runner.verify import TOLERANCE, reference


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_fake_gives_shape_dtype_and_device(dtype: torch.dtype) -> None:
    with FakeTensorMode():
        a = torch.empty(8192, 3584, dtype=dtype)
        b = torch.empty(4608, 3584, dtype=dtype)
        d = torch.ops.tirtune.gemm(a, b)
        assert (tuple(d.shape), d.dtype, d.device) == ((8192, 4608), dtype, a.device)
        out = torch.empty(8192, 4608, dtype=dtype)
        torch.ops.tirtune.gemm_out(a, b, out)


def test_the_fake_on_a_cuda_device_without_a_gpu() -> None:
    """What torch.compile sees for CUDA inputs (this CPU-only torch cannot make real ones)."""
    mode = FakeTensorMode()
    cuda = torch.device("cuda", 0)
    with mode:
        a = FakeTensor(mode, torch.empty(16, 64, dtype=torch.bfloat16, device="meta"), cuda)
        b = FakeTensor(mode, torch.empty(32, 64, dtype=torch.bfloat16, device="meta"), cuda)
        d = torch.ops.tirtune.gemm(a, b)
        assert (tuple(d.shape), d.dtype, d.device) == ((16, 32), torch.bfloat16, cuda)


def test_the_fake_refuses_what_the_op_refuses() -> None:
    with FakeTensorMode():
        a = torch.empty(16, 64, dtype=torch.float16)
        with pytest.raises(RuntimeError, match="B must be"):
            torch.ops.tirtune.gemm(a, torch.empty(32, 48, dtype=torch.float16))
        with pytest.raises(RuntimeError, match="A is torch.float16, B is torch.bfloat16"):
            torch.ops.tirtune.gemm(a, torch.empty(32, 64, dtype=torch.bfloat16))


def test_opcheck() -> None:
    a = torch.randn(16, 64, dtype=torch.float32, requires_grad=True)
    b = torch.randn(32, 64, dtype=torch.float32, requires_grad=True)
    torch.library.opcheck(gemm_op, (a, b))
    torch.library.opcheck(gemm_out_op, (a.detach(), b.detach(), torch.empty(16, 32)))
    torch.library.opcheck(linear_op, (a, b, torch.randn(32, dtype=torch.float32, requires_grad=True)))


def test_the_linear_fake_checks_the_bias() -> None:
    with FakeTensorMode():
        a, b = torch.empty(16, 64, dtype=torch.float16), torch.empty(32, 64, dtype=torch.float16)
        assert torch.ops.tirtune.linear(a, b, torch.empty(32, dtype=torch.float16)).shape == (16, 32)
        with pytest.raises(RuntimeError, match="N = 32 values"):
            torch.ops.tirtune.linear(a, b, torch.empty(31, dtype=torch.float16))
        with pytest.raises(RuntimeError, match="the bias is torch.float32"):
            torch.ops.tirtune.linear(a, b, torch.empty(32, dtype=torch.float32))


def test_it_traces_under_torch_compile() -> None:
    layer = tirtune.nn.Linear(64, 32)
    x = torch.randn(4, 8, 64)
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), layer(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_is_a_drop_in_for_torch_nn_linear(dtype: torch.dtype, bias: bool) -> None:
    torch.manual_seed(0)
    ref = torch.nn.Linear(96, 48, bias=bias, dtype=dtype)
    mine = tirtune.nn.Linear(96, 48, bias=bias, dtype=dtype)
    assert mine.state_dict().keys() == ref.state_dict().keys()
    mine.load_state_dict(ref.state_dict())
    x = torch.randn(3, 5, 96, dtype=dtype)
    close(mine(x), ref(x))
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    mine(x1).sum().backward()
    ref(x2).sum().backward()
    close(x1.grad, x2.grad)
    close(mine.weight.grad, ref.weight.grad)
    shared = tirtune.nn.Linear.from_torch(ref)
    assert shared.weight is ref.weight and repr(shared) == repr(ref)
    close(shared(x), ref(x))


def close(mine: torch.Tensor | None, ref: torch.Tensor | None) -> None:
    """float32: equal to rounding; bf16: within the project's tolerance (tirtune.runner.verify),
    since torch.nn.Linear adds the bias inside the GEMM (one rounding) and tirtune after it (two)."""
    assert mine is not None and ref is not None and mine.shape == ref.shape and mine.dtype == ref.dtype
    if ref.dtype == torch.float32:
        torch.testing.assert_close(mine, ref)
        return
    error = torch.linalg.vector_norm(mine.float() - ref.float()) / torch.linalg.vector_norm(ref.float())
    assert error <= TOLERANCE["bfloat16"]


def test_importing_tirtune_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, tirtune; assert 'torch' not in sys.modules; tirtune.TirtuneError; print('ok')"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "ok\n"


def test_eager_calls_skip_the_op_only_when_nothing_is_traced_or_differentiated() -> None:
    from tirtune.dispatch.op import _eager

    a, w = torch.randn(4, 8), torch.nn.Parameter(torch.randn(2, 8))
    assert not _eager(a, w)  # autograd needs the op's formula
    with torch.no_grad():
        assert _eager(a, w)
        with FakeTensorMode() as mode:
            assert not _eager(mode.from_tensor(a), mode.from_tensor(w))


def test_the_readme_example_runs() -> None:
    """README.md's "Using a tuned kernel" block, on CPU tensors (every call runs torch.mm here)."""
    from types import SimpleNamespace

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("### Using a tuned kernel", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    a, b = torch.randn(16, 3584, dtype=torch.bfloat16), torch.randn(4608, 3584, dtype=torch.bfloat16)
    down = torch.nn.Linear(18944, 3584, bias=False)
    gate, up = (torch.nn.Linear(3584, 256, bias=False, dtype=torch.bfloat16) for _ in range(2))
    model = SimpleNamespace(layers=[SimpleNamespace(mlp=SimpleNamespace(gate_proj=gate, up_proj=up, down_proj=down))])
    bias, residual = torch.randn(4608, dtype=torch.bfloat16), torch.randn(16, 4608, dtype=torch.bfloat16)
    scope = {"a": a, "b": b, "model": model, "bias": bias, "residual": residual}
    exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 (our own README)
    close(scope["y"], torch.addmm(bias, a, b.T) + residual)
    assert isinstance(scope["layer"], tirtune.nn.Linear) and scope["layer"].weight is down.weight
    assert tuple(scope["d"].shape) == (16, 4608)
    with torch.no_grad():
        close(scope["h"], torch.nn.functional.silu(gate(a)) * up(a))
    assert isinstance(scope["gate_up"], tirtune.nn.GateUp)


# The fused call: tirtune.gemm(a, b, bias=..., residual=...) and torch.ops.tirtune.gemm_fused(_out).

# Every valid spec with an operand but the block scales, which dequantize FP8 operands only, and
# an fp16 D (out_float16), which is FP8's choice of D.
SPECS = [
    EpilogueSpec.parse(t)
    for t in EPILOGUE_TEXTS
    if t not in ("none", SWIGLU) and not EpilogueSpec.parse(t).block_scaled and not EpilogueSpec.parse(t).out_float16
]
FP8_ONLY_SPECS = [
    EpilogueSpec.parse(t) for t in EPILOGUE_TEXTS if EpilogueSpec.parse(t).block_scaled or t == "bias+out_float16"
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_the_unfused_fallback_matches_the_float32_reference(spec: EpilogueSpec, dtype: torch.dtype) -> None:
    """No kernel serves a CPU tensor: cuBLAS's part (torch.mm / torch.addmm) then each op in eager
    torch, within the project's tolerance of the float32 reference of the spec."""
    name = str(dtype).removeprefix("torch.")
    inputs = draw_inputs(torch, 48, 40, 96, name, spec, device="cpu", seed=3)
    d = tirtune.dispatch.current().gemm_fused(inputs.a, inputs.b, spec, inputs.operands)
    ref = reference(inputs.a, inputs.b, spec, **inputs.operands)
    assert d.dtype == dtype and d.shape == (48, 40)
    if dtype == torch.float32:
        torch.testing.assert_close(d, ref)
        return
    error = torch.linalg.vector_norm(d.float() - ref) / torch.linalg.vector_norm(ref)
    assert error <= TOLERANCE[name], (spec, float(error))


@pytest.mark.parametrize("spec", FP8_ONLY_SPECS, ids=str)
def test_the_unfused_fallback_refuses_fp8s_ops_on_16_bit_operands(spec: EpilogueSpec) -> None:
    """The block scales dequantize FP8 operands, and out_float16 picks an FP8 product's D: with
    fp16 operands the fallback says so rather than returning a product that ignores them."""
    inputs = draw_inputs(torch, 48, 40, 256, "float16", spec, device="cpu", seed=3)
    with pytest.raises(tirtune.TirtuneError, match="FP8 operands"):
        tirtune.dispatch.current().gemm_fused(inputs.a, inputs.b, spec, inputs.operands)


@pytest.mark.parametrize("with_bias,with_residual", [(True, False), (False, True), (True, True)])
def test_tirtune_gemm_adds_the_bias_and_the_residual(with_bias: bool, with_residual: bool) -> None:
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(24, 64, generator=gen), torch.randn(40, 64, generator=gen)
    bias = torch.randn(40, generator=gen) if with_bias else None
    residual = torch.randn(24, 40, generator=gen) if with_residual else None
    want = a @ b.T + (0 if bias is None else bias) + (0 if residual is None else residual)
    torch.testing.assert_close(tirtune.gemm(a, b, bias=bias, residual=residual), want)
    out = torch.empty(24, 40)
    assert tirtune.gemm(a, b, bias=bias, residual=residual, out=out) is out
    torch.testing.assert_close(out, want)
    with torch.no_grad():  # through the op when traced or differentiated, the same figures
        torch.testing.assert_close(torch.ops.tirtune.gemm_fused(a, b, bias, residual), want)
    # the plain call is unchanged: no epilogue
    torch.testing.assert_close(tirtune.gemm(a, b), a @ b.T)


def test_out_must_not_overlap_the_residual() -> None:
    a, b, residual = torch.randn(8, 16), torch.randn(8, 16), torch.randn(8, 8)
    with pytest.raises(ValueError, match="out overlaps the residual"):
        tirtune.gemm(a, b, residual=residual, out=residual)
    with pytest.raises(ValueError, match="out overlaps the residual"):
        torch.ops.tirtune.gemm_fused_out(a, b, None, residual, residual)
    whole = torch.randn(16, 8)
    tirtune.gemm(a, b, residual=whole[:8], out=whole[8:])  # the same storage, apart: fine
    torch.testing.assert_close(whole[8:], a @ b.T + whole[:8])


def test_the_fused_fake_gives_shape_dtype_and_device() -> None:
    mode = FakeTensorMode()
    cuda = torch.device("cuda", 0)

    def fake(*shape: int) -> torch.Tensor:
        return FakeTensor(mode, torch.empty(*shape, dtype=torch.bfloat16, device="meta"), cuda)

    with mode:
        a, b = fake(16, 64), fake(32, 64)
        for bias, residual in [(fake(32), None), (None, fake(16, 32)), (fake(32), fake(16, 32))]:
            d = torch.ops.tirtune.gemm_fused(a, b, bias, residual)
            assert (tuple(d.shape), d.dtype, d.device) == ((16, 32), torch.bfloat16, cuda)
            torch.ops.tirtune.gemm_fused_out(a, b, bias, residual, fake(16, 32))


def test_wrong_operands_are_refused_with_the_reason() -> None:
    a, b = torch.randn(16, 64, dtype=torch.float16), torch.randn(32, 64, dtype=torch.float16)
    bad = [
        ({"bias": torch.randn(31, dtype=torch.float16)}, "the bias must have N = 32 values"),
        ({"bias": torch.randn(16, 32, dtype=torch.float16)}, "the bias must have N = 32 values"),
        ({"bias": torch.randn(32)}, "the bias is torch.float32"),
        ({"residual": torch.randn(32, 16, dtype=torch.float16)}, r"the residual must be \(M, N\) = \(16, 32\)"),
        ({"residual": torch.randn(32, dtype=torch.float16)}, r"the residual must be \(M, N\)"),
        ({"residual": torch.randn(16, 32, dtype=torch.bfloat16)}, "the residual is torch.bfloat16"),
        ({"residual": torch.randn(16, 32, dtype=torch.float16, device="meta")}, "the residual is .* on meta"),
    ]
    for kwargs, reason in bad:
        with pytest.raises(RuntimeError, match=reason):
            tirtune.gemm(a, b, **kwargs)  # eager
        with FakeTensorMode() as mode, pytest.raises(RuntimeError, match=reason):
            fakes = {name: mode.from_tensor(t) for name, t in kwargs.items()}
            torch.ops.tirtune.gemm_fused(
                mode.from_tensor(a), mode.from_tensor(b), fakes.get("bias"), fakes.get("residual")
            )
    with pytest.raises(RuntimeError, match="out must be torch.float16 of shape"):
        tirtune.gemm(a, b, bias=torch.randn(32, dtype=torch.float16), out=torch.empty(16, 31, dtype=torch.float16))


def test_the_fused_opcheck() -> None:
    a = torch.randn(16, 64, requires_grad=True)
    b = torch.randn(32, 64, requires_grad=True)
    bias, residual = torch.randn(32, requires_grad=True), torch.randn(16, 32, requires_grad=True)
    torch.library.opcheck(gemm_fused_op, (a, b, bias, residual))
    torch.library.opcheck(gemm_fused_op, (a, b, None, residual))
    torch.library.opcheck(gemm_fused_out_op, (a.detach(), b.detach(), bias.detach(), None, torch.empty(16, 32)))


def test_a_fused_call_traces_under_torch_compile_without_a_graph_break() -> None:
    def block(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return tirtune.gemm(x, w, bias=bias, residual=residual).relu()

    x, w, bias, residual = torch.randn(8, 64), torch.randn(32, 64), torch.randn(32), torch.randn(8, 32)
    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, w, bias, residual), (x @ w.T + bias + residual).relu())
    explained = torch._dynamo.explain(block)(x, w, bias, residual)
    assert explained.graph_break_count == 0 and explained.graph_count == 1


@pytest.mark.parametrize("bias", [True, False])
def test_linear_adds_a_residual(bias: bool) -> None:
    torch.manual_seed(0)
    ref = torch.nn.Linear(96, 48, bias=bias)
    mine = tirtune.nn.Linear.from_torch(ref)
    x, residual = torch.randn(3, 5, 96), torch.randn(3, 5, 48)
    torch.testing.assert_close(mine(x, residual), ref(x) + residual)
    torch.testing.assert_close(mine(x), ref(x))  # none given: as before
    compiled = torch.compile(mine, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, residual), ref(x) + residual)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    r1, r2 = residual.clone().requires_grad_(), residual.clone().requires_grad_()
    mine(x1, r1).square().sum().backward()
    grad_w = mine.weight.grad.clone()  # type: ignore[union-attr]
    grad_b = None if ref.bias is None or ref.bias.grad is None else ref.bias.grad.clone()
    ref.zero_grad()
    (ref(x2) + r2).square().sum().backward()
    for got, want in [(x1.grad, x2.grad), (r1.grad, r2.grad), (grad_w, ref.weight.grad)]:
        torch.testing.assert_close(got, want)
    if bias:
        torch.testing.assert_close(grad_b, ref.bias.grad)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match=r"the residual must have the output's shape \(3, 5, 48\)"):
        mine(x, residual.reshape(5, 3, 48))
