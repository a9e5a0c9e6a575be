"""`torch.ops.tirtune.gemm` and `torch.ops.tirtune.gemm_out`: the dispatcher as torch.library
custom ops, with fake (meta) implementations so they trace under torch.compile and FakeTensorMode,
and an autograd formula so `tirtune.nn.Linear` trains.

    gemm(a, b) -> d            D = A @ B.T, A (M, K), B (N, K), D (M, N), same dtype and device
    gemm_out(a, b, out) -> ()  the same into `out` (no allocation: capturable in a CUDA graph)
    linear(a, b, bias) -> d    D = A @ B.T + bias (N values): where the bias goes is the
                               dispatcher's choice (`Dispatcher.linear`)
"""

from __future__ import annotations

from typing import Any

import torch

from tirtune.dispatch import default

__all__ = ["gemm", "gemm_op", "gemm_out_op", "linear", "linear_op"]


def _check(a: torch.Tensor, b: torch.Tensor) -> None:
    torch._check(
        a.dim() == 2 and b.dim() == 2, lambda: f"tirtune.gemm takes 2-D A and B, got {a.dim()}-D and {b.dim()}-D"
    )
    torch._check(
        a.shape[1] == b.shape[1],
        lambda: (
            f"tirtune.gemm: A is (M, {a.shape[1]}), B must be (N, {a.shape[1]}) (D = A @ B.T), got B {tuple(b.shape)}"
        ),
    )
    torch._check(a.dtype == b.dtype, lambda: f"tirtune.gemm: A is {a.dtype}, B is {b.dtype}")
    torch._check(a.device == b.device, lambda: f"tirtune.gemm: A is on {a.device}, B on {b.device}")


def _check_plain(a: torch.Tensor, b: torch.Tensor) -> None:
    """`_check` for concrete tensors, in plain Python (torch._check costs ~15 us a call)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1] or a.dtype != b.dtype or a.device != b.device:
        _check(a, b)  # raises with the reason


@torch.library.custom_op("tirtune::gemm", mutates_args=())
def gemm_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check(a, b)
    return default.current().gemm(a, b)  # type: ignore[no-any-return]


@gemm_op.register_fake
def _(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check(a, b)
    return a.new_empty((a.shape[0], b.shape[0]))


@torch.library.custom_op("tirtune::gemm_out", mutates_args=("out",))
def gemm_out_op(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    _check(a, b)
    torch._check(
        tuple(out.shape) == (a.shape[0], b.shape[0]) and out.dtype == a.dtype,
        lambda: (
            f"tirtune.gemm: out must be {a.dtype} of shape ({a.shape[0]}, {b.shape[0]}), "
            f"got {out.dtype} {tuple(out.shape)}"
        ),
    )
    default.current().gemm(a, b, out)


@gemm_out_op.register_fake
def _(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    _check(a, b)


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _eager(a: torch.Tensor, b: torch.Tensor) -> bool:
    if type(a) not in _PLAIN or type(b) not in _PLAIN or torch.compiler.is_compiling():
        return False
    return not (torch.is_grad_enabled() and (a.requires_grad or b.requires_grad))


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    a, b = ctx.saved_tensors
    # D = A B^T: dA = dD B, dB = dD^T A (cuBLAS; the tuned kernels are forward GEMMs of one layout).
    grad_a = torch.mm(grad, b) if ctx.needs_input_grad[0] else None
    grad_b = torch.mm(grad.T, a) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b


def _save(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0], inputs[1])


gemm_op.register_autograd(_backward, setup_context=_save)


def gemm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """D = A @ B.T by the tuned TIRx kernel of this problem on this GPU (torch.mm where there is
    none). A (M, K) and B (N, K), fp16 or bf16, on one CUDA device; `out`: write D there.

    Called eagerly on plain tensors with nothing to differentiate, it goes to the dispatcher
    straight: a custom op's Python dispatch costs about 100 us of host time a call (measured on
    this project's CPU machine), longer than a decode GEMM runs on an H200. Under torch.compile,
    a fake-tensor trace or autograd it goes through `torch.ops.tirtune.gemm`."""
    if _eager(a, b):
        _check_plain(a, b)
        return default.current().gemm(a, b, out)  # type: ignore[no-any-return]
    if out is None:
        return torch.ops.tirtune.gemm(a, b)  # type: ignore[no-any-return]
    torch.ops.tirtune.gemm_out(a, b, out)
    return out


def _check_bias(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> None:
    torch._check(
        bias.dim() == 1 and bias.shape[0] == b.shape[0],
        lambda: f"tirtune.linear: the bias must have N = {b.shape[0]} values, got {tuple(bias.shape)}",
    )
    torch._check(
        bias.dtype == a.dtype and bias.device == a.device,
        lambda: f"tirtune.linear: the bias is {bias.dtype} on {bias.device}, A {a.dtype} on {a.device}",
    )


@torch.library.custom_op("tirtune::linear", mutates_args=())
def linear_op(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    _check(a, b)
    _check_bias(a, b, bias)
    return default.current().linear(a, b, bias)  # type: ignore[no-any-return]


@linear_op.register_fake
def _(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    _check(a, b)
    _check_bias(a, b, bias)
    return a.new_empty((a.shape[0], b.shape[0]))


def _linear_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    grad_a, grad_b = _backward(ctx, grad)
    return grad_a, grad_b, grad.sum(0) if ctx.needs_input_grad[2] else None


linear_op.register_autograd(_linear_backward, setup_context=_save)


def linear(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """A @ B.T (+ bias, N values). Eagerly with nothing to differentiate it goes to the
    dispatcher straight (`Dispatcher.linear`: the tuned kernel and an in-place add where its lead
    pays for the add, else torch.addmm); traced or differentiated, through `torch.ops.tirtune.linear`,
    which makes the same choice when it runs."""
    if bias is None:
        return gemm(a, b)
    if _eager(a, b) and type(bias) in _PLAIN and not (torch.is_grad_enabled() and bias.requires_grad):
        _check_plain(a, b)
        return default.current().linear(a, b, bias)  # type: ignore[no-any-return]
    return torch.ops.tirtune.linear(a, b, bias)  # type: ignore[no-any-return]
