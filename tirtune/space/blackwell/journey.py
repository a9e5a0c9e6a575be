"""The seed's B200 journey (V1..V9, the steps `bench/journey.py` maps to Hopper) as points of the
Blackwell space: what the kernel tests build and the compile gate checks."""

from __future__ import annotations

from dataclasses import dataclass

from tirtune.core import Config, Problem
from tirtune.space.blackwell.knobs import config

__all__ = ["JOURNEY", "JourneyStep"]


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
    return JourneyStep(config(**{**base, **knobs}), Problem.parse(problem), tflops, note)


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
