"""What one Hopper kernel body makes and its macro bundles share: the `Frame`.

The kernel body (`kernel.py`'s traced `main`) creates the operands' views, the shared-memory
tiles, the barriers and the thread's coordinates; TVMScript names them after the variables they
are assigned to, so they are created there. The body then hands them over in one frozen `Frame`,
and each concern's bundle (`loads`, `mma`, `epilogue`, `staging`, `splitk`, `roles`) takes from it
the few it uses, by name, when it is built: no macro reads a name of the kernel body.

A field is None where the plan has no such thing (no ping-pong `order` barrier, no staging tile,
no cluster rank without a cluster or split, no fixed tile origin in a persistent kernel).

The fused epilogue's operands (`FusedOperands`: bias, residual, scales) are the kernel function's
parameters after D; they are declared before the body is traced (`epilogue.declare_operands`)
and appended to the function's parameters after it (`kernel.py`), since a TVMScript signature is
fixed in its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FusedOperands", "Frame"]


@dataclass(frozen=True, slots=True)
class FusedOperands:
    """The fused epilogue's extra operands (core/epilogue.py), TIR buffers in the problem's axes,
    each None where the problem's epilogue lacks its op."""

    scale_a_block: Any = None
    scale_b_block: Any = None
    scale_a: Any = None
    scale_b: Any = None
    scale_row: Any = None
    scale_col: Any = None
    bias: Any = None
    residual: Any = None

    def params(self) -> tuple[Any, ...]:
        """The buffers present, in parameter order (core.epilogue.OPS)."""
        ordered = (
            self.scale_a_block,
            self.scale_b_block,
            self.scale_a,
            self.scale_b,
            self.scale_row,
            self.scale_col,
            self.bias,
            self.residual,
        )
        return tuple(b for b in ordered if b is not None)


@dataclass(frozen=True, slots=True)
class Frame:
    """The kernel body's buffers, barriers and thread coordinates (TIR objects, or None)."""

    # The operands as the kernel multiplies them: A (M x K) and B (N x K) in the kernel's axes (the
    # problem's B and A with swap_ab), and D, the problem's output.
    A: Any
    B: Any
    D: Any
    # Shared memory: the ring's A and B tiles; the TMA-store epilogues' staging boxes (Ds) and the
    # narrow last box's buffers (Dt); split-K's parked fragments (Red).
    As: Any
    Bs: Any
    Ds: Any
    Dt: Any
    Red: Any
    # Barriers: a stage landed (full) / was released (empty); ping-pong's turn (order); the
    # epilogue warpgroup's handover of a staging buffer (staged, drained).
    full: Any
    empty: Any
    order: Any
    staged: Any
    drained: Any
    # Where this thread is: its warpgroup, warp and lane; the CTA's rank in its cluster (or split);
    # the cluster's index in a persistent grid (cid); the CTA's grid coordinates (bx, by); the
    # tile origin of a kernel that computes one tile a CTA (m0, n0).
    wg: Any
    warp: Any
    lane: Any
    rank: Any
    cid: Any
    bx: Any
    by: Any
    m0: Any
    n0: Any
    # The k-tiles this CTA multiplies (an int; with split_k_scope "tail" an expression: the whole
    # K for a data-parallel tile, 1/split_k of it for a tail tile's CTA).
    k_count: Any
    # The fused epilogue's operands (none by default).
    fused: FusedOperands = FusedOperands()
