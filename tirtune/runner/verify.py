"""The one correctness check: the measuring child's, and every bench script's that runs a kernel.

`verify(run, a, b, dtype)` runs a kernel (`run(d)` writes A @ B.T, through the fused epilogue
when one is given with its operands, into `d`) into an output
poisoned with NaN and framed by NaN guard bands, `runs` times on the same inputs, and judges
against a float32 reference, in this order (the first failure is the verdict):

1. no element of the guard bands changed (an out-of-bounds write that does not fault shows here);
2. every output written (none still NaN);
3. the relative Frobenius error ||D - ref|| / ||ref|| within `tolerance(dtype, K)` (and finite):
   `TOLERANCE[dtype]` for fp16 and bf16, more for FP8 (below);
4. every run bit-identical to the first (a result that moves between runs is a race).

A run that raises (a CUDA fault) propagates: the caller decides what a fault means. The inputs may
live on any torch device; the check synchronizes with the GPU after each run when they are on one,
and runs as well on CPU tensors (tests/test_verify.py).

`reference(a, b, epilogue, **operands)` is the float32 reference of a GEMM with a fused epilogue
(core/epilogue.py: scale_a, scale_b, scale_row, scale_col, bias, residual, applied in that order to
the fp32 product, each 128-deep k block's product scaled first with block scales), the operands
passed by name; `verify` judges against `reference(a, b, epilogue, **operands)`.

Where the tolerance comes from, fused or not: a kernel accumulates in fp32 and rounds once, to
D's dtype, when it stores D; TOLERANCE is that one rounding (measured) with a 5x margin. A fused
kernel applies its ops to the fp32 sum before that one rounding, and its operands (fp32 scales,
a bias or residual of D's dtype) are exact in float32, as the reference takes them: its D is
still one rounding of D's dtype from the reference, so the same table holds. A kernel that added
a residual or bias in D's dtype after rounding the product would add at most one more rounding
of D's dtype, still inside the margin; a dropped or misplaced op is not (`runner.inputs`).

FP8 (e4m3 A and B, a bf16 D, or fp16 with out_float16, `core.problem`): the reference takes the
e4m3 operands as float32, where they are exact, and D is poisoned and compared in its dtype. Its
tolerance is that dtype's plus what the tensor cores' FP8 accumulation loses over K
(`FP8_ACCUMULATION_PER_K`, with where it comes from): an FP8 wgmma accumulates into fewer mantissa bits than fp32 keeps.

swiglu: the reference de-interleaves B (`runner.inputs.unpack_gate_up`) and computes
silu(A @ gate.T) * (A @ up.T) in float32 (torch's silu); D is (M, N) with N = B's rows / 2. The
same table holds: the kernel forms silu(g) * u in fp32 from its fp32 sums and rounds once to D's
dtype. What else differs from the reference is fp32's: the sums' order (about 1e-6 relative) and
CUDA's expf (a few ulp), which silu(g) * u passes on amplified at most by silu's log-slope,
1 + |g| (g is about standard normal with the drawn inputs: under 10), so about 1e-5 at most,
against the 2e-4 (fp16) and 2e-3 (bf16) of the one rounding and the 1e-3 / 8e-3 bounds. A wrong
pairing (gate with another column's up, or the two halves swapped) moves D by about its norm.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tirtune.core.epilogue import BLOCK_OPS, EPILOGUE_NONE, GATE_GROUP, EpilogueSpec
from tirtune.core.errors import SpaceError
from tirtune.core.problem import FP8, out_dtype_of
from tirtune.runner.inputs import block_scaled_product, torch_dtypes, unpack_gate_up

__all__ = [
    "FP8_ACCUMULATION_PER_K",
    "GUARD_ROWS",
    "TOLERANCE",
    "Verdict",
    "block_scaled_product",
    "reference",
    "relative_error",
    "tolerance",
    "verify",
]

# Relative Frobenius error allowed against the float32 reference. fp32 accumulation leaves only
# the output rounding: about 2e-4 for fp16 and 2e-3 for bf16 (measured, TIRX_HOPPER.md); the
# bounds keep a 5x margin, far below what a skipped K step (>= 5e-2) produces.
TOLERANCE = {"float16": 1e-3, "bfloat16": 8e-3}
# FP8 (e4m3 operands, a bf16 D): the operands are exact in float32, D's bf16 rounding is bf16's
# bound, and the tensor cores add e4m3 products into an accumulator that keeps 13 of fp32's 23
# mantissa bits, truncating, once a k32 wgmma step (Hopper's FP8 accumulation, the reason
# DeepSeek-V3's kernels promote the sum to fp32 registers every 128 k): up to 2**-13 of the running
# sum a step, half that on average, always towards zero. The running sum of standard normal
# products grows as sqrt(k), so over K / 32 steps the truncations add up to about a third of
# 2**-13 a step relative to the whole sum, (K / 32) * 2**-13 / 3 ~ K * 2**-19.6 (0.54% at
# K = 4096); the bound takes K * 2**-19 (1.5 times that) over bf16's. A skipped 128-deep k-tile
# moves D by sqrt(128 / K) of its norm (8.8% at K = 16384, against a bound of 3.9% there).
# Measured on the H200 (bench/results/sweeps/2026-12-04-fp8-fuzz.md): 1.7e-3 at K <= 1040 to
# 3.5e-3 at K = 16384, at most 0.19 of this bound: the hardware loses less than this model says.
FP8_ACCUMULATION_PER_K = 2.0**-19
GUARD_ROWS = 256  # rows of NaN guard before and after D while verifying (>= the largest blk_m)


def tolerance(dtype: str, k: int, out_dtype: str | None = None) -> float:
    """The relative Frobenius error a kernel of operand dtype `dtype`, depth `k` and D of
    `out_dtype` (`core.problem.out_dtype_of` when None) may have: TOLERANCE for fp16 and bf16; for
    FP8, D's dtype's plus the accumulator's truncations over K."""
    if dtype == FP8:
        return TOLERANCE[out_dtype or out_dtype_of(dtype)] + k * FP8_ACCUMULATION_PER_K
    return TOLERANCE[dtype]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The check's answer: `ok`, or the reason (`message`); `rel_error` once it was computed."""

    ok: bool
    message: str = ""
    rel_error: float | None = None


def relative_error(d: Any, ref: Any) -> float:
    """The relative Frobenius error of `d` against `ref`, both taken as float32."""
    import torch

    ref = ref.float()
    return float(torch.linalg.vector_norm(d.float() - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30))


def reference(a: Any, b: Any, epilogue: EpilogueSpec = EPILOGUE_NONE, **operands: Any) -> Any:
    """float32 (A @ B.T) through `epilogue`'s ops, each operand (named as the op: bias, residual,
    scale_a, scale_b, scale_row, scale_col) taken as float32; with swiglu, silu(A @ gate.T) * (A @ up.T) of the
    packed B (module docstring). SpaceError for an operand missing, unexpected or of another
    shape than the op's (core.epilogue.EpilogueSpec.operands)."""
    m, n = a.shape[0], b.shape[0] // 2 if epilogue.gated else b.shape[0]
    out_dtype = out_dtype_of(str(a.dtype).removeprefix("torch."), epilogue)
    wanted = {o.name: o.shape for o in epilogue.operands(m, n, out_dtype, a.shape[1])}
    if set(operands) != set(wanted):
        raise SpaceError(
            f"epilogue {epilogue} takes the operands ({', '.join(wanted) or 'none'}), "
            f"got ({', '.join(sorted(operands)) or 'none'})"
        )
    for name, shape in wanted.items():
        if tuple(operands[name].shape) != shape:
            raise SpaceError(f"{name} of shape {tuple(operands[name].shape)}: epilogue {epilogue} wants {shape}")
    if epilogue.gated:
        if b.shape[0] % (2 * GATE_GROUP):
            raise SpaceError(f"a packed swiglu weight has a multiple of {2 * GATE_GROUP} rows, got {b.shape[0]}")
        import torch

        gate, up = unpack_gate_up(b.float())
        g, u = a.float() @ gate.T, a.float() @ up.T
        return g * torch.sigmoid(g) * u  # silu(g) * u
    if epilogue.block_scaled:
        out = block_scaled_product(a, b, operands["scale_a_block"], operands["scale_b_block"])
    else:
        out = a.float() @ b.float().T
    for op in epilogue.operand_ops:
        if op in BLOCK_OPS:
            continue  # in the product above
        value = operands[op].float()
        if op in ("scale_a", "scale_b"):  # one value for the whole product
            out = out * value.reshape(())
        elif op == "scale_row":
            out = out * value[:, None]
        elif op == "scale_col":
            out = out * value[None, :]
        else:  # bias broadcasts along M, residual is (M, N)
            out = out + value
    return out


def verify(
    run: Callable[[Any], None],
    a: Any,
    b: Any,
    dtype: str,
    *,
    guard_rows: int = GUARD_ROWS,
    runs: int = 2,
    epilogue: EpilogueSpec = EPILOGUE_NONE,
    operands: Mapping[str, Any] | None = None,
) -> Verdict:
    """Judge the kernel that `run(d)` launches on A (M,K) and B (N,K) and, with `epilogue`, its
    `operands` by name (which `run` passes itself); see the module docstring."""
    import torch

    ref = reference(a, b, epilogue, **(operands or {}))
    m, n = ref.shape
    out_name = out_dtype_of(dtype, epilogue)
    out_dtype = torch_dtypes(torch)[out_name]
    outs = []
    for _ in range(runs):
        guarded = torch.full((m + 2 * guard_rows, n), float("nan"), dtype=out_dtype, device=a.device)
        d = guarded[guard_rows : guard_rows + m]
        run(d)
        if a.is_cuda:
            torch.cuda.synchronize(a.device)
        outside = int((~torch.isnan(guarded[:guard_rows])).sum() + (~torch.isnan(guarded[guard_rows + m :])).sum())
        if outside:
            return Verdict(False, f"out-of-bounds write: {outside} elements of the guard bands around D changed")
        outs.append(d)
    d = outs[0]
    unwritten = int(torch.isnan(d).sum().item())
    if unwritten:
        return Verdict(False, f"{unwritten} of {d.numel()} outputs never written (still NaN)")
    err = relative_error(d, ref)
    tol = tolerance(dtype, a.shape[1], out_name)
    if not math.isfinite(err) or err > tol:
        return Verdict(False, f"relative error {err:.3e} > tolerance {tol:.0e}", err)
    if any(not torch.equal(outs[0], other) for other in outs[1:]):
        return Verdict(False, "two runs on the same inputs differ: a race", err)
    return Verdict(True, "", err)
