"""torch.ops.tirtune.gemm / gemm_out as torch.library custom ops: their fake implementations give
the right shapes, dtypes and devices (FakeTensorMode, torch.library.opcheck, torch.compile), and
tirtune.nn.Linear is torch.nn.Linear through them (on the CPU every call runs torch.mm)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import tirtune
from tirtune.dispatch.op import gemm_op, gemm_out_op, linear_op
from tirtune.runner.verify import TOLERANCE


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
    model = SimpleNamespace(layers=[SimpleNamespace(mlp=SimpleNamespace(down_proj=down))])
    scope = {"a": a, "b": b, "model": model}
    exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 (our own README)
    assert isinstance(scope["layer"], tirtune.nn.Linear) and scope["layer"].weight is down.weight
    assert tuple(scope["d"].shape) == (16, 4608)
