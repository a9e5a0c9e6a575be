"""The seed's nine-step GEMM journey (V1..V9, written for a B200) as configs of our Hopper template.

    python -m bench.journey                 # print the mapping
    python -m bench.journey --build [--out .build/journey] [--jobs 2]

Each step is one (Config, Problem) pair of hopper-gemm/3 and changes one idea relative to the
step before, as in the seed: V1-V3 copy A and B with the consumer threads into the swizzled
shared-memory tile and multiply synchronously (loader="threads", one stage); V4 lets TMA move the
tiles but still waits for each right away; V5 adds a second stage; V6 makes the CTAs persistent
with a grouped tile order (the prefetching consumer thread restarts the ring per tile); V7 moves
the loads to a producer warpgroup; V8 pairs CTAs in a 2-CTA cluster along M that multicast the
shared B tile; V9 adds a second consumer warpgroup that shares each staged B tile (blk_m doubles,
as the seed's cluster tile grew from 256x256 to 512x256). Pipeline depth stays at the seed's two
stages and the epilogue at register stores throughout, so each row isolates its step; the tuned
best points are in docs/perf-notes.md.

Where Hopper differs from the seed's Blackwell kernels: the accumulator lives in registers, not
TMEM, so one consumer warpgroup holds at most 128x128 (V1-V8 use 128x128 tiles, V9 256x128), and
a Hopper cluster does not issue one MMA across two CTAs (no cta_group=2): V8's pair shares B
through TMA multicast instead. `--build` compiles the nine into --out with the manifest that
bench/verify_template.py verifies and times on the GPU host (V1 and V2 use their teaching shapes;
V3-V9 are 4096^3 fp16, the comparable rows).

Measured on an H200 (bench/results/kits/2026-11-29-journey.md, ratio to cuBLAS): V3 0.40, V4 0.68, V5 0.68,
V6 0.30, V7 0.37, V8 0.34, V9 0.46, all correct. Unlike the seed, V4/V5 run several CTAs per SM
(32 KiB of shared memory each), which overlaps loads and MMAs across CTAs, and persistence (V6,
one CTA per SM at depth 2) loses that; docs/perf-notes.md has the discussion.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tirtune.space import HOPPER, Config, Problem
from tirtune.space.hopper.knobs import config as hopper_config

__all__ = ["JOURNEY", "Step"]


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    what: str
    config: Config
    problem: Problem


SQUARE = Problem(4096, 4096, 4096, "float16")
_SYNC = hopper_config(128, 128, 64, stages=1, consumers=1, warp_specialized=False, loader="threads")
_TMA = _SYNC.replace(loader="tma")
_TWO = _TMA.replace(stages=2)
_PERSIST = _TWO.replace(persistent=True, raster_group=8)
_WS = _PERSIST.replace(warp_specialized=True)
_CLUSTER = _WS.replace(cluster=2)
_SHARE_B = hopper_config(256, 128, 64, 2, 2, True, persistent=True, raster_group=8, cluster=2)

JOURNEY: tuple[Step, ...] = (
    Step(
        "V1",
        "one 128x128x64 tile: threads copy A and B to shared memory, one wgmma chain",
        _SYNC,
        Problem(128, 128, 64, "float16"),
    ),
    Step(
        "V2",
        "a K loop over one output tile (64 k-tiles, copy-sync-multiply each)",
        _SYNC,
        Problem(128, 128, 4096, "float16"),
    ),
    Step("V3", "a tiled grid: 32x32 CTAs of 128x128 over 4096^3", _SYNC, SQUARE),
    Step("V4", "TMA moves the tiles (one stage: issue, wait, multiply)", _TMA, SQUARE),
    Step("V5", "a two-stage ring: the next k-tile loads while this one multiplies", _TWO, SQUARE),
    Step("V6", "persistent CTAs (132) walking tiles in groups of 8 tile rows", _PERSIST, SQUARE),
    Step("V7", "warp-specialized: a producer warpgroup issues every load", _WS, SQUARE),
    Step("V8", "2-CTA cluster along M: each CTA loads half of the shared B tile and multicasts it", _CLUSTER, SQUARE),
    Step(
        "V9",
        "two consumer warpgroups share each staged B tile (256x128 per CTA, 512x128 per cluster)",
        _SHARE_B,
        SQUARE,
    ),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", action="store_true", help="compile the nine with bench/prebuild.py")
    parser.add_argument("--out", default=".build/journey")
    parser.add_argument("--jobs", default="2")
    args = parser.parse_args()
    for step in JOURNEY:
        bad = HOPPER.violations(step.config, step.problem)
        state = "; ".join(map(str, bad)) if bad else "valid"
        print(f"{step.name}  {step.config.label():<44} {step.problem}  {state}\n    {step.what}")  # noqa: T201
    if not args.build:
        return 0
    cmd = [sys.executable, "-m", "bench.prebuild", "--set", "journey", "--out", args.out, "--jobs", args.jobs]
    return subprocess.run(cmd, check=False, cwd=Path(__file__).resolve().parents[1]).returncode


if __name__ == "__main__":
    sys.exit(main())
