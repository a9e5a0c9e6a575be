"""What one Blackwell kernel body makes and its macro bundles share: the `Frame`.

As on Hopper (`tirtune.kernels.hopper.frame`): the kernel body creates the shared-memory tiles,
the barriers, the TMEM accumulator and the thread's coordinates, which TVMScript names after the
variables they are assigned to, and hands them to the bundles (`loads`, `mma`, `epilogue`,
`roles`) in one frozen `Frame`; each takes the few it uses when it is built. A field is None
where the plan has none (CTA 0's barrier views without a CTA pair, the staging tile without the
TMA epilogue).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Frame"]


@dataclass(frozen=True, slots=True)
class Frame:
    """The kernel body's buffers, barriers and thread coordinates (TIR objects, or None)."""

    # The operands: A (M x K), B (N x K), D (M x N).
    A: Any
    B: Any
    D: Any
    # Shared memory: the ring's A tiles (one per consumer) and B tiles, the TMA epilogue's staging.
    As: Any
    Bs: Any
    Ds: Any
    # The accumulators: TMEM, 128 lanes x 512 columns, consumer c at columns [c*blk_n, (c+1)*blk_n).
    tmem: Any
    # Barriers: a stage landed (full) / was read by the MMAs (empty); an accumulator is complete
    # (acc_full) / was read back (acc_empty); in a CTA pair, CTA 0's full and acc_empty as seen
    # from either CTA (full0, acc_empty0).
    full: Any
    empty: Any
    acc_full: Any
    acc_empty: Any
    full0: Any
    acc_empty0: Any
    # Where this thread is: warpgroup, warp, lane; the CTA's rank in its pair; the cluster's index.
    wg: Any
    warp: Any
    lane: Any
    rank: Any
    cid: Any
