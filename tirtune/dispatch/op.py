"""`torch.ops.tirtune.gemm` and `torch.ops.tirtune.gemm_out`: the dispatcher as torch.library
custom ops, with fake (meta) implementations so they trace under torch.compile and FakeTensorMode,
and an autograd formula so `tirtune.nn.Linear` trains.

    gemm(a, b) -> d            D = A @ B.T, A (M, K), B (N, K), D (M, N), same dtype and device
    gemm_out(a, b, out) -> ()  the same into `out` (no allocation: capturable in a CUDA graph)
    linear(a, b, bias) -> d    D = A @ B.T + bias (N values): where the bias goes is the
                               dispatcher's choice (`Dispatcher.linear`)
    gemm_fused(a, b, bias?, residual?) -> d
                               D = A @ B.T (+ bias, N values) (+ residual, (M, N)): the tuned
                               kernel of the fused problem, else cuBLAS and the adds in eager
                               torch (`Dispatcher.gemm_fused`)
    gemm_fused_out(a, b, bias?, residual?, out) -> ()
                               the same into `out`, which must not overlap the residual
    gemm_swiglu(a, b) -> d     D = silu(A @ gate.T) * (A @ up.T), B the packed (2N, K) weight
                               (`pack_gate_up`), D (M, N): the tuned swiglu kernel, else one
                               cuBLAS GEMM over the packed weight and silu, multiply in eager torch
    gemm_swiglu_out(a, b, out) -> ()
                               the same into `out`

The plain ops are unchanged by the fused ones: `tirtune.gemm(a, b)` without a bias or residual
takes the same path as before they existed.
"""

from __future__ import annotations

from typing import Any

import torch

from tirtune.core.epilogue import GATE_GROUP, SWIGLU, EpilogueSpec
from tirtune.dispatch import default
from tirtune.runner.inputs import unpack_gate_up

__all__ = [
    "gemm",
    "gemm_fused_op",
    "gemm_fused_out_op",
    "gemm_op",
    "gemm_out_op",
    "gemm_swiglu_op",
    "gemm_swiglu_out_op",
    "linear",
    "linear_op",
    "pack_gate_up",
    "unpack_gate_up",
]


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


def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    activation: str | None = None,
) -> torch.Tensor:
    """D = A @ B.T by the tuned TIRx kernel of this problem on this GPU (torch.mm where there is
    none). A (M, K) and B (N, K), fp16 or bf16, on one CUDA device; `out`: write D there.
    `bias` (N values) and `residual` ((M, N)), of A's dtype and device, are added to the product
    in the kernel's epilogue where a kernel with them fused was tuned for the problem, else after
    cuBLAS's GEMM in eager torch (`gemm_fused`); `out` must not overlap the residual.

    `activation="swiglu"`: B is the packed (2N, K) gate and up weight (`pack_gate_up`) and D (M, N)
    = silu(A @ gate.T) * (A @ up.T), by the tuned swiglu kernel, else one cuBLAS GEMM over the
    packed weight and silu, multiply in eager torch (`gemm_swiglu`); alone (no bias, no residual).

    Called eagerly on plain tensors with nothing to differentiate, it goes to the dispatcher
    straight: a custom op's Python dispatch costs about 100 us of host time a call (measured on
    this project's CPU machine), longer than a decode GEMM runs on an H200. Under torch.compile,
    a fake-tensor trace or autograd it goes through `torch.ops.tirtune.gemm`."""
    if activation is not None:
        if activation != SWIGLU:
            raise ValueError(f"tirtune.gemm: activation={activation!r}: the one fused activation is 'swiglu'")
        if bias is not None or residual is not None:
            raise ValueError("tirtune.gemm: activation='swiglu' stands alone (no bias, no residual)")
        return _gemm_swiglu(a, b, out)
    if bias is not None or residual is not None:
        return _gemm_fused(a, b, bias, residual, out)
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


_SPECS = {
    (True, False): EpilogueSpec(("bias",)),
    (False, True): EpilogueSpec(("residual",)),
    (True, True): EpilogueSpec(("bias", "residual")),
}


def _check_operands(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None) -> None:
    """The fused epilogue's operands: a bias of N values and a residual of (M, N), both of A's
    dtype and device (`core.epilogue`: they are of D's dtype)."""
    m, n = a.shape[0], b.shape[0]
    if bias is not None:
        torch._check(
            bias.dim() == 1 and bias.shape[0] == n,
            lambda: f"tirtune.gemm: the bias must have N = {n} values, got shape {tuple(bias.shape)}",
        )
        torch._check(
            bias.dtype == a.dtype and bias.device == a.device,
            lambda: f"tirtune.gemm: the bias is {bias.dtype} on {bias.device}, A {a.dtype} on {a.device}",
        )
    if residual is not None:
        torch._check(
            residual.dim() == 2 and residual.shape[0] == m and residual.shape[1] == n,
            lambda: f"tirtune.gemm: the residual must be (M, N) = ({m}, {n}), got {tuple(residual.shape)}",
        )
        torch._check(
            residual.dtype == a.dtype and residual.device == a.device,
            lambda: f"tirtune.gemm: the residual is {residual.dtype} on {residual.device}, A {a.dtype} on {a.device}",
        )


def _check_out(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    torch._check(
        tuple(out.shape) == (a.shape[0], b.shape[0]) and out.dtype == a.dtype,
        lambda: (
            f"tirtune.gemm: out must be {a.dtype} of shape ({a.shape[0]}, {b.shape[0]}), "
            f"got {out.dtype} {tuple(out.shape)}"
        ),
    )


def _overlap(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether two concrete tensors share any byte of memory."""
    if x.device != y.device or x.untyped_storage().data_ptr() != y.untyped_storage().data_ptr():
        return False

    def span(t: torch.Tensor) -> tuple[int, int]:
        start = t.data_ptr()
        last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
        return start, start + (last + 1) * t.element_size()

    (x0, x1), (y0, y1) = span(x), span(y)
    return x0 < y1 and y0 < x1


def _run_fused(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    residual: torch.Tensor | None,
    out: torch.Tensor | None,
) -> torch.Tensor:
    if out is not None and residual is not None and _overlap(out, residual):
        raise ValueError(
            "tirtune.gemm: out overlaps the residual; the fused kernel reads the residual while it "
            "writes D (its pointers are __restrict__): pass another out, or none"
        )
    operands = {} if bias is None else {"bias": bias}
    if residual is not None:
        operands["residual"] = residual
    spec = _SPECS[bias is not None, residual is not None]
    return default.current().gemm_fused(a, b, spec, operands, out)  # type: ignore[no-any-return]


@torch.library.custom_op("tirtune::gemm_fused", mutates_args=())
def gemm_fused_op(
    a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None
) -> torch.Tensor:
    _check(a, b)
    _check_operands(a, b, bias, residual)
    torch._check(bias is not None or residual is not None, lambda: "tirtune.gemm_fused: no bias and no residual")
    return _run_fused(a, b, bias, residual, None)


@gemm_fused_op.register_fake
def _(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None) -> torch.Tensor:
    _check(a, b)
    _check_operands(a, b, bias, residual)
    return a.new_empty((a.shape[0], b.shape[0]))


@torch.library.custom_op("tirtune::gemm_fused_out", mutates_args=("out",))
def gemm_fused_out_op(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    residual: torch.Tensor | None,
    out: torch.Tensor,
) -> None:
    _check(a, b)
    _check_operands(a, b, bias, residual)
    _check_out(a, b, out)
    torch._check(bias is not None or residual is not None, lambda: "tirtune.gemm_fused: no bias and no residual")
    _run_fused(a, b, bias, residual, out)


@gemm_fused_out_op.register_fake
def _(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    residual: torch.Tensor | None,
    out: torch.Tensor,
) -> None:
    _check(a, b)
    _check_operands(a, b, bias, residual)
    _check_out(a, b, out)


def _fused_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    grad_a, grad_b = _backward(ctx, grad)
    grad_bias = grad.sum(0) if ctx.needs_input_grad[2] else None
    grad_residual = grad if ctx.needs_input_grad[3] else None
    return grad_a, grad_b, grad_bias, grad_residual


gemm_fused_op.register_autograd(_fused_backward, setup_context=_save)


def _gemm_fused(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    residual: torch.Tensor | None,
    out: torch.Tensor | None,
) -> torch.Tensor:
    """`gemm` with a bias or a residual: straight to the dispatcher when eager on plain tensors
    with nothing to differentiate, else through `torch.ops.tirtune.gemm_fused(_out)`."""
    extra = [t for t in (bias, residual) if t is not None]
    plain = all(type(t) in _PLAIN and not (torch.is_grad_enabled() and t.requires_grad) for t in extra)
    if _eager(a, b) and plain:
        _check_plain(a, b)
        _check_operands(a, b, bias, residual)
        if out is not None:
            _check_out(a, b, out)
        return _run_fused(a, b, bias, residual, out)
    if out is None:
        return torch.ops.tirtune.gemm_fused(a, b, bias, residual)  # type: ignore[no-any-return]
    torch.ops.tirtune.gemm_fused_out(a, b, bias, residual, out)
    return out


# --- swiglu: B packs the gate and up weights (core/epilogue.py) ----------------------------------------

_SWIGLU = EpilogueSpec((SWIGLU,))


def pack_gate_up(gate_weight: torch.Tensor, up_weight: torch.Tensor) -> torch.Tensor:
    """The packed swiglu weight (2N, K) of a gated MLP's gate and up weights (each (N, K), N a
    multiple of 8): rows [16j, 16j+8) are gate rows [8j, 8j+8), rows [16j+8, 16j+16) up rows
    [8j, 8j+8). A new tensor (a copy), of the weights' dtype and device; `unpack_gate_up` inverts it."""
    if gate_weight.dim() != 2 or tuple(gate_weight.shape) != tuple(up_weight.shape):
        raise ValueError(
            f"pack_gate_up: gate and up weights must both be (N, K), got {tuple(gate_weight.shape)} and "
            f"{tuple(up_weight.shape)}"
        )
    if gate_weight.dtype != up_weight.dtype or gate_weight.device != up_weight.device:
        raise ValueError(
            f"pack_gate_up: gate is {gate_weight.dtype} on {gate_weight.device}, up {up_weight.dtype} on "
            f"{up_weight.device}"
        )
    n, k = gate_weight.shape
    if n % GATE_GROUP:
        raise ValueError(f"pack_gate_up: N={n} must be a multiple of {GATE_GROUP} (the weights interleave by 8 rows)")
    groups = (n // GATE_GROUP, GATE_GROUP, k)
    return torch.stack([gate_weight.reshape(groups), up_weight.reshape(groups)], dim=1).reshape(2 * n, k)


def _check_swiglu(a: torch.Tensor, b: torch.Tensor) -> None:
    _check(a, b)
    torch._check(
        b.shape[0] % (2 * GATE_GROUP) == 0,
        lambda: (
            f"tirtune.gemm(activation='swiglu'): B is the packed (2N, K) weight (pack_gate_up), N a multiple of "
            f"{GATE_GROUP}: its rows must be a multiple of {2 * GATE_GROUP}, got {b.shape[0]}"
        ),
    )


def _check_swiglu_out(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    n = b.shape[0] // 2
    torch._check(
        tuple(out.shape) == (a.shape[0], n) and out.dtype == a.dtype,
        lambda: f"tirtune.gemm: out must be {a.dtype} of shape ({a.shape[0]}, {n}), got {out.dtype} {tuple(out.shape)}",
    )


def _run_swiglu(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    return default.current().gemm_fused(a, b, _SWIGLU, {}, out)  # type: ignore[no-any-return]


@torch.library.custom_op("tirtune::gemm_swiglu", mutates_args=())
def gemm_swiglu_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check_swiglu(a, b)
    return _run_swiglu(a, b, None)


@gemm_swiglu_op.register_fake
def _(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check_swiglu(a, b)
    return a.new_empty((a.shape[0], b.shape[0] // 2))


@torch.library.custom_op("tirtune::gemm_swiglu_out", mutates_args=("out",))
def gemm_swiglu_out_op(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    _check_swiglu(a, b)
    _check_swiglu_out(a, b, out)
    _run_swiglu(a, b, out)


@gemm_swiglu_out_op.register_fake
def _(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    _check_swiglu(a, b)
    _check_swiglu_out(a, b, out)


def _swiglu_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    a, b = ctx.saved_tensors
    # D = silu(g) * u over H = A B^T (B packed): dg = dD * u * silu'(g), du = dD * silu(g), with
    # silu'(g) = s * (1 + g * (1 - s)), s = sigmoid(g); dH in B's interleaved column order, then
    # dA = dH B, dB = dH^T A (cuBLAS, in A's dtype as the plain op's backward).
    m, rows = a.shape[0], b.shape[0]
    h = torch.mm(a, b.T).float().reshape(m, rows // (2 * GATE_GROUP), 2, GATE_GROUP)
    g, u = h[:, :, 0], h[:, :, 1]
    dd = grad.float().reshape(g.shape)
    s = torch.sigmoid(g)
    dh = torch.stack([dd * u * s * (1 + g * (1 - s)), dd * g * s], dim=2).reshape(m, rows).to(a.dtype)
    grad_a = torch.mm(dh, b) if ctx.needs_input_grad[0] else None
    grad_b = torch.mm(dh.T, a) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b


gemm_swiglu_op.register_autograd(_swiglu_backward, setup_context=_save)


def _gemm_swiglu(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """`gemm(a, b, activation="swiglu")`: straight to the dispatcher when eager on plain tensors
    with nothing to differentiate, else through `torch.ops.tirtune.gemm_swiglu(_out)`."""
    if _eager(a, b):
        _check_plain(a, b)
        _check_swiglu(a, b)
        if out is not None:
            _check_swiglu_out(a, b, out)
        return _run_swiglu(a, b, out)
    if out is None:
        return torch.ops.tirtune.gemm_swiglu(a, b)  # type: ignore[no-any-return]
    torch.ops.tirtune.gemm_swiglu_out(a, b, out)
    return out
