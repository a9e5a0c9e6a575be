"""The Blackwell (sm_100a) branch's knobs: each knob's type, default, values and meaning, stated once.

`KNOBS` is the table: what each knob does in the Blackwell template (`tirtune.kernels.blackwell`),
and the values its space (blackwell-gemm/1, `tirtune.space.blackwell.spaces`) draws. The table
holds every other knob of the Hopper table (the Hopper branch's schedule, reg_split, epilogue
warpgroup, swap_ab, split-K, the TMA loads' L2 options, and any later one) at its default: the
template has no code path for it, the rule `hopper_knobs_at_default` refuses any other value, and
a new one is refused until it is implemented and declared below. A Blackwell `Config` is a point of
this table (`config(...)` builds one).

docs/design.md shows the table (`KNOBS.markdown()`; tests/test_knob_tables.py keeps it current).
"""

from __future__ import annotations

from typing import Any

from tirtune.core import Config, Knob, KnobTable
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS

__all__ = ["CLUSTERS", "CONSUMERS", "EPILOGUES", "KNOBS", "config"]

CONSUMERS = (1, 2)
EPILOGUES = ("register", "tma")
CLUSTERS = (1, 2)

KNOBS = KnobTable(
    Knob(
        "blk_m",
        int,
        128,
        (128, 256),
        "Rows of the output tile one CTA owns: its consumers' 128 rows each (the full 128-lane TMEM "
        "datapath), so 128 x consumers.",
    ),
    Knob(
        "blk_n",
        int,
        128,
        (64, 128, 192, 256),
        "Columns of the output tile, tcgen05.mma's N: each consumer accumulates blk_n TMEM columns, reading "
        "the same B stage.",
    ),
    Knob("blk_k", int, 64, (64, 128), "The k-tile: one or two 128-byte swizzle atoms of K a stage."),
    Knob("stages", int, 4, (1, 2, 3, 4, 5, 6, 8), "Depth of the shared-memory ring (up to 8)."),
    Knob("consumers", int, 2, CONSUMERS, "MMA streams, each owning 128 rows of the tile and its own TMEM accumulator."),
    Knob(
        "warp_specialized",
        bool,
        True,
        (False, True),
        "An extra warpgroup whose warp 3 issues the TMA loads and whose warp c issues consumer c's MMAs; "
        "otherwise one elected thread of warpgroup 0 loads (up to `stages` k-tiles ahead) and issues the "
        "MMAs.",
    ),
    Knob(
        "persistent",
        bool,
        False,
        (False, True),
        "As on Hopper: CTAs (whole pairs with cluster=2) looping over output tiles.",
    ),
    Knob(
        "raster_group",
        int,
        1,
        (1, 8),
        "As on Hopper: tile rows (along M) visited together by consecutive tile indices; persistent only.",
    ),
    Knob(
        "epilogue",
        str,
        "register",
        EPILOGUES,
        '"register" (tcgen05.ld 64 columns at a time, then 16-byte stores) or "tma" (a 128 x 64 staging '
        "chunk per consumer, then a TMA store).",
    ),
    Knob(
        "cluster",
        int,
        1,
        CLUSTERS,
        "1, or 2 to pair two CTAs along M into one tcgen05 cta_group::2 MMA of M=256 (each CTA loads its own "
        "A rows and half of the B tile; the pair shares both halves): a cluster tile is (2 x blk_m) x blk_n.",
    ),
    Knob("cluster_dim", str, "m", ("m",), 'Always "m": the CTA pair splits M (not a knob of the space\'s grid).'),
    Knob(
        "loader",
        str,
        "tma",
        ("tma", "threads"),
        '"tma", or "threads" (one stage, no producer: every thread copies 16-byte chunks; the seed\'s '
        "synchronous first steps).",
    ),
    home="tirtune.space.blackwell.knobs:KNOBS",
    # Every knob of the Hopper table this branch does not declare (schedule, reg_split, the epilogue
    # warpgroup, swap_ab, split-K, the L2 options, ... and any later one) is carried at its default
    # only: a Blackwell config has the same knobs, first knobs and label as a Hopper one, and so the
    # same digest, and a Hopper knob added later is held here without an edit (`hopper_knobs_at_default`
    # refuses any other value).
    holds=HOPPER_KNOBS,
    held_meaning="A Hopper knob the Blackwell template has no code path for: held at its default.",
)


def config(*values: Any, **knobs: Any) -> Config:
    """A Blackwell config: the knobs given (by name, or by position in the table's order) checked
    against the table, every other knob at its default."""
    return Config(KNOBS, *values, **knobs)
