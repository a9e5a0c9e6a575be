"""The Blackwell (sm_100a) search space of the GEMM template.

Compile-checked, not yet run on a B200: every kernel of this space lowers and passes ptxas for
sm_100a (see bench/results/blackwell/2026-11-29-static-gate.md), but none has been verified or timed on a Blackwell
GPU. `STATUS` says so wherever results for this space are shown.

What the knobs mean on Blackwell (`tirtune.kernels.blackwell`):

- blk_m x blk_n: the output tile one CTA owns; its `consumers` (1 or 2) MMA streams each own 128
  rows of it (the full 128-lane TMEM datapath) and accumulate in their own blk_n TMEM columns,
  reading the same B stage. blk_k: the k-tile, one or two 128-byte swizzle atoms; stages: depth
  of the shared-memory ring.
- warp_specialized: an extra warpgroup whose warp 3 issues the TMA loads and whose warp c issues
  consumer c's MMAs; otherwise one elected thread of warpgroup 0 loads (up to `stages` k-tiles
  ahead) and issues the MMAs.
- persistent, raster_group: as on Hopper (CTAs, whole pairs, looping over tiles; grouped rows).
- epilogue: "register" (tcgen05.ld 64 columns at a time, then 16-byte stores) or "tma" (a 128 x 64
  staging chunk per consumer, then a TMA store).
- cluster: 1, or 2 to pair two CTAs along M into one tcgen05 cta_group::2 MMA of M=256 (each CTA
  loads its own A rows and half of the B tile; the pair shares both halves), so a cluster tile is
  (2 x blk_m) x blk_n; cluster_dim stays "m".
- loader: "tma", or "threads" (one stage, no producer: every thread copies 16-byte chunks; the
  seed's synchronous first steps).

The template has no code path for the Hopper-only knobs (schedule, reg_split, the epilogue
warpgroup, swap_ab, split-K, the TMA loads' L2 options, and any later one): the rule
`hopper_knobs_at_default` holds them at their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from tirtune.core import Config, Problem
from tirtune.space.blackwell_rules import BLACKWELL_CONFIG_RULES, BLACKWELL_PROBLEM_RULES
from tirtune.space.space import SearchSpace

__all__ = ["ARCH", "BLACKWELL", "JOURNEY", "STATUS", "TEMPLATE_VERSION", "JourneyStep"]

# Bump whenever the generated kernel for a given config can change (part of every measurement's
# identity, as on Hopper).
TEMPLATE_VERSION = "blackwell-gemm/1"
ARCH = "sm_100a"
STATUS = "compile-checked, not yet run on a B200"

BLACKWELL = SearchSpace(
    arch=ARCH,
    template_version=TEMPLATE_VERSION,
    knobs={
        "blk_m": (128, 256),
        "blk_n": (64, 128, 192, 256),
        "blk_k": (64, 128),
        "stages": (1, 2, 3, 4, 5, 6, 8),
        "consumers": (1, 2),
        "warp_specialized": (False, True),
        "persistent": (False, True),
        "raster_group": (1, 8),
        "epilogue": ("register", "tma"),
        "cluster": (1, 2),
        "loader": ("tma", "threads"),
    },
    problem_rules=BLACKWELL_PROBLEM_RULES,
    config_rules=BLACKWELL_CONFIG_RULES,
)


@dataclass(frozen=True, slots=True)
class JourneyStep:
    """One step of the seed's B200 journey (V1..V9, the steps `bench/journey.py` maps to Hopper) as a point of
    this space."""

    config: Config
    problem: Problem
    seed_tflops: float | None  # what the seed measured on its B200 (4096^3 fp16), None if not comparable
    note: str


def _step(problem: str, tflops: float | None, note: str, **knobs: object) -> JourneyStep:
    base: dict[str, object] = {
        "blk_m": 128,
        "blk_n": 128,
        "blk_k": 64,
        "stages": 1,
        "consumers": 1,
        "warp_specialized": False,
    }
    return JourneyStep(Config(**{**base, **knobs}), Problem.parse(problem), tflops, note)  # type: ignore[arg-type]


# The nine steps. V1-V3 copy A and B with all threads (loader="threads"); V1 and V2 are the seed's
# teaching shapes (one tile; one tile with a K loop), so their throughput is not comparable.
JOURNEY: dict[str, JourneyStep] = {
    "v1": _step(
        "128x128x64",
        None,
        "one 128x128x64 tile: all 128 threads copy A and B, one MMA, TMEM -> registers -> global",
        loader="threads",
    ),
    "v2": _step("128x128x1024", None, "one tile, a K loop of 16 MMAs into the same TMEM accumulator", loader="threads"),
    "v3": _step("4096x4096x4096", 266.9, "1024 CTAs, one 128x128 tile each, thread copies", loader="threads"),
    "v4": _step("4096x4096x4096", 274.7, "TMA loads, one stage: async movement, no overlap yet"),
    "v5": _step("4096x4096x4096", 521.3, "two stages: TMA fills one while tcgen05 reads the other", stages=2),
    "v6": _step(
        "4096x4096x4096",
        611.1,
        "persistent: 148 CTAs loop over tiles (grouped raster)",
        stages=2,
        persistent=True,
        raster_group=8,
    ),
    "v7": _step(
        "4096x4096x4096",
        599.9,
        "warp-specialized: TMA warp, MMA warp, writeback warpgroup, four barriers, TMA-store epilogue",
        stages=2,
        warp_specialized=True,
        persistent=True,
        raster_group=8,
        epilogue="tma",
    ),
    "v8": _step(
        "4096x4096x4096",
        1153.8,
        "2-CTA cluster, cta_group::2: 256x256 per pair (128x256 per CTA)",
        blk_n=256,
        stages=4,
        warp_specialized=True,
        persistent=True,
        raster_group=8,
        epilogue="tma",
        cluster=2,
    ),
    "v9": _step(
        "4096x4096x4096",
        1263.9,
        "two consumers share each B stage: 512x256 per pair",
        blk_m=256,
        blk_n=256,
        stages=4,
        consumers=2,
        warp_specialized=True,
        persistent=True,
        raster_group=8,
        epilogue="tma",
        cluster=2,
    ),
}
