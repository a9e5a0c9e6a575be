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
torch._scaled_mm with the problem's scales (`_fp8_baseline`); with block scales, torch._scaled_mm
where this torch takes them, else a Triton kernel written here (`_fp8_block_baseline`, labelled
so), since a baseline must be what a user can run.

swiglu: B is the packed weight (2N, K), the gate and up rows interleaved in groups of 8, drawn
standard normal over sqrt(K) (so that g and u are about standard normal and silu(g) * u stays far
inside fp16's range, where N(0, K) products would overflow it at K = 4096); there is no operand.
Its baseline is what a model runs without tirtune on the weights as it holds them, [gate; up]
concatenated (`unpack_gate_up`, made once before timing): cuBLAS `torch.mm(A, W.T)` into an
(M, 2N) buffer, then the eager `F.silu(h[:, :N]) * h[:, N:]` into D.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tirtune.core.epilogue import BLOCK_K, EPILOGUE_NONE, GATE_GROUP, SCALE_OPS, EpilogueSpec
from tirtune.core.errors import SpaceError
from tirtune.core.problem import FP8, Problem, block_scales_fp8, out_dtype_of, out_float16_fp8

__all__ = [
    "Inputs",
    "baseline",
    "baseline_label",
    "block_scaled_product",
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
    for operand in epilogue.operands(m, n, out_dtype_of(dtype, epilogue), k):
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
    if inputs.epilogue.block_scaled or inputs.epilogue.out_float16:
        # 16-bit operands: no problem to serve (the problem rules say why)
        problem = Problem(a.shape[0], b.shape[0], a.shape[1], str(a.dtype).removeprefix("torch."), inputs.epilogue)
        raise SpaceError(block_scales_fp8(problem) or out_float16_fp8(problem) or "")
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
    return _in_turn(first, tail)


def _in_turn(first: Callable[[], Any], steps: Sequence[Callable[[], Any]]) -> Callable[[], Any]:
    """One launch that runs `first` and then each of `steps` (`first` itself when there are none)."""
    if not steps:
        return first

    def unfused() -> None:
        first()
        for step in steps:
            step()

    return unfused


# torch._scaled_mm takes B's rows (N) and K in multiples of this many (cuBLASLt's FP8 GEMM).
SCALED_MM_ALIGN = 16


def _fp8_label(epilogue: EpilogueSpec, n: int | None) -> str:
    if epilogue.block_scaled:
        label = BLOCK_TORCH_LABEL if torch_takes_block_scales() else BLOCK_TRITON_LABEL
        return label + "".join(f" + {op}" for op in ("bias", "residual") if epilogue.has(op))
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
    promote either: the fastest setting torch has) and D's dtype (bf16, or fp16 with out_float16).
    scale_a and scale_b are its tensor scales and scale_row and scale_col its rowwise ones (a
    missing vector all ones, the tensor scales folded into the vectors when both kinds are given);
    with no scale, a tensor scale of 1. A bias rides in its epilogue, a residual is an eager add after it.
    torch._scaled_mm refuses an N that is not a multiple of 16: B and scale_col are then padded
    with zero rows once, outside what is timed, and each call writes an (M, N16) buffer whose
    first N columns are copied into D."""
    if inputs.epilogue.block_scaled:
        return _fp8_block_baseline(torch, inputs, d)
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


BLOCK_TORCH_LABEL = "torch._scaled_mm(1x128 and 128x128 block scales)"
# Where this torch's _scaled_mm takes no block scales: the Triton kernel of tirtune/runner/triton_fp8.py.
BLOCK_TRITON_LABEL = "Triton block-scaled GEMM written here (torch._scaled_mm takes no block scales)"


@functools.cache
def torch_takes_block_scales() -> bool:
    """Whether this process's torch runs an FP8 GEMM with 1x128 / 128x128 block scales
    (torch._scaled_mm with CUDA 12.9+ on Hopper): tried once on a small problem; False off a GPU."""
    try:
        import torch

        if not torch.cuda.is_available():
            return False
        a = torch.ones(128, 256, device="cuda").to(torch.float8_e4m3fn)
        b = torch.ones(128, 256, device="cuda").to(torch.float8_e4m3fn)
        _block_scaled_mm_torch(torch, a, b, torch.ones(2, 128, device="cuda"), torch.ones(1, 2, device="cuda"), None)
        torch.cuda.synchronize()
        return True
    except Exception:  # any refusal (dispatch, shapes, cuBLASLt) means: not here
        return False


def _block_scaled_mm_torch(torch: Any, a: Any, b: Any, sa: Any, sb: Any, out: Any) -> Any:
    # A's 1x128 scales as torch reads them: (M, KB) with M contiguous (`sa`, (KB, M), transposed);
    # B's 128x128 ones for b.T (K, N): (KB, NB), i.e. `sb` (NB, KB) transposed.
    out_dtype = torch.bfloat16 if out is None else out.dtype
    return torch._scaled_mm(a, b.T, sa.T, sb.T, out_dtype=out_dtype, use_fast_accum=False, out=out)


def _fp8_block_baseline(torch: Any, inputs: Inputs, d: Any) -> Callable[[], Any]:
    """A block-scaled problem's same-run reference: torch._scaled_mm with the block scales where
    this torch takes them (no fast accumulation: it refuses it with block scales), else the Triton
    kernel written here (`runner.triton_fp8`, its fastest tile for the problem, chosen once,
    outside what is timed); a bias or residual is an eager add after it. Off a GPU, the product in
    eager float32 (`block_scaled_product`)."""
    from tirtune.runner import triton_fp8

    a, b, ops = inputs.a, inputs.b, inputs.operands
    sa, sb = ops["scale_a_block"].contiguous(), ops["scale_b_block"].contiguous()
    tail = [functools.partial(d.add_, ops[op]) for op in ("bias", "residual") if op in ops]
    if not a.is_cuda:  # off a GPU (a CPU call of tirtune.scaled_gemm): the product in eager float32
        first: Callable[[], Any] = lambda: d.copy_(block_scaled_product(a, b, sa, sb))  # noqa: E731
    elif torch_takes_block_scales():
        first = lambda: _block_scaled_mm_torch(torch, a, b, sa, sb, d)  # noqa: E731
    else:
        config = triton_fp8.fastest_config(torch, a, b, sa, sb, d)
        first = lambda: triton_fp8.block_scaled_mm(a, b, sa, sb, d, config)  # noqa: E731
    return _in_turn(first, tail)


def block_scaled_product(a: Any, b: Any, scale_a_block: Any, scale_b_block: Any) -> Any:
    """float32 sum over the 128-deep k blocks kb of (A_kb @ B_kb.T) * scale_a_block[kb, m] *
    scale_b_block[n // 128, kb] (core/epilogue.py), as the product of A and B each scaled element
    by element by its block's scale (the same sums in another order)."""
    k = a.shape[1]
    sa = scale_a_block.float().repeat_interleave(BLOCK_K, dim=0)[:k].T  # (M, K): A's scale of each element
    sb = scale_b_block.float().repeat_interleave(BLOCK_K, dim=0).repeat_interleave(BLOCK_K, dim=1)
    return (a.float() * sa) @ (b.float() * sb[: b.shape[0], :k]).T


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
    m, groups = a.shape[0], b.shape[0] // (2 * GATE_GROUP)
    h = torch.mm(a, b.T).reshape(m, groups, 2, GATE_GROUP)
    gated = torch.nn.functional.silu(h[:, :, 0])
    if d.is_contiguous():  # the product straight into D: no third pass over (M, N)
        torch.mul(gated, h[:, :, 1], out=d.view(m, groups, GATE_GROUP))
    else:
        d.copy_((gated * h[:, :, 1]).reshape(m, groups * GATE_GROUP))
    return d
