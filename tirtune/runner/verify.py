"""The one correctness check: the measuring child's, and every bench script's that runs a kernel.

`verify(run, a, b, dtype)` runs a kernel (`run(d)` writes A @ B.T into `d`) into an output
poisoned with NaN and framed by NaN guard bands, `runs` times on the same inputs, and judges
against a float32 reference, in this order (the first failure is the verdict):

1. no element of the guard bands changed (an out-of-bounds write that does not fault shows here);
2. every output written (none still NaN);
3. the relative Frobenius error ||D - ref|| / ||ref|| within `TOLERANCE[dtype]` (and finite);
4. every run bit-identical to the first (a result that moves between runs is a race).

A run that raises (a CUDA fault) propagates: the caller decides what a fault means. The inputs may
live on any torch device; the check synchronizes with the GPU after each run when they are on one,
and runs as well on CPU tensors (tests/test_verify.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["GUARD_ROWS", "TOLERANCE", "Verdict", "relative_error", "verify"]

# Relative Frobenius error allowed against the float32 reference. fp32 accumulation leaves only
# the output rounding: about 2e-4 for fp16 and 2e-3 for bf16 (measured, TIRX_HOPPER.md); the
# bounds keep a 5x margin, far below what a skipped K step (>= 5e-2) produces.
TOLERANCE = {"float16": 1e-3, "bfloat16": 8e-3}
GUARD_ROWS = 256  # rows of NaN guard before and after D while verifying (>= the largest blk_m)


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


def verify(
    run: Callable[[Any], None], a: Any, b: Any, dtype: str, *, guard_rows: int = GUARD_ROWS, runs: int = 2
) -> Verdict:
    """Judge the kernel that `run(d)` launches on A (M,K) and B (N,K); see the module docstring."""
    import torch

    ref = a.float() @ b.float().T
    m, n = a.shape[0], b.shape[0]
    outs = []
    for _ in range(runs):
        guarded = torch.full((m + 2 * guard_rows, n), float("nan"), dtype=a.dtype, device=a.device)
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
    tol = TOLERANCE[dtype]
    if not math.isfinite(err) or err > tol:
        return Verdict(False, f"relative error {err:.3e} > tolerance {tol:.0e}", err)
    if any(not torch.equal(outs[0], other) for other in outs[1:]):
        return Verdict(False, "two runs on the same inputs differ: a race", err)
    return Verdict(True, "", err)
