"""What the measuring child runs a kernel on, and what it times the kernel against.

`draw_inputs` draws one check's fresh random inputs: A (M, K) and B (N, K) as ever, then, for a
fused problem, each of its epilogue's operands (`core.epilogue.EpilogueSpec.operands`: scale_row,
scale_col, bias, residual, each of its shape and dtype), from the same seeded generator after A
and B, so a plain problem draws exactly the A and B it drew before epilogues existed.
`Inputs.arguments(d, names)` is the kernel's argument list: A, B, D, then the operands in the
order the loaded kernel names them (a cubin's launch spec, `LaunchSpec.operands`) or, for a
kernel that does not name them (a `.so`'s tvm-ffi wrapper, whose parameters are in
`Problem.operands` order and whose shapes it checks), in the problem's order.

`baseline` is the same-run reference a ratio is taken against: cuBLAS alone (`torch.mm`) for a
plain problem, and for a fused one what a user runs without tirtune, cuBLAS and then the
epilogue's ops as separate eager kernels (docs/design.md, "Epilogues"). For FP8 operands it is
torch._scaled_mm with the problem's scales (`_fp8_baseline`).

swiglu: B is the packed weight (2N, K), the gate and up rows interleaved in groups of 8, drawn
standard normal over sqrt(K) (so that g and u are about standard normal and silu(g) * u stays far
inside fp16's range, where N(0, K) products would overflow it at K = 4096); there is no operand.
Its baseline is what a model runs without tirtune on the weights as it holds them, [gate; up]
concatenated (`unpack_gate_up`, made once before timing): cuBLAS `torch.mm(A, W.T)` into an
(M, 2N) buffer, then the eager `F.silu(h[:, :N]) * h[:, N:]` into D.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tirtune.core.epilogue import EPILOGUE_NONE, GATE_GROUP, SCALE_OPS, EpilogueSpec
from tirtune.core.problem import FP8, out_dtype_of

__all__ = [
    "Inputs",
    "baseline",
    "baseline_label",
    "draw_inputs",
    "operand_mismatch",
    "swiglu_unfused",
    "torch_dtypes",
    "unpack_gate_up",
]

PLAIN_NAMES = ("A", "B", "D")


def torch_dtypes(torch: Any) -> dict[str, Any]:
    """torch's dtype of each dtype name a problem's operands or D may have."""
    return {
        "float16": torch.float16,
        "bfloat16": torch.bfloat16,
        "float32": torch.float32,
        FP8: torch.float8_e4m3fn,
    }


@dataclass(frozen=True, slots=True)
class Inputs:
    """One check's tensors: A, B and the epilogue's operands by name, in the spec's order."""

    a: Any
    b: Any
    epilogue: EpilogueSpec = EPILOGUE_NONE
    operands: Mapping[str, Any] = field(default_factory=dict)

    def arguments(self, d: Any, names: Sequence[str] | None = None) -> tuple[Any, ...]:
        """(A, B, D, operands...) in the order of `names` (the kernel's parameter names, A, B, D
        first); None: the spec's order. `operand_mismatch` says first whether the names fit."""
        order = list(self.operands) if names is None else list(names[len(PLAIN_NAMES) :])
        return (self.a, self.b, d, *(self.operands[name] for name in order))


def draw_inputs(
    torch: Any, m: int, n: int, k: int, dtype: str, epilogue: EpilogueSpec, *, device: Any, seed: int
) -> Inputs:
    """Fresh random inputs of one check (module docstring). A and B are standard normal (for FP8,
    drawn in float32 and rounded to e4m3, which leaves them exact in the float32 reference); bias
    and residual are scaled to the product's own size (sqrt(K)) and of D's dtype (bfloat16 for
    FP8), and the scales are standard normal, so an op dropped or read at another element moves D
    by about its whole norm, far past any tolerance (`runner.verify.tolerance`), whatever K is."""
    types = torch_dtypes(torch)
    gen = torch.Generator(device=device).manual_seed(seed)
    if dtype == FP8:  # standard normal in float32, rounded to e4m3 (|x| < 6 here, inside its +-448)
        a = torch.randn(m, k, device=device, generator=gen).to(types[dtype])
    else:
        a = torch.randn(m, k, dtype=types[dtype], device=device, generator=gen)
    if epilogue.gated:  # the packed gate and up weights, scaled so that silu(g) * u stays in range
        b = (torch.randn(2 * n, k, device=device, generator=gen) / math.sqrt(k)).to(types[dtype])
    elif dtype == FP8:
        b = torch.randn(n, k, device=device, generator=gen).to(types[dtype])
    else:
        b = torch.randn(n, k, dtype=types[dtype], device=device, generator=gen)
    operands = {}
    for operand in epilogue.operands(m, n, out_dtype_of(dtype)):
        value = torch.randn(operand.shape, dtype=torch.float32, device=device, generator=gen)
        if operand.name in ("bias", "residual"):
            value = value * math.sqrt(k)
        operands[operand.name] = value.to(types[operand.dtype])
    return Inputs(a, b, epilogue, operands)


def operand_mismatch(names: Sequence[str] | None, epilogue: EpilogueSpec) -> str | None:
    """None when a kernel whose parameters are `names` (None: not named) takes A, B, D and the
    operands of `epilogue`; else why it cannot be run on them."""
    if names is None:
        return None
    wanted = (*PLAIN_NAMES, *epilogue.operand_ops)
    if tuple(names[: len(PLAIN_NAMES)]) == PLAIN_NAMES and sorted(names) == sorted(wanted):
        return None
    return f"the kernel takes ({', '.join(names)}) but a problem of epilogue {epilogue} gives ({', '.join(wanted)})"


def baseline_label(epilogue: EpilogueSpec, dtype: str = "float16", n: int | None = None) -> str:
    """What `baseline` runs, in words ("torch.addmm(bias) + residual"); "torch.mm" when plain; for
    FP8 operands torch._scaled_mm with its scales (and N padded where N is not a multiple of 16)."""
    if dtype == FP8:
        return _fp8_label(epilogue, n)
    if epilogue.gated:
        return "torch.mm([gate; up]) + F.silu(gate) * up"
    scaled = [op for op in SCALE_OPS if epilogue.has(op)]
    first = "torch.addmm(bias)" if epilogue.has("bias") and not scaled else "torch.mm"
    steps = [first, *(f"* {op}" for op in scaled)]
    if epilogue.has("bias") and scaled:
        steps.append("+ bias")
    if epilogue.has("residual"):
        steps.append("+ residual")
    return " ".join(steps)


def baseline(torch: Any, inputs: Inputs, d: Any) -> Callable[[], Any]:
    """The launch a kernel's same-run ratio is taken against, writing `d`: `torch.mm(A, B.T)` for
    a plain problem (the call the child has always timed); for a fused one, cuBLAS and then each
    op as its own eager kernel in the epilogue's order, as a model computes it without tirtune
    (`baseline_label` names them): bias rides in cuBLAS's own epilogue (`torch.addmm`) when no
    scale comes before it, and every other op reads and writes D once more. In place on `d`: the
    same memory traffic as the out-of-place `linear(x, w, b) + residual` a model writes, without
    the caching allocator's calls. Each step rounds to D's dtype, so its D is at most a rounding
    an op further from the float32 reference than the fused kernel's (one rounding in all)."""
    a, b, ops = inputs.a, inputs.b, inputs.operands
    if a.dtype == torch.float8_e4m3fn:
        return _fp8_baseline(torch, inputs, d)
    if inputs.epilogue.gated:
        return _swiglu_baseline(torch, a, b, d)
    scaled = [op for op in SCALE_OPS if op in ops]
    tail: list[Callable[[], Any]] = []
    # A one-element scale broadcasts over D.
    if "scale_a" in ops:
        tail.append(lambda: d.mul_(ops["scale_a"]))
    if "scale_b" in ops:
        tail.append(lambda: d.mul_(ops["scale_b"]))
    if "scale_row" in ops:
        tail.append(lambda: d.mul_(ops["scale_row"][:, None]))
    if "scale_col" in ops:
        tail.append(lambda: d.mul_(ops["scale_col"]))
    if "bias" in ops and scaled:
        tail.append(lambda: d.add_(ops["bias"]))
    if "residual" in ops:
        tail.append(lambda: d.add_(ops["residual"]))
    if "bias" in ops and not scaled:
        first: Callable[[], Any] = lambda: torch.addmm(ops["bias"], a, b.T, out=d)  # noqa: E731
    else:
        first = lambda: torch.mm(a, b.T, out=d)  # noqa: E731
    if not tail:
        return first

    def unfused() -> None:
        first()
        for step in tail:
            step()

    return unfused


# torch._scaled_mm takes B's rows (N) and K in multiples of this many (cuBLASLt's FP8 GEMM).
SCALED_MM_ALIGN = 16


def _fp8_label(epilogue: EpilogueSpec, n: int | None) -> str:
    rowwise = epilogue.has("scale_row") or epilogue.has("scale_col")
    tensor = epilogue.has("scale_a") or epilogue.has("scale_b")
    label = "torch._scaled_mm(" + ("rowwise scales" if rowwise else "tensor scales" if tensor else "tensor scale 1")
    if rowwise and tensor:
        label += " times the tensor scales"
    label += ", bias)" if epilogue.has("bias") else ")"
    if n is not None and n % SCALED_MM_ALIGN:
        label += f", N padded to {SCALED_MM_ALIGN}, D copied out"
    return label + (" + residual" if epilogue.has("residual") else "")


def _fp8_baseline(torch: Any, inputs: Inputs, d: Any) -> Callable[[], Any]:
    """An FP8 problem's same-run reference: torch._scaled_mm, what torch offers for e4m3 operands
    on Hopper (cuBLASLt's FP8 GEMM for a per-tensor scale, a rowwise kernel for per-token x
    per-channel scales), with fast accumulation (no promotion of the sum, as the kernel does not
    promote either: the fastest setting torch has) and a bf16 D. scale_a and scale_b are its
    tensor scales and scale_row and scale_col its rowwise ones (a missing vector all ones, the
    tensor scales folded into the vectors when both kinds are given); with no scale, a tensor
    scale of 1. A bias rides in its epilogue, a residual is an eager add after it.
    torch._scaled_mm refuses an N that is not a multiple of 16: B and scale_col are then padded
    with zero rows once, outside what is timed, and each call writes an (M, N16) buffer whose
    first N columns are copied into D."""
    a, b, ops = inputs.a, inputs.b, inputs.operands
    m, n = a.shape[0], b.shape[0]
    f32 = dict(dtype=torch.float32, device=a.device)
    pad = -n % SCALED_MM_ALIGN
    if pad:
        b = torch.cat([b, torch.zeros(pad, b.shape[1], dtype=b.dtype, device=b.device)])
    rowwise = "scale_row" in ops or "scale_col" in ops
    one = torch.ones((), **f32)
    tensor_a, tensor_b = (ops[op].reshape(()) if op in ops else one for op in ("scale_a", "scale_b"))
    if rowwise:
        # torch takes one scale per row (or column) or one per tensor, not both: the tensor
        # scales (if any) multiply the vectors, once, outside what is timed.
        row = ops["scale_row"] if "scale_row" in ops else torch.ones(m, **f32)
        col = ops["scale_col"] if "scale_col" in ops else torch.ones(n, **f32)
        scale_a = (row * tensor_a).reshape(m, 1).contiguous()
        scale_b = torch.cat([col * tensor_b, torch.zeros(pad, **f32)]).reshape(1, n + pad).contiguous()
    else:
        scale_a, scale_b = tensor_a.float().contiguous(), tensor_b.float().contiguous()
    bias = ops.get("bias")
    if bias is not None and pad:
        bias = torch.cat([bias, torch.zeros(pad, dtype=bias.dtype, device=bias.device)])
    out = torch.empty(m, n + pad, dtype=d.dtype, device=d.device) if pad else d
    residual = ops.get("residual")

    def scaled() -> None:
        torch._scaled_mm(a, b.T, scale_a, scale_b, bias=bias, out_dtype=d.dtype, use_fast_accum=True, out=out)
        if pad:
            d.copy_(out[:, :n])
        if residual is not None:
            d.add_(residual)

    return scaled


def unpack_gate_up(b: Any) -> tuple[Any, Any]:
    """(gate, up), each (N, K), of a packed (2N, K) swiglu weight (core/epilogue.py: rows
    [16j, 16j+8) gate rows [8j, 8j+8), rows [16j+8, 16j+16) up rows [8j, 8j+8)); views of `b`."""
    rows, k = b.shape
    groups = b.reshape(rows // (2 * GATE_GROUP), 2, GATE_GROUP, k)
    return groups[:, 0].reshape(rows // 2, k), groups[:, 1].reshape(rows // 2, k)


def _swiglu_baseline(torch: Any, a: Any, b: Any, d: Any) -> Callable[[], Any]:
    """swiglu's baseline (module docstring): the weights a model holds, [gate; up] (made here, once,
    outside what is timed), cuBLAS into an (M, 2N) buffer, then eager silu and multiply into D."""
    n = b.shape[0] // 2
    gate, up = unpack_gate_up(b)
    w = torch.cat([gate, up]).contiguous()
    h = torch.empty(a.shape[0], 2 * n, dtype=a.dtype, device=a.device)
    silu = torch.nn.functional.silu

    def unfused() -> None:
        torch.mm(a, w.T, out=h)
        torch.mul(silu(h[:, :n]), h[:, n:], out=d)

    return unfused


def swiglu_unfused(torch: Any, a: Any, b: Any, d: Any) -> Any:
    """silu(A @ gate.T) * (A @ up.T) into `d` (M, N) straight from the packed B, in eager torch: one
    cuBLAS GEMM of width 2N (its columns in B's interleaved order), silu and multiply on strided
    views. What the dispatcher runs where no swiglu kernel serves (the packed weight is all a
    `tirtune.nn` layer holds); the same figures as `baseline`'s up to cuBLAS's summation order."""
    m, rows = a.shape[0], b.shape[0]
    h = torch.mm(a, b.T).reshape(m, rows // (2 * GATE_GROUP), 2, GATE_GROUP)
    d.copy_((torch.nn.functional.silu(h[:, :, 0]) * h[:, :, 1]).reshape(m, rows // 2))
    return d
