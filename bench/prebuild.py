"""Build the template-verification set on this (CPU) machine: .so files plus manifest.json.

    python -m bench.prebuild [--set v1|v2|v3|v3-perf|journey] [--out .build/verify] [--jobs 2] [--timeout 600]

The v1 set covers every knob value of hopper-gemm/1 and the tail problems; the v2 set covers
the knobs hopper-gemm/2 added (persistent, raster_group, epilogue) around the best 4096^3 shape,
with same-run register-epilogue baselines and tails; the v3 set covers the hopper-gemm/3 code
paths (ping-pong consumers, the chunked TMA store, the setmaxnreg split, clusters with multicast,
the thread loader, persistent CTAs without a producer) on tails and the candidates for the best
4096^3 / bf16 / 8192^3 points; `journey` is bench/journey.py's V1..V9. Each entry is built
through the same cached path the tuner uses (`compile_candidate`), then copied under a readable
name into --out with a manifest that bench/verify_template.py reads on the GPU host.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench import fp8_paths
from tirtune.builder.compile_one import DEFAULT_TEMPLATE
from tirtune.builder.tirx_builder import compile_candidate
from tirtune.core import Candidate, Outcome
from tirtune.core.epilogue import BLOCK_K, OUT_FLOAT16, EpilogueSpec
from tirtune.core.problem import FP8
from tirtune.space import HOPPER, HOPPER_V3, TEMPLATE_VERSION, Config, Problem, SearchSpace
from tirtune.space.hopper.knobs import FITTED_BLK_N, RAGGED_BLK_N
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.space.hopper.knobs import config as hopper_config
from tirtune.space.hopper.rules import (
    FP8_KNOBS,
    SWIGLU_KNOBS,
    fp8_block_buffers,
    kernel_tiles,
    swap_ab_pingpong_unclustered,
    swap_ab_pingpong_wide,
    v4_accumulator_limit,
)
from tirtune.space.shapes import SMS

logger = logging.getLogger("prebuild")


def _c(bm: int, bn: int, bk: int, st: int, cons: int, ws: bool, **v2: object) -> Config:
    return hopper_config(blk_m=bm, blk_n=bn, blk_k=bk, stages=st, consumers=cons, warp_specialized=ws, **v2)  # type: ignore[arg-type]


SQUARE = Problem(4096, 4096, 4096, "float16")
TAIL = Problem(1000, 1000, 1000, "float16")
BF16 = Problem(4096, 4096, 4096, "bfloat16")
SMALL = Problem(64, 256, 128, "float16")
TINY = Problem(100, 200, 64, "float16")
ODD_K = Problem(520, 392, 200, "bfloat16")  # K not a multiple of 64 (nor of 128)
ODD_N = Problem(777, 333, 136, "float16")  # odd M and N: the unpaired (scalar) epilogue stores
TAIL_N8 = Problem(777, 336, 136, "float16")  # tails along M and K, N a multiple of 8 (TMA store)
TAIL_BF16 = Problem(1000, 1000, 1000, "bfloat16")

# (config, problem): every knob value appears at least once; tails hit the M, N and K guards.
SET: list[tuple[Config, Problem]] = [
    (_c(64, 64, 64, 2, 1, False), TAIL),  # the simplest kernel
    (_c(64, 64, 64, 2, 1, False), TINY),
    (_c(64, 128, 64, 3, 1, False), SQUARE),
    (_c(128, 128, 64, 4, 2, True), SQUARE),  # the classic 2-consumer warp-specialized tile
    (_c(128, 128, 64, 4, 2, True), TAIL),
    (_c(128, 256, 64, 4, 2, True), SQUARE),  # 64x256 per consumer: 128 accumulators
    (_c(128, 256, 64, 3, 2, True), BF16),
    (_c(128, 128, 128, 3, 1, False), SQUARE),  # blk_k 128, 128 rows on one consumer (2 x m64)
    (_c(128, 128, 128, 3, 1, False), ODD_K),
    (_c(128, 128, 64, 5, 1, True), SQUARE),  # 1 consumer + producer, 2 x m64 accumulators
    (_c(256, 128, 64, 3, 2, True), SQUARE),  # blk_m 256: 128 rows per consumer
    (_c(256, 128, 64, 3, 2, True), TAIL),
    (_c(128, 192, 64, 4, 2, False), SQUARE),  # blk_n 192, 2 consumers without a producer
    (_c(128, 192, 64, 4, 2, False), ODD_K),
    (_c(64, 256, 128, 2, 1, True), SMALL),  # blk_k 128 + ws
    (_c(64, 128, 64, 6, 1, True), SQUARE),  # 6 stages
    (_c(64, 64, 128, 6, 1, False), TAIL),  # 6 stages, blk_k 128, no producer
    (_c(128, 64, 64, 5, 2, False), BF16),  # 2 x 64-row consumers without a producer
    (_c(256, 64, 128, 2, 2, False), TINY),  # whole tile larger than the problem
    (_c(64, 192, 128, 3, 1, True), TAIL),
    (_c(128, 128, 64, 3, 2, True), ODD_N),
    (_c(64, 64, 64, 2, 1, False), ODD_N),
]


P, G8, TMA = {"persistent": True}, {"persistent": True, "raster_group": 8}, {"epilogue": "tma"}
# hopper-gemm/2: persistent CTAs, grouped rasterization and the stmatrix + TMA-store epilogue.
SET_V2: list[tuple[Config, Problem]] = [
    (_c(128, 256, 64, 4, 2, True), SQUARE),  # the v1 best: same-run baseline
    (_c(128, 256, 64, 4, 2, True, **P), SQUARE),  # persistent, row-major tiles
    (_c(128, 256, 64, 4, 2, True, **G8), SQUARE),  # persistent, groups of 8 tile rows
    (_c(128, 256, 64, 3, 2, True, **TMA), SQUARE),  # TMA store, one tile per CTA
    (_c(128, 256, 64, 3, 2, True, **P, **TMA), SQUARE),
    (_c(128, 256, 64, 3, 2, True, **G8, **TMA), SQUARE),  # the predicted best
    (_c(128, 256, 64, 3, 2, True, **G8, **TMA), BF16),
    (_c(256, 128, 64, 3, 2, True, **G8, **TMA), SQUARE),  # 128 rows per consumer: 2 m64 blocks staged
    (_c(128, 128, 64, 4, 2, True, **G8, **TMA), SQUARE),
    (_c(64, 64, 64, 4, 1, True, **G8, **TMA), TAIL),  # 256 tiles: 2 loop iterations, tails on M, N, K
    (_c(128, 128, 64, 4, 2, True, **G8, **TMA), TAIL_N8),  # 7 tile rows: one partial raster group
    (_c(128, 128, 64, 3, 2, True, **G8), ODD_N),  # persistent + register stores, odd N
    (_c(64, 256, 128, 2, 1, True, **P, **TMA), SMALL),  # blk_k 128, a single tile
    (_c(128, 128, 64, 4, 1, False, **TMA), TAIL_BF16),  # no producer, 2 m64 blocks, bf16 packing
]
BIG = Problem(8192, 8192, 8192, "float16")
TAIL_CL = Problem(1000, 1024, 200, "float16")  # 8 tile rows of 128 (pairs), a tail along M and K
SHORT_M = Problem(50, 1000, 136, "bfloat16")  # M <= 64: one partial tile row
PP, CH, R240 = {"schedule": "pingpong"}, {"epilogue": "tma_chunked"}, {"reg_split": "240/24"}
CL2M, CL2N = {"cluster": 2}, {"cluster": 2, "cluster_dim": "n"}
# hopper-gemm/3: every new code path on a tail or small problem (correctness), then the
# performance candidates at 4096^3 with the hopper-gemm/2 best as the same-run baseline.
SET_V3_TAILS: list[tuple[Config, Problem]] = [
    (_c(192, 128, 64, 4, 3, True, **G8, **CH), TAIL),  # three consumers + producer, chunked
    (_c(192, 256, 64, 3, 3, False, **P, **CH), TAIL_N8),  # three consumers, no producer, 3 x 64x256
    (_c(64, 128, 64, 4, 2, True, **G8, **PP, **TMA), TAIL),  # ping-pong, 64-row tiles, tails
    (_c(128, 128, 64, 4, 2, True, **G8, **PP, **CH), TAIL_N8),  # ping-pong, 2 m64 blocks, chunked
    (_c(64, 192, 64, 4, 2, True, **P, **PP), ODD_N),  # ping-pong, register stores, odd N
    (_c(64, 192, 64, 4, 1, True, **G8, **CH), TAIL_BF16),  # chunked, 1 consumer, 3 boxes (odd)
    (_c(128, 128, 64, 4, 2, True, **G8, **CH, **R240), TAIL),  # chunked + 240/24
    (_c(128, 128, 64, 4, 2, True, **G8, **CH, **CL2M), TAIL_CL),  # cluster 2 along M, B multicast
    (_c(128, 128, 64, 4, 2, True, **G8, **TMA, **CL2N), TAIL_CL),  # cluster 2 along N, A multicast
    (_c(128, 64, 64, 4, 2, True, **G8, cluster=4), TAIL_CL),  # cluster 4 along M, register stores
    (_c(64, 128, 64, 4, 2, True, **G8, **PP, **CH, cluster=4, cluster_dim="n"), TAIL_CL),  # ping-pong + cl4n
    (_c(128, 128, 64, 3, 2, False, **G8, **TMA), TAIL_N8),  # persistent without a producer
    (_c(128, 128, 64, 1, 2, False), TAIL),  # one stage, TMA
    (_c(128, 128, 64, 1, 2, False, loader="threads"), ODD_N),  # thread loader, odd N, tails
    (_c(64, 64, 128, 1, 1, False, loader="threads", **TMA), SHORT_M),  # thread loader + TMA store, M<=64
    (_c(64, 256, 64, 4, 2, True, **G8, **PP, **CH), SHORT_M),  # ... and M<=64 for the new paths
]
SET_V3_PERF: list[tuple[Config, Problem]] = [
    (_c(128, 256, 64, 3, 2, True, **G8, **TMA), SQUARE),  # hopper-gemm/2 best: baseline
    (_c(128, 256, 64, 3, 2, True, **G8, **TMA, **R240), SQUARE),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), SQUARE),  # 4 stages fit with chunks
    (_c(128, 256, 64, 4, 2, True, **G8, **CH, **R240), SQUARE),
    (_c(64, 256, 64, 4, 2, True, **G8, **PP, **TMA), SQUARE),  # ping-pong 64x256 per consumer
    (_c(64, 256, 64, 4, 2, True, **G8, **PP, **CH), SQUARE),
    (_c(64, 256, 64, 4, 2, True, **G8, **PP), SQUARE),  # ping-pong, register stores
    (_c(128, 128, 64, 5, 2, True, **G8, **PP, **CH), SQUARE),  # ping-pong 128x128 per consumer
    (_c(128, 128, 64, 4, 2, True, **G8, **PP, **TMA), SQUARE),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH, **CL2M), SQUARE),  # cluster pairs sharing B
    (_c(128, 256, 64, 4, 2, True, **G8, **CH, **CL2N), SQUARE),  # cluster pairs sharing A
    (_c(64, 256, 64, 4, 2, True, **G8, **PP, **CH, **CL2M), SQUARE),
    (_c(128, 128, 64, 5, 2, True, **G8, **PP, **CH, **CL2N), SQUARE),
    (_c(128, 256, 64, 3, 2, True, **G8, **TMA), BF16),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), BF16),
    (_c(64, 256, 64, 4, 2, True, **G8, **PP, **TMA), BF16),
    (_c(128, 256, 64, 3, 2, True, **G8, **TMA), BIG),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), BIG),
    (_c(64, 256, 64, 4, 2, True, **G8, **PP, **TMA), BIG),
]

# Second-round candidates: clusters with the register and chunked epilogues, 256x128 tiles.
SET_V3_MORE: list[tuple[Config, Problem]] = [
    (_c(192, 128, 64, 4, 3, True, **G8, **CH), SQUARE),
    (_c(192, 256, 64, 3, 3, False, **G8, **CH), SQUARE),
    (_c(128, 256, 64, 4, 2, True, **G8, **CL2M), SQUARE),
    (_c(128, 256, 64, 4, 2, True, **G8, **CL2N), SQUARE),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH, **CL2M, **R240), SQUARE),
    (_c(256, 128, 64, 4, 2, True, **G8, **CH), SQUARE),
    (_c(256, 128, 64, 4, 2, True, **G8, **CH, **CL2N), SQUARE),
    (_c(128, 128, 64, 6, 2, True, **G8, **PP, **CH), SQUARE),
    (_c(64, 256, 64, 4, 2, True, **G8, **PP, **TMA, **R240), SQUARE),
]

# Third round: the ping-pong 128x128 winner around its neighbours (raster groups 4/16 are outside
# the knob range: probes for it), on bf16 and 8192^3, against the earlier bests.
PP128 = {"schedule": "pingpong", "epilogue": "tma_chunked", "persistent": True}
SET_V3_FINAL: list[tuple[Config, Problem]] = [
    (_c(128, 256, 64, 3, 2, True, **G8, **TMA), SQUARE),  # hopper-gemm/2 best
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), SQUARE),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=8), SQUARE),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16), SQUARE),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=4), SQUARE),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=8, **R240), SQUARE),
    (_c(128, 128, 128, 3, 2, True, **PP128, raster_group=8), SQUARE),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=8), BF16),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), BF16),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=8), BIG),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), BIG),
    (_c(256, 128, 64, 4, 2, True, **G8, **CH), BIG),
]


# Wave quantization: 4096^3 has 1024 tiles of 128x128 (512 of 128x256) for 132 SMs, 7.76 (3.88)
# waves, so a quarter of the SMs idle through the last one; M = 4224 makes exactly 8 (4) waves.
WAVES = Problem(4224, 4096, 4096, "float16")
SET_WAVES: list[tuple[Config, Problem]] = [  # beside their 4096^3 runs in SET_V3_FINAL
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16), WAVES),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), WAVES),
]


# Fourth round (after the L2-flushed re-measure): raster groups of 16, 256x128 tiles and the
# 240/24 split around the best bf16 and fp16 4096^3 points, with the earlier bests as references.
SET_ROUND4: list[tuple[Config, Problem]] = [
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16), BF16),
    (_c(128, 128, 64, 5, 2, True, **PP128, raster_group=16), BF16),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16, **R240), BF16),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=8), BF16),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), BF16),
    (_c(128, 256, 64, 4, 2, True, persistent=True, raster_group=16, **CH), BF16),
    (_c(256, 128, 64, 4, 2, True, **G8, **CH), BF16),
    (_c(256, 128, 64, 4, 2, True, persistent=True, raster_group=16, **CH), BF16),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), SQUARE),
    (_c(128, 256, 64, 4, 2, True, persistent=True, raster_group=16, **CH), SQUARE),
    (_c(256, 128, 64, 4, 2, True, **G8, **CH), SQUARE),
    (_c(256, 128, 64, 4, 2, True, persistent=True, raster_group=16, **CH), SQUARE),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16), SQUARE),
]


# Knobs (and blk_k 256) added to hopper-gemm/5 after its first kit: left out of the earlier sets'
# random draws, so `v4`, `v4-fuzz` and `v5-fuzz` still draw the configs they drew when they ran.
LATER_V5_KNOBS = ("l2_hint", "l2_promotion", "prefetch_tensormap")
# Knobs added after every set here ran (their defaults build what those sets built): never drawn.
DRAWN_NEVER = ("trim", "peel_k", "k_rotate", "split_k_scope", "stream_k", "stream_k_scope", "block_stagger")


# The splits the drawn sets were drawn from; the deeper ones have a set of their own (split-fuzz).
DRAWN_SPLITS = (1, 2, 4, 8)


def _drawn_knobs(space: SearchSpace, later: bool = False) -> dict[str, Any]:
    """The knob ranges a random draw picks from: the space's, without the later /5 additions
    unless `later`, and never the ragged widths (136..248), the fitted ones (56..120), the splits
    past DRAWN_SPLITS or the knobs of DRAWN_NEVER (added after every set here ran)."""
    if space is not HOPPER:
        return dict(space.knobs)
    knobs = {name: values for name, values in space.knobs.items() if name not in DRAWN_NEVER}
    knobs["blk_n"] = tuple(v for v in knobs["blk_n"] if v not in RAGGED_BLK_N and v not in FITTED_BLK_N)
    knobs["split_k"] = tuple(v for v in knobs["split_k"] if v in DRAWN_SPLITS)
    if later:
        return knobs
    knobs = {name: values for name, values in knobs.items() if name not in LATER_V5_KNOBS}
    knobs["blk_k"] = tuple(v for v in knobs["blk_k"] if v <= 128)
    return knobs


# Rules added after every set here was drawn and ran: a rebuilt set draws what it drew then; a
# point such a rule refuses now is left out of the build (plan() applies every rule), said in the log.
LATER_RULES = frozenset({swap_ab_pingpong_unclustered, swap_ab_pingpong_wide})
_LATER_RULE_NAMES = frozenset(rule.__name__ for rule in LATER_RULES)


def _even_slices(config: Config) -> bool:
    """A cluster's multicast slices are equal whole 8-row atoms, as every cluster had to be when the
    sets before `uneven-fuzz` were drawn (rules.multicast_slice_aligned takes uneven ones since)."""
    shared = config.blk_n if config.cluster_dim == "m" else config.blk_m
    return config.cluster == 1 or shared % (8 * config.cluster) == 0


def _valid_but_later(space: SearchSpace, config: Config, problem: Problem) -> bool:
    """`space.is_valid` but for LATER_RULES: what a set may hold (a point they refuse is left out)."""
    return all(v.rule in _LATER_RULE_NAMES for v in space.violations(config, problem))


def _valid_as_drawn(space: SearchSpace, config: Config, problem: Problem) -> bool:
    """`space.is_valid` as it answered when the sets were drawn (without LATER_RULES, with even
    multicast slices only)."""
    return _even_slices(config) and _valid_but_later(space, config, problem)


def _drawable(
    space: SearchSpace, config: Config, problem: Problem, uneven: bool = False, swapped_staged: bool = False
) -> bool:
    """A random draw's test: valid as drawn, within the 128 accumulators a consumer thread every
    drawn set was drawn under (hopper-gemm/5 now takes up to 192), and a swapped tile storing from
    registers (the only store it took then), so they draw what they drew. uneven: a draw made since
    uneven multicast slices are valid (`uneven-fuzz`) takes them too; swapped_staged: one made since
    swapped tiles take the chunked TMA store (`swap-staged-fuzz`) takes that."""
    if v4_accumulator_limit(config, problem) is not None:
        return False
    if config.swap_ab and config.epilogue != "register" and not swapped_staged:
        return False
    return (_valid_but_later if uneven else _valid_as_drawn)(space, config, problem)


def _fuzz(
    count: int = 16, seed: int = 3, space: SearchSpace = HOPPER_V3, new_in_v4: bool = False
) -> list[tuple[Config, Problem]]:
    """Valid points drawn at random from the whole grid on small and ragged problems: the claim
    that every combination the rules accept is correct, sampled. new_in_v4: only points that use
    a layout hopper-gemm/4 added (the epilogue warpgroup or four consumers)."""
    import random

    rng = random.Random(seed)
    problems = [TAIL, TAIL_BF16, SHORT_M, TAIL_N8, TAIL_CL, ODD_N, Problem(1024, 1024, 1024, "bfloat16")]
    chosen: list[tuple[Config, Problem]] = []
    while len(chosen) < count:
        knobs = {name: rng.choice(list(values)) for name, values in _drawn_knobs(space).items()}
        if new_in_v4 and not knobs["epilogue_warpgroup"]:
            knobs["consumers"] = 4
        config = hopper_config(**knobs)
        problem = rng.choice(problems)
        if _drawable(space, config, problem) and (config, problem) not in chosen:
            chosen.append((config, problem))
    return chosen


# hopper-gemm/4: the epilogue warpgroup and four consumers. Tails and small problems for
# correctness (M <= 64, ragged M/N/K, a cluster), then the 4096^3 candidates beside the
# hopper-gemm/3 bests as same-run references.
EWG, R232_24 = {"epilogue_warpgroup": True}, {"reg_split": "232/24"}
SET_V4_TAILS: list[tuple[Config, Problem]] = [
    (_c(128, 128, 64, 4, 2, True, **PP128, raster_group=8, **EWG, **R232_24), TAIL_N8),  # ping-pong, chunked
    (_c(256, 128, 64, 4, 2, True, **G8, **CH, **EWG, **R232_24), TAIL),  # cooperative, 2 m64 blocks, chunked
    (_c(128, 128, 64, 4, 2, True, **P, **PP, **TMA, **EWG, **R232_24, **CL2N), Problem(777, 512, 136, "bfloat16")),
    (_c(128, 128, 64, 4, 2, True, **CH, **EWG), SHORT_M),  # not persistent, M <= 64, no setmaxnreg
    (_c(64, 128, 64, 4, 1, True, **G8, **TMA, **EWG), TINY),  # one consumer + producer + epilogue
    (_c(64, 192, 64, 4, 1, True, **G8, **CH, **EWG), TAIL_BF16),  # 3 boxes a tile: odd buffer use
    (_c(256, 128, 64, 3, 4, True, **G8, **CH, reg_split="112/24"), TAIL),  # four consumers, setmaxnreg
    (_c(256, 128, 64, 3, 4, True, **G8, **TMA, reg_split="112/24"), TAIL_BF16),
    (_c(256, 64, 64, 4, 4, True, **CH, **EWG), Problem(300, 200, 136, "bfloat16")),  # six warpgroups
    (_c(256, 64, 64, 4, 4, True, **G8, **CH, **EWG, **CL2M), TAIL_CL),  # four consumers in a cluster
    (_c(256, 128, 64, 3, 4, False, **P, **TMA), TAIL),  # four consumers, no producer
    (_c(128, 128, 64, 4, 2, True, persistent=True, raster_group=0, **CL2M), TAIL_CL),  # column-major pairs
    (_c(64, 128, 64, 4, 2, True, persistent=True, raster_group=0, **PP, **CH), TAIL_N8),  # column-major ping-pong
]
SET_V4_PERF: list[tuple[Config, Problem]] = [
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16), SQUARE),  # hopper-gemm/3 bests
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), SQUARE),
    (_c(256, 128, 64, 4, 2, True, **G8, **CH), SQUARE),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16, **EWG, **R232_24), SQUARE),
    (_c(128, 128, 64, 5, 2, True, persistent=True, raster_group=16, **PP, **TMA, **EWG, **R232_24), SQUARE),
    (_c(256, 128, 64, 4, 2, True, **G8, **CH, **EWG, **R232_24), SQUARE),
    (_c(256, 128, 64, 3, 2, True, **G8, **TMA, **EWG, **R232_24), SQUARE),
    (_c(256, 128, 64, 3, 4, True, **G8, **CH, reg_split="112/24"), SQUARE),
    (_c(256, 128, 64, 3, 4, True, **G8, **TMA, reg_split="112/24"), SQUARE),
    (_c(256, 128, 64, 3, 4, False, **G8, **CH), SQUARE),
    (_c(64, 256, 64, 4, 2, True, **PP128, raster_group=16), SQUARE),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=0), SQUARE),  # column-major
    (_c(128, 256, 64, 4, 2, True, persistent=True, raster_group=0, **CH), SQUARE),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16), BF16),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), BF16),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16, **EWG, **R232_24), BF16),
    (_c(256, 128, 64, 4, 2, True, **G8, **CH, **EWG, **R232_24), BF16),
    (_c(256, 128, 64, 3, 4, True, **G8, **CH, reg_split="112/24"), BF16),
    (_c(64, 256, 64, 4, 2, True, **PP128, raster_group=16), BF16),
]


# hopper-gemm/5 (small, skinny, ragged and decode GEMMs): swap_ab, narrow tiles, split-K clusters (DSMEM
# reduction), one-row operands. Per problem: the new candidates, then hopper-gemm/4 layouts as same-run
# references. "swap": the kernel's tile is blk_m rows of the problem's N by blk_n columns of its M.
SW, WS1 = {"swap_ab": True}, {"consumers": 1, "warp_specialized": True}
GEMV = Problem(1, 4096, 4096, "float16")
DECODE = Problem(16, 4096, 4096, "float16")
DECODE_BF16 = Problem(16, 4096, 4096, "bfloat16")
BATCH128 = Problem(128, 4096, 4096, "float16")
SQUARE_1K = Problem(1024, 1024, 1024, "float16")
SQUARE_2K = Problem(2048, 2048, 2048, "float16")
SET_V5_PERF: list[tuple[Config, Problem]] = [
    # M = 1: the problem's B (33.5 MB) streamed through 64-row tiles, A one row on wgmma's n8.
    (_c(64, 8, 128, 8, 1, True, **SW, split_k=2), GEMV),  # 64 tiles x 2 = 128 CTAs
    (_c(64, 8, 128, 8, 1, True, **SW), GEMV),  # 64 CTAs
    (_c(128, 8, 128, 6, 2, True, **SW, split_k=4), GEMV),  # 32 tiles x 4
    (_c(64, 8, 128, 4, 1, True, **SW, split_k=4), GEMV),  # 256 CTAs, 2-3 a SM
    (_c(64, 64, 64, 4, 1, False, split_k=4), GEMV),  # unswapped: A one row of a 64-row tile
    (_c(64, 8, 64, 1, 1, False, **SW, loader="threads"), GEMV),  # no TMA at all: the fallback if the 1-D map fails
    (_c(64, 8, 128, 8, 1, True, **SW, split_k=2), Problem(2, 4096, 4096, "float16")),
    (_c(64, 8, 128, 8, 1, True, **SW, split_k=2), Problem(7, 4096, 4096, "float16")),
    (_c(64, 8, 128, 8, 1, True, **SW, split_k=2), Problem(8, 4096, 4096, "float16")),
    (_c(64, 8, 128, 8, 1, True, **SW), Problem(8, 4096, 4096, "float16")),
    # M = 16 (decode): wgmma m64n16 over the problem's N.
    (_c(64, 16, 128, 8, 1, True, **SW, split_k=2), DECODE),
    (_c(64, 16, 128, 8, 1, True, **SW), DECODE),
    (_c(128, 16, 128, 6, 2, True, **SW, split_k=4), DECODE),
    (_c(64, 16, 128, 4, 1, True, **SW, split_k=4), DECODE),
    (_c(64, 16, 64, 8, 1, True, **SW, split_k=2), DECODE),
    (_c(64, 64, 128, 6, 1, True, split_k=2), DECODE),  # unswapped, M padded to 64 rows
    (_c(64, 64, 128, 6, 1, True), DECODE),  # hopper-gemm/4 layouts: references
    (_c(64, 128, 64, 6, 1, True, persistent=True), DECODE),
    (_c(64, 16, 128, 8, 1, True, **SW, split_k=2), DECODE_BF16),
    (_c(128, 16, 128, 6, 2, True, **SW, split_k=4), DECODE_BF16),
    (_c(64, 64, 128, 6, 1, True), DECODE_BF16),
    # M = 128: 124 FLOP/B, near the ridge; 128 CTAs of split or narrow tiles.
    (_c(128, 64, 64, 6, 2, True, split_k=2), BATCH128),  # 64 tiles x 2
    (_c(128, 128, 64, 4, 2, True, **SW, split_k=4), BATCH128),  # swapped: 32 tiles of N x 4
    (_c(64, 128, 64, 6, 1, True, **SW, split_k=2), BATCH128),  # swapped: 64 tiles x 2
    (_c(64, 128, 64, 6, 1, True, split_k=2), BATCH128),  # 2 x 32 tiles x 2
    (_c(128, 64, 64, 6, 2, True), BATCH128),  # references: 64 CTAs / persistent 128x128
    (_c(128, 128, 64, 6, 2, True, persistent=True, raster_group=8), BATCH128),
    # 1024^3: 64 tiles of 128x128 leave half the SMs idle.
    (_c(128, 128, 64, 4, 2, True, split_k=2), SQUARE_1K),
    (_c(128, 64, 64, 6, 2, True), SQUARE_1K),  # 128 tiles
    (_c(128, 64, 64, 6, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked"), SQUARE_1K),
    (_c(128, 96, 64, 6, 2, True, split_k=2), SQUARE_1K),  # 88 tiles x 2: 176 CTAs, two a SM
    (_c(128, 128, 64, 4, 2, True, persistent=True), SQUARE_1K),  # reference
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16), SQUARE_1K),
    # 2048^3: one wave of 128x256 (or 256x128) tiles against 1.94 waves of 128x128.
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16), SQUARE_2K),  # the 4096^3 best: reference
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), SQUARE_2K),
    (_c(256, 128, 64, 4, 2, True, **G8, **CH), SQUARE_2K),
    (_c(128, 256, 64, 4, 2, True, **CH), SQUARE_2K),  # one tile per CTA, 128 CTAs
    # Large ragged shapes: tile choice only (no new knob aims at them). 3000x5000x2000: 128x192
    # tiles are 648 = 4.9 waves (98% of the last wave busy) where 128x256 are 480 = 3.6 (64%).
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16), Problem(3000, 5000, 2000, "float16")),  # reference
    (_c(128, 192, 64, 4, 2, True, **G8, **CH), Problem(3000, 5000, 2000, "float16")),
    (_c(192, 128, 64, 4, 3, True, **G8, **CH), Problem(3000, 5000, 2000, "float16")),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16), Problem(4000, 4000, 4000, "float16")),  # reference
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), Problem(4000, 4000, 4000, "float16")),
]
# The two split-K reductions against each other (the same tiles and splits as the DSMEM entries
# above): a global workspace in turn, ordered by per-tile semaphores, no cluster.
SER = {"split_k_reduce": "serial"}
SET_V5_SERIAL: list[tuple[Config, Problem]] = [
    (_c(64, 8, 128, 8, 1, True, **SW, split_k=2, **SER), GEMV),
    (_c(64, 16, 128, 8, 1, True, **SW, split_k=2, **SER), DECODE),
    (_c(128, 16, 128, 6, 2, True, **SW, split_k=4, **SER), DECODE),
    (_c(64, 16, 128, 4, 1, True, **SW, split_k=4, **SER), DECODE),
    (_c(128, 64, 64, 6, 2, True, split_k=2, **SER), BATCH128),
    (_c(128, 128, 64, 4, 2, True, split_k=2, **SER), SQUARE_1K),
    (_c(128, 128, 64, 6, 2, True, split_k=2, **SER), SQUARE_1K),  # the stage the parked tile took back
    (_c(64, 8, 128, 4, 1, True, **SW, split_k=4, **SER), Problem(7, 200, 4096, "bfloat16")),  # ragged
    (_c(128, 48, 64, 4, 2, False, split_k=4, **SER), Problem(100, 200, 4096, "bfloat16")),
    (_c(64, 40, 128, 6, 1, True, split_k=8, **SER), Problem(33, 200, 14336, "float16")),
]
# Correctness of the new paths on the sweep's ragged shapes (M 1..512, N 8..4096, K 8..14336).
SET_V5_RAGGED: list[tuple[Config, Problem]] = [
    (_c(64, 8, 64, 2, 1, True, **SW), Problem(1, 8, 8, "float16")),  # both operands tiny, K one k-tile
    (_c(64, 8, 64, 2, 1, True, **SW, split_k=2), Problem(2, 24, 72, "float16")),
    (_c(64, 8, 128, 4, 1, True, **SW, split_k=4), Problem(7, 200, 4096, "bfloat16")),
    (_c(64, 40, 64, 4, 1, True, **SW, split_k=2), Problem(33, 4095, 72, "float16")),  # odd N: D rows unaligned
    (_c(64, 104, 64, 6, 1, True, **SW, split_k=2), Problem(100, 4096, 14336, "bfloat16")),  # n104 (probe)
    (_c(64, 24, 128, 8, 1, True, split_k=8), Problem(512, 24, 4096, "float16")),  # narrow, unswapped
    (_c(64, 64, 128, 4, 1, True, **SW, split_k=8), Problem(64, 8, 4096, "float16")),
    (_c(64, 16, 64, 2, 1, False, **SW, split_k=2), Problem(16, 4095, 72, "bfloat16")),  # no producer
    (_c(64, 8, 64, 2, 1, True, **SW), Problem(2, 4096, 8, "float16")),
    (_c(64, 40, 128, 6, 1, True, split_k=8), Problem(33, 200, 14336, "float16")),  # narrow + 8-CTA split
    (_c(64, 8, 64, 2, 1, False, **SW, split_k=2), Problem(7, 24, 72, "bfloat16")),
    (_c(64, 8, 128, 8, 1, True, **SW, split_k=4), Problem(1, 4095, 14336, "float16")),
    (_c(128, 128, 64, 2, 2, True, split_k=2), Problem(512, 4096, 72, "float16")),
    (_c(128, 48, 64, 4, 2, False, split_k=4), Problem(100, 200, 4096, "bfloat16")),
    (_c(64, 64, 64, 4, 1, True), Problem(1, 200, 72, "float16")),  # M = 1 without swap or split
    (_c(128, 16, 64, 4, 2, True, persistent=True, cluster=2, **SW), Problem(16, 4096, 4096, "float16")),
    (
        _c(64, 24, 64, 4, 2, True, persistent=True, raster_group=8, schedule="pingpong", **SW),
        Problem(33, 4095, 136, "bfloat16"),
    ),
    (_c(128, 32, 64, 4, 1, True, **SW, split_k=8), Problem(100, 4096, 4096, "bfloat16")),  # 2 m64 blocks
    (_c(128, 48, 64, 4, 2, True, persistent=True, cluster=2, cluster_dim="n"), Problem(1000, 1024, 200, "float16")),
    (_c(64, 8, 64, 4, 1, True, persistent=True, raster_group=8, **SW), Problem(7, 4096, 72, "float16")),
]


# hopper-gemm/5, second round (after the first GPU run, bench/results/kits/2026-11-30-hopper-gemm-5.md): the
# TMA loads' L2 eviction priorities (l2_hint "<A>/<B>" of the kernel's operands: with swap_ab A is the
# problem's B), the tensor maps' 256-byte L2 promotion, the descriptor prefetch (pftm), four swizzle atoms a
# stage (blk_k 256) and A-multicast clusters for M = 128. Each problem: the run-1 best (or reference) first,
# then the variants, so every comparison is inside one process.
FIRST_A, FIRST_B = {"l2_hint": "first/none"}, {"l2_hint": "none/first"}
P256, PFTM = {"l2_promotion": "256B"}, {"prefetch_tensormap": True}
ALL_A = {**FIRST_A, **P256, **PFTM}  # the streamed operand is the kernel's A (swapped decode)
ALL_B = {**FIRST_B, **P256, **PFTM}  # ... the kernel's B (unswapped M = 128)
DEC = {**SW, "split_k": 2}
RAGGED_3K = Problem(3000, 5000, 2000, "float16")
RAGGED_4K = Problem(4000, 4000, 4000, "float16")
SET_V5B_PERF: list[tuple[Config, Problem]] = [
    # 16x4096x4096 (run 1: 64x16x128 s8 sk2 swap 1.118; no split 1.108).
    (_c(64, 16, 128, 8, 1, True, **DEC), DECODE),
    (_c(64, 16, 128, 8, 1, True, **DEC, **FIRST_A), DECODE),
    (_c(64, 16, 128, 8, 1, True, **DEC, l2_hint="first/last"), DECODE),
    (_c(64, 16, 128, 8, 1, True, **DEC, **P256), DECODE),
    (_c(64, 16, 128, 8, 1, True, **DEC, **PFTM), DECODE),
    (_c(64, 16, 128, 8, 1, True, **DEC, **FIRST_A, **P256), DECODE),
    (_c(64, 16, 128, 8, 1, True, **DEC, **ALL_A), DECODE),
    (_c(64, 16, 256, 5, 1, True, **DEC), DECODE),  # four atoms a stage: 512 B of each row
    (_c(64, 16, 256, 5, 1, True, **DEC, **FIRST_A), DECODE),
    (_c(64, 16, 128, 8, 1, True, **SW), DECODE),  # no split: 64 CTAs
    (_c(64, 16, 128, 8, 1, True, **SW, **FIRST_A), DECODE),
    (_c(64, 16, 128, 4, 1, True, **SW, split_k=4, **FIRST_A), DECODE),  # 256 CTAs, two an SM
    (_c(64, 16, 128, 8, 1, True, **DEC, **SER, **FIRST_A), DECODE),
    (_c(64, 16, 64, 8, 1, True, **DEC, **FIRST_A), DECODE),
    (_c(64, 64, 128, 6, 1, True, split_k=2, **FIRST_B), DECODE),  # unswapped: B is the stream
    (_c(64, 16, 128, 8, 1, True, **DEC), DECODE_BF16),
    (_c(64, 16, 128, 8, 1, True, **DEC, **FIRST_A), DECODE_BF16),
    (_c(64, 16, 128, 8, 1, True, **DEC, **ALL_A), DECODE_BF16),
    # M = 1 and 8 (run 1: 1.05-1.16).
    (_c(64, 8, 128, 8, 1, True, **DEC), GEMV),
    (_c(64, 8, 128, 8, 1, True, **DEC, **FIRST_A), GEMV),
    (_c(64, 8, 128, 8, 1, True, **DEC, **ALL_A), GEMV),
    (_c(64, 8, 128, 4, 1, True, **SW, split_k=4, **FIRST_A), GEMV),
    (_c(64, 8, 128, 8, 1, True, **DEC), Problem(8, 4096, 4096, "float16")),
    (_c(64, 8, 128, 8, 1, True, **DEC, **FIRST_A), Problem(8, 4096, 4096, "float16")),
    (_c(64, 8, 128, 8, 1, True, **DEC, **ALL_A), Problem(8, 4096, 4096, "float16")),
    # 128x4096x4096 (run 1: 128x64x64 s6 sk2 0.969): B streamed, A (1 MB) re-read by every CTA.
    (_c(128, 64, 64, 6, 2, True, split_k=2), BATCH128),
    (_c(128, 64, 64, 6, 2, True, split_k=2, **FIRST_B), BATCH128),
    (_c(128, 64, 64, 6, 2, True, split_k=2, l2_hint="last/first"), BATCH128),
    (_c(128, 64, 64, 6, 2, True, split_k=2, **ALL_B), BATCH128),
    (_c(128, 64, 128, 4, 2, True, split_k=2, **FIRST_B), BATCH128),
    (_c(128, 32, 64, 8, 2, True), BATCH128),  # 128 CTAs, no multicast: A read 128 times
    (_c(128, 32, 64, 8, 2, True, persistent=True, cluster=4, cluster_dim="n"), BATCH128),  # A read 32 times
    (_c(128, 32, 64, 8, 2, True, persistent=True, cluster=4, cluster_dim="n", **FIRST_B), BATCH128),
    (_c(128, 32, 64, 8, 2, True, persistent=True, cluster=4, cluster_dim="n", **ALL_B), BATCH128),
    (_c(128, 32, 64, 8, 2, True, persistent=True, cluster=2, cluster_dim="n", **FIRST_B), BATCH128),
    (_c(128, 16, 64, 8, 2, True, persistent=True, cluster=4, cluster_dim="n", **FIRST_B), BATCH128),
    (_c(128, 64, 64, 6, 2, True, split_k=2), Problem(128, 4096, 4096, "bfloat16")),
    (_c(128, 64, 64, 6, 2, True, split_k=2, **FIRST_B), Problem(128, 4096, 4096, "bfloat16")),
    (
        _c(128, 32, 64, 8, 2, True, persistent=True, cluster=4, cluster_dim="n", **FIRST_B),
        Problem(128, 4096, 4096, "bfloat16"),
    ),
    # 1024^3 (run 1: 128x64x64 s6 persist g8 tma_chunked 0.922): fixed costs of a 16-k-tile CTA.
    (_c(128, 64, 64, 6, 2, True, **G8, **CH), SQUARE_1K),
    (_c(128, 64, 64, 6, 2, True, **G8, **CH, **PFTM), SQUARE_1K),
    (_c(128, 64, 64, 6, 2, True, **G8, **CH, **PFTM, **P256), SQUARE_1K),
    (_c(128, 64, 64, 8, 2, True, **G8, **CH), SQUARE_1K),  # 8 of the 16 k-tiles in flight at once
    (_c(128, 64, 64, 8, 2, True, **G8, **CH, **PFTM), SQUARE_1K),
    (_c(128, 64, 128, 4, 2, True, **G8, **CH, **PFTM), SQUARE_1K),  # 8 k-tiles of 128
    (_c(128, 64, 64, 6, 2, True, **CH, **PFTM), SQUARE_1K),  # one tile a CTA, no persistent loop
    # 2048^3 (run 1: ping-pong 128x128 s6 g16 chunked 1.024).
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16), SQUARE_2K),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16, **PFTM), SQUARE_2K),
    (_c(128, 128, 64, 6, 2, True, **PP128, raster_group=16, **PFTM, **P256), SQUARE_2K),
    # Ragged (run 1: 3000x5000x2000 0.969, 4000^3 0.958).
    (_c(128, 192, 64, 4, 2, True, **G8, **CH), RAGGED_3K),
    (_c(128, 192, 64, 4, 2, True, **G8, **CH, **PFTM), RAGGED_3K),
    (_c(128, 192, 64, 4, 2, True, **G8, **CH, **PFTM, **P256), RAGGED_3K),
    (_c(128, 192, 64, 4, 2, True, **G8, **CH), Problem(3000, 5000, 2000, "bfloat16")),
    (_c(128, 192, 64, 4, 2, True, **G8, **CH, **PFTM, **P256), Problem(3000, 5000, 2000, "bfloat16")),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), RAGGED_4K),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH, **PFTM), RAGGED_4K),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH, **PFTM, **P256), RAGGED_4K),
    (_c(256, 128, 64, 4, 2, True, **G8, **CH, **PFTM), RAGGED_4K),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH), Problem(4000, 4000, 4000, "bfloat16")),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH, **PFTM, **P256), Problem(4000, 4000, 4000, "bfloat16")),
]
# The new paths on ragged shapes (correctness: tails along M, N and K, one-row operands, clusters).
SET_V5B_RAGGED: list[tuple[Config, Problem]] = [
    (_c(64, 16, 256, 4, 1, True, **DEC, l2_hint="first/last", **P256, **PFTM), Problem(13, 4095, 1000, "bfloat16")),
    (_c(128, 64, 256, 2, 2, True, **FIRST_B), Problem(300, 200, 520, "float16")),  # K tail inside atom 3
    (_c(64, 8, 256, 4, 1, True, **SW, l2_hint="first/last", **PFTM), Problem(1, 1000, 1000, "float16")),
    (
        _c(128, 32, 64, 4, 2, True, persistent=True, cluster=4, cluster_dim="n", l2_hint="last/first", **PFTM),
        Problem(100, 1024, 200, "float16"),
    ),
    (_c(128, 128, 64, 4, 2, True, **G8, **CH, **PFTM, **P256), TAIL_N8),  # TMA stores prefetched too
    (_c(64, 16, 128, 8, 1, True, **SW, split_k=4, **SER, **FIRST_A), Problem(16, 200, 4096, "bfloat16")),
    (_c(64, 64, 256, 3, 2, True, **PP128, raster_group=8, **PFTM), Problem(1000, 1000, 1000, "bfloat16")),
]

# Ragged widths with chunked TMA stores whose last box is narrower (blk_n 136..248 off the 64-wide
# box; docs/perf-notes.md "Wave-fitted tiles"): each timed problem's suite best first (the same-
# process baseline), then the wave-fitted tiles; then correctness on tails, the epilogue
# warpgroup, ping-pong 64-row tiles, three consumers, bf16 and a cluster.
RAGGED_3K_BF16, RAGGED_4K_BF16 = Problem(3000, 5000, 2000, "bfloat16"), Problem(4000, 4000, 4000, "bfloat16")
SET_TAIL_PERF: list[tuple[Config, Problem]] = [
    (_c(128, 192, 64, 4, 2, True, **G8, **CH), RAGGED_3K),
    (_c(128, 152, 64, 4, 2, True, **G8, **CH), RAGGED_3K),
    (_c(128, 152, 64, 4, 2, True, **G8, **CH, **PFTM), RAGGED_3K),
    (_c(128, 152, 64, 4, 2, True, **G8, **CH, **EWG), RAGGED_3K),
    (_c(192, 152, 64, 3, 3, True, **G8, **CH), RAGGED_3K),
    (_c(128, 192, 64, 4, 2, True, **G8, **CH), RAGGED_3K_BF16),
    (_c(128, 152, 64, 4, 2, True, **G8, **CH), RAGGED_3K_BF16),
    (_c(192, 152, 64, 3, 3, True, **G8, **CH), RAGGED_3K_BF16),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH, **PFTM), RAGGED_4K),
    (_c(128, 200, 64, 4, 2, True, **G8, **CH), RAGGED_4K),
    (_c(192, 160, 64, 3, 3, True, **G8, **CH), RAGGED_4K),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH, **PFTM), RAGGED_4K_BF16),
    (_c(192, 160, 64, 3, 3, True, **G8, **CH), RAGGED_4K_BF16),
]
SET_TAIL_CHECK: list[tuple[Config, Problem]] = [
    (_c(64, 200, 64, 4, 2, True, **PP128, raster_group=8), Problem(777, 1000, 136, "float16")),  # ping-pong, box 8
    (_c(128, 168, 64, 3, 2, True, **G8, **CH, **EWG), Problem(777, 1000, 136, "bfloat16")),  # box 40, EWG
    (_c(64, 136, 64, 6, 1, True, **G8, **CH), Problem(100, 200, 72, "float16")),  # box 8, one consumer
    (_c(128, 248, 64, 2, 2, True, **G8, **CH), Problem(1000, 1000, 1000, "bfloat16")),  # box 56
    (_c(128, 216, 64, 3, 2, True, **CH), Problem(520, 392, 200, "float16")),  # not persistent, box 24
    (
        _c(128, 144, 64, 4, 2, True, persistent=True, cluster=2, cluster_dim="m", **CH),
        Problem(1000, 4000, 520, "float16"),
    ),
]


# trim (bench/results/kits/2026-11-30-trim.md): each ragged problem's two best tiles untrimmed (the
# same-process baseline) and trimmed (no MMAs past the problem's edges: a dead m64 block, the last column's
# padding, the last k-tile's steps past K); then correctness where trimming meets the other paths: 128-row
# consumers (a dead second m-block), ping-pong, swap-AB, the epilogue warpgroup, a cluster, the thread loader,
# K a multiple of 8 only, a one-row operand, bf16.
SET_TRIM_PERF: list[tuple[Config, Problem]] = [
    (config, problem)
    for problem in (RAGGED_3K, RAGGED_3K_BF16, RAGGED_4K, RAGGED_4K_BF16)
    for base in (_c(128, 192, 64, 4, 2, True, **G8, **CH), _c(128, 256, 64, 4, 2, True, **G8, **CH, **PFTM))
    for config in (base, base.replace(trim=True))
]
SET_TRIM_CHECK: list[tuple[Config, Problem]] = [
    (_c(128, 128, 64, 4, 1, True, **G8, **CH, trim=True), Problem(1050, 1000, 1000, "float16")),  # 2 m-blocks
    (_c(128, 128, 64, 4, 2, True, **G8, **PP, **CH, trim=True), Problem(777, 1000, 136, "bfloat16")),
    (_c(64, 64, 64, 4, 2, True, **G8, **PP, swap_ab=True, trim=True), Problem(100, 4095, 200, "float16")),
    (_c(64, 16, 128, 8, 1, True, swap_ab=True, trim=True), Problem(13, 4095, 1000, "bfloat16")),
    (_c(128, 168, 64, 3, 2, True, **G8, **CH, **EWG, trim=True), Problem(777, 1000, 136, "bfloat16")),
    (_c(128, 128, 64, 4, 2, True, **G8, **CH, cluster=2, trim=True), Problem(1000, 4000, 520, "float16")),
    (_c(128, 128, 64, 1, 2, False, **G8, loader="threads", trim=True), Problem(200, 100, 72, "bfloat16")),
    (_c(128, 256, 64, 4, 2, True, **G8, **CH, trim=True), Problem(300, 1000, 4104, "float16")),  # K % 16 = 8
    (_c(64, 64, 64, 4, 1, False, trim=True), Problem(1, 1000, 4000, "float16")),  # one-row A
    (_c(192, 128, 64, 4, 3, True, **G8, **CH, trim=True), Problem(1000, 1000, 1000, "float16")),  # 3 consumers
]


# The decode winners (the suite's 16x4096x4096 best, with split-K 2 beside it; 1x4096x4096's from
# its tune), for bench/decode_ceiling.py --kit: our kernel after the zeroing and the clean flush.
_DECODE_BEST = _c(64, 16, 128, 8, 1, True, swap_ab=True, l2_hint="first/none")
SET_DECODE_BEST: list[tuple[Config, Problem]] = [
    *(
        (config, Problem(16, 4096, 4096, dtype))
        for dtype in ("float16", "bfloat16")
        for config in (_DECODE_BEST, _DECODE_BEST.replace(split_k=2))
    ),
    (_DECODE_BEST.replace(blk_n=8), Problem(1, 4096, 4096, "float16")),
]


# Kit decode-deep (bench/results/kits/2026-12-01-decode-deep.md): deeper rings for the decode tiles (stages
# past 8, the old rule's limit), beside the suite's best (64x16x128 s8, the control) under the suite's
# protocol: more bytes in flight per SM (s11: 225 KB), the same bytes in finer stages (blk_k 64, s16 and s20),
# blk_k 256 unsplit, and the deepest split-K ring; bf16 and M = 1 for the deepest.
_DECODE_PF = _DECODE_BEST.replace(prefetch_tensormap=True)
SET_DECODE_DEEP: list[tuple[Config, Problem]] = [
    *(
        (_DECODE_PF.replace(**knobs), Problem(16, 4096, 4096, "float16"))
        for knobs in (
            {},
            {"stages": 10},
            {"stages": 11},
            {"blk_k": 64, "stages": 16},
            {"blk_k": 64, "stages": 20},
            {"blk_k": 256, "stages": 5},
            {"stages": 11, "split_k": 2},
        )
    ),
    *(
        (_DECODE_PF.replace(**knobs), Problem(16, 4096, 4096, "bfloat16"))
        for knobs in ({}, {"stages": 11}, {"blk_k": 64, "stages": 20})
    ),
    *((_DECODE_PF.replace(blk_n=8, **knobs), Problem(1, 4096, 4096, "float16")) for knobs in ({}, {"stages": 12})),
]

# Kit decode-rotate (bench/results/decode/2026-12-02-probes-k-rotate.md): k_rotate (each tile's k loop from
# its own k-tile on) on the decode tiles, beside the suite's best as the control, under the suite's protocol
# (bench/decode_probe.py --kit): whether 64 CTAs that all read the same column block of their rows at once
# (addresses differing only in their high bits) lose DRAM throughput to it; shallower rings (fewer dirty L2
# lines evicted), the split, M = 1 and the model's wider decode GEMMs beside.
_DECODE_ROT = _DECODE_BEST.replace(k_rotate=True)
SET_DECODE_ROTATE: list[tuple[Config, Problem]] = [
    *(
        (config, Problem(16, 4096, 4096, dtype))
        for dtype in ("float16", "bfloat16")
        for config in (_DECODE_BEST, _DECODE_ROT)
    ),
    *(
        (_DECODE_ROT.replace(**knobs), Problem(16, 4096, 4096, "float16"))
        for knobs in (
            {"prefetch_tensormap": True},
            {"stages": 6},
            {"stages": 4},
            {"blk_k": 256, "stages": 5},
            {"blk_k": 64, "stages": 8},
            {"split_k": 2},
            {"split_k": 2, "stages": 4},
        )
    ),
    *(
        (config, Problem(1, 4096, 4096, "float16"))
        for config in (_DECODE_BEST.replace(blk_n=8), _DECODE_ROT.replace(blk_n=8))
    ),
    *(
        (config, Problem(16, n, k, "float16"))
        for n, k in ((14336, 4096), (4096, 14336))
        for config in (_DECODE_BEST, _DECODE_ROT)
    ),
]

# Kit decode-narrow (bench/results/decode/2026-12-02-probes-narrow.md), after decode-rotate (k_rotate took the
# swapped 64x16 tile from 15.26 to 14.59 us, 1.216x -> 1.279x): the unswapped narrow tiles, which put the
# weights on wgmma's N and so give 128 (64x32) or 256 (64x16) CTAs a tile row instead of the swapped tile's
# 64, with and without the rotation; the swapped control and its rotated twin beside them.
_NARROW_ROT = hopper_config(
    blk_m=64, blk_n=32, blk_k=128, stages=8, consumers=1, warp_specialized=True, l2_hint="none/first", k_rotate=True
)
SET_DECODE_NARROW: list[tuple[Config, Problem]] = [
    *(
        (config, Problem(16, 4096, 4096, "float16"))
        for config in (
            _DECODE_BEST,
            _DECODE_ROT,
            _DECODE_ROT.replace(l2_promotion="256B"),
            _NARROW_ROT,
            _NARROW_ROT.replace(k_rotate=False),
            _NARROW_ROT.replace(stages=6),
            _NARROW_ROT.replace(blk_k=256, stages=4),
            _NARROW_ROT.replace(blk_n=24),
            _NARROW_ROT.replace(blk_n=16),
            _NARROW_ROT.replace(blk_n=16, stages=4),
        )
    ),
    *((config, Problem(16, 4096, 4096, "bfloat16")) for config in (_DECODE_ROT, _NARROW_ROT)),
    *((config, Problem(1, 4096, 4096, "float16")) for config in (_DECODE_ROT.replace(blk_n=8), _NARROW_ROT)),
]

# The bests of the suite run of 2026-12-01 (bench/results/archive/suite/2026-12-01-local-search.md) where it
# loses (3000x5000x2000, 4000^3) and, as the control where it wins, at 4096^3, for `gpu_session.sh
# gemm-profile` (bench/results/profiles/2026-12-01-gemm-ragged.md): what differs from the kernel cuBLAS picks
# there (its tile, grid, cluster, time and DRAM bytes under Nsight Compute).
_RAGGED_152 = hopper_config(
    blk_m=128,
    blk_n=152,
    blk_k=64,
    stages=4,
    consumers=2,
    persistent=True,
    raster_group=8,
    epilogue="tma_chunked",
    reg_split="240/24",
)
SET_RAGGED_BEST: list[tuple[Config, Problem]] = [
    (_RAGGED_152, Problem(3000, 5000, 2000, "float16")),
    (_RAGGED_152.replace(reg_split="232/24"), Problem(3000, 5000, 2000, "bfloat16")),
    (_RAGGED_152.replace(blk_n=192, reg_split="232/40"), Problem(3000, 5000, 2000, "float16")),
    (
        hopper_config(
            blk_m=128,
            blk_n=256,
            blk_k=64,
            stages=4,
            consumers=2,
            persistent=True,
            raster_group=16,
            epilogue="tma_chunked",
            reg_split="240/24",
        ),
        Problem(4000, 4000, 4000, "float16"),
    ),
    (
        hopper_config(
            blk_m=128,
            blk_n=256,
            blk_k=64,
            stages=4,
            consumers=2,
            persistent=True,
            raster_group=8,
            epilogue="tma_chunked",
            l2_hint="first/none",
        ),
        Problem(4096, 4096, 4096, "float16"),
    ),
    # Probes: the two 3000x5000x2000 tiles at the problem padded to whole tiles and
    # k-tiles (3072x5016x2048: 24x33 tiles of 128x152, 32 k-tiles; 3072x5120x2048 for 128x192),
    # so a profile separates what the ragged edges cost from what the shape (K = 2000: 32 k-tiles
    # a tile, six tiles an SM) costs; and 128x256 at 3000x5000x2000, the square problems' tile.
    (_RAGGED_152, Problem(3072, 5016, 2048, "float16")),
    (_RAGGED_152.replace(blk_n=192, reg_split="232/40"), Problem(3072, 5120, 2048, "float16")),
    (
        hopper_config(
            blk_m=128,
            blk_n=256,
            blk_k=64,
            stages=4,
            consumers=2,
            persistent=True,
            raster_group=8,
            epilogue="tma_chunked",
        ),
        Problem(3000, 5000, 2000, "float16"),
    ),
]

# Kit ragged-wide (bench/results/kits/2026-12-01-ragged-wide.md): cuBLAS's tile at 3000x5000x2000 in our axes
# (256x152, two consumers of 128 rows, 152 accumulators a thread), beside this template's best there
# (128x152), at the problem and padded to whole tiles; its width fitted to 4000^3 (256x168) beside that
# problem's best (128x256); and 256x192 (3000x5000: 3 rounds of 12 x 27 tiles).
_WIDE = hopper_config(
    blk_m=256, blk_n=152, blk_k=64, stages=3, consumers=2, persistent=True, raster_group=8, epilogue="tma_chunked"
)
SET_RAGGED_WIDE: list[tuple[Config, Problem]] = [
    (_RAGGED_152, Problem(3000, 5000, 2000, "float16")),
    (_WIDE, Problem(3000, 5000, 2000, "float16")),
    (_WIDE.replace(reg_split="240/24"), Problem(3000, 5000, 2000, "float16")),
    (_WIDE, Problem(3000, 5000, 2000, "bfloat16")),
    (_RAGGED_152.replace(reg_split="232/24"), Problem(3000, 5000, 2000, "bfloat16")),
    (_WIDE, Problem(3072, 5016, 2048, "float16")),
    (_WIDE.replace(blk_n=192), Problem(3000, 5000, 2000, "float16")),
    (_WIDE.replace(blk_n=168), Problem(4000, 4000, 4000, "float16")),
    (SET_RAGGED_BEST[3][0], Problem(4000, 4000, 4000, "float16")),
    # Which ragged extent costs 128x152 its 4%: K alone (4000-byte rows), M and N alone, each alone.
    (_RAGGED_152, Problem(3072, 5016, 2048, "float16")),
    (_RAGGED_152, Problem(3072, 5016, 2000, "float16")),
    (_RAGGED_152, Problem(3000, 5000, 2048, "float16")),
    (_RAGGED_152, Problem(3072, 5000, 2048, "float16")),
    (_RAGGED_152, Problem(3000, 5016, 2048, "float16")),
]

# Kit ragged-cluster (bench/results/kits/2026-12-01-ragged-cluster.md), after the probes: K = 2000 alone costs
# 128x152 2.5% (3072x5016x2000 0.976 against 1.001 padded), M and N alone nothing. Does a 2-CTA cluster,
# multicasting the operand its CTAs share (each CTA issuing half of its loads), pay that back? 160 wide: 32
# tiles along N, even, so both cluster axes are valid at 3000x5000 (152's 33 columns are not); padded beside.
_W160 = _RAGGED_152.replace(blk_n=160)
_W256_160 = _WIDE.replace(blk_n=160)
SET_RAGGED_CLUSTER: list[tuple[Config, Problem]] = [
    (_RAGGED_152, Problem(3000, 5000, 2000, "float16")),
    *[
        (config.replace(cluster=cluster, cluster_dim=axis), problem)
        for problem in (Problem(3000, 5000, 2000, "float16"), Problem(3072, 5120, 2048, "float16"))
        for config in (_W160, _W256_160)
        for cluster, axis in ((1, "m"), (2, "m"), (2, "n"))
    ],
]

# Kit ragged-k (bench/results/kits/2026-12-01-ragged-k.md): what of K = 2000 costs 128x152 2.5% (M and N whole
# tiles): rows 4000 bytes apart (3 of 4 rows start off a 128-byte line: a box row spans two lines) or the last
# k-tile's partial box (16 of 64 columns, filled by TMA past K)? 1984: 31 whole k-tiles, every row aligned;
# 2016: half the rows off a line; 2000: three quarters; 2040: seven eighths, all three ending in a partial
# k-tile. Misaligned rows predict a cost growing with the share; the partial box the same cost.
SET_RAGGED_K: list[tuple[Config, Problem]] = [
    (_RAGGED_152, Problem(3072, 5016, k, "float16")) for k in (1984, 2000, 2016, 2040, 2048)
]

# Kit peel (its figures are not on file): the last k-tile peeled (peel_k): K = 2000 in 64-deep k-tiles pads
# its last tile from 16 columns to 64, so 3 of 128 k16 steps are zeros (2.3% of the MMAs; 4000: 2 of 252,
# 0.8%). Each timed tile unpeeled then peeled in the same processes; then the peeled path's edges for
# correctness: one k-tile in all (K = 8, 40: the loop runs no iteration), a 128-deep k-tile with 1 and 7 of 8
# steps live, ping-pong, a cluster, the thread-less prefetching consumer, swap-AB.
_PEEL_256 = hopper_config(
    blk_m=128,
    blk_n=256,
    blk_k=64,
    stages=4,
    consumers=2,
    persistent=True,
    raster_group=16,
    epilogue="tma_chunked",
    prefetch_tensormap=True,
)
SET_PEEL_PERF: list[tuple[Config, Problem]] = [
    (config, problem)
    for base, problem in (
        (_RAGGED_152, Problem(3000, 5000, 2000, "float16")),
        (_RAGGED_152.replace(reg_split="232/24"), Problem(3000, 5000, 2000, "bfloat16")),
        (_WIDE, Problem(3000, 5000, 2000, "float16")),
        (_RAGGED_152, Problem(3072, 5016, 2000, "float16")),
        (_PEEL_256, Problem(4000, 4000, 4000, "float16")),
        (_PEEL_256.replace(raster_group=8, cluster=2), Problem(4000, 4000, 4000, "bfloat16")),
    )
    for config in (base, base.replace(peel_k=True))
] + [
    # With the padding gone, what else 128x152 might take at 3000x5000x2000: a fifth stage,
    # ping-pong consumers (a whole 128x152 tile each, 152 accumulators a thread: /5's limit is
    # 192), the epilogue warpgroup.
    (_RAGGED_152.replace(peel_k=True, **knobs), Problem(3000, 5000, 2000, "float16"))
    for knobs in (
        {"stages": 5},
        {"schedule": "pingpong", "reg_split": "232/40"},
        {"schedule": "pingpong", "stages": 5},
        {"epilogue_warpgroup": True, "reg_split": "232/40"},
    )
]
SET_PEEL_CHECK: list[tuple[Config, Problem]] = [
    (_RAGGED_152.replace(peel_k=True), Problem(1000, 1000, 8, "float16")),
    (_RAGGED_152.replace(peel_k=True), Problem(333, 1000, 40, "bfloat16")),
    (
        hopper_config(
            blk_m=128,
            blk_n=128,
            blk_k=128,
            stages=3,
            consumers=2,
            persistent=True,
            raster_group=8,
            epilogue="tma_chunked",
            peel_k=True,
        ),
        Problem(1000, 1000, 1040, "float16"),
    ),
    (hopper_config(blk_m=128, blk_n=128, blk_k=128, stages=3, consumers=2, peel_k=True), Problem(700, 900, 1000, "bfloat16")),
    (
        hopper_config(
            blk_m=128,
            blk_n=128,
            blk_k=64,
            stages=6,
            consumers=2,
            persistent=True,
            raster_group=16,
            epilogue="tma_chunked",
            schedule="pingpong",
            peel_k=True,
        ),
        Problem(2000, 2000, 2000, "float16"),
    ),
    (
        hopper_config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2, warp_specialized=False, peel_k=True),
        Problem(1000, 512, 1000, "float16"),
    ),
    (
        hopper_config(blk_m=64, blk_n=16, blk_k=128, stages=8, consumers=1, swap_ab=True, l2_hint="first/none", peel_k=True),
        Problem(16, 4096, 4000, "bfloat16"),
    ),
    (
        hopper_config(
            blk_m=128,
            blk_n=64,
            blk_k=64,
            stages=8,
            consumers=2,
            persistent=True,
            raster_group=8,
            epilogue="tma_chunked",
            peel_k=True,
        ),
        Problem(1000, 1000, 1000, "float16"),
    ),
]

# Kit ragged-pingpong (not run yet), after the peel kit: ping-pong consumers on 128x152 won 3000x5000x2000
# (bench/results/kits/2026-12-01-ragged-starts.md: 1.009x / 0.993x; through the service 1.001x / 0.991x,
# bench/results/suite/2026-12-01-ragged-peeled-starts.md). 4000^3 stayed at 0.970-0.978 with 128x256:
# ping-pong widths there, the round-filling ones (144: 0.939 of the SMs' tile work, 168: 0.939) beside 128,
# 152, 176, 192, each peeled (4000 leaves 32 columns in the last k-tile: 2 of 4 steps).
_PINGPONG_152 = hopper_config(
    blk_m=128,
    blk_n=152,
    blk_k=64,
    stages=5,
    consumers=2,
    persistent=True,
    raster_group=8,
    epilogue="tma_chunked",
    schedule="pingpong",
    reg_split="240/24",
    peel_k=True,
)
SET_RAGGED_PINGPONG: list[tuple[Config, Problem]] = [
    (_PEEL_256.replace(raster_group=8, peel_k=True), Problem(4000, 4000, 4000, "float16")),
    (_PEEL_256.replace(raster_group=8, peel_k=True), Problem(4000, 4000, 4000, "bfloat16")),
    *[
        (_PINGPONG_152.replace(blk_n=n, stages=st), Problem(4000, 4000, 4000, "float16"))
        for n, st in ((128, 6), (144, 5), (152, 5), (168, 4), (176, 4), (192, 4))
    ],
    *[
        (_PINGPONG_152.replace(blk_n=n, stages=st), Problem(4000, 4000, 4000, "bfloat16"))
        for n, st in ((144, 5), (168, 4))
    ],
]


# The draws' losers: every problem a random draw on file (bench/results/generalize/<date>-<seed>.json)
# left below LOSER_RATIO of cuBLAS with M >= LOSER_MIN_M, with the config its job kept.
LOSER_RATIO = 0.97
LOSER_MIN_M = 64


def _draw_losers() -> list[tuple[Config, Problem]]:
    """The kept config of each draw's loser (first draw on file wins a problem drawn twice), where
    the current space still takes it: the kit `gemm-profile` lays beside cuBLAS's own kernel."""
    results = Path(__file__).resolve().parent / "results" / "generalize"
    chosen: dict[Problem, Config] = {}
    for path in sorted(results.glob("*-*-*-[0-9]*.json")):
        if not path.stem.rsplit("-", 1)[-1].isdigit():
            continue
        for row in json.loads(path.read_text()).get("problems", []):
            problem = Problem.parse(row["problem"], row["dtype"])
            if row.get("ratio") is None or row["ratio"] >= LOSER_RATIO or problem.m < LOSER_MIN_M:
                continue
            config = Config.from_json(row["config"], HOPPER_KNOBS)
            if problem not in chosen and HOPPER.is_valid(config, problem):
                chosen[problem] = config
    return [(c, p) for p, c in chosen.items()]


# The swapped tiles fitted to M beside the kept configs of the draws' losers: the orientation and
# widths cuBLAS runs there (bench/results/profiles/2026-12-03-draw-losers.md), in this template.
FITTED_MIN_M = 100
FITTED_ROWS = (128, 256)  # the swapped tile's extent along N: two consumers of 64 or 128 rows
FITTED_PER_ROWS = 2  # the widths with the least padding along M, for each


def fitted_widths(extent: int, widths: Sequence[int], count: int) -> list[int]:
    """The `count` widths of `widths` that cover `extent` with the least padding (fewer tiles first
    on a tie): for each tile count t, the narrowest width >= extent / t."""
    fits: dict[int, tuple[int, int]] = {}
    for tiles in range(1, extent // min(widths) + 2):
        fitting = [w for w in widths if w * tiles >= extent]
        if fitting:
            w = min(fitting)
            pad = w * tiles - extent
            fits.setdefault(w, (pad, tiles))
    return sorted(fits, key=lambda w: fits[w])[:count]


def _swap_fitted() -> list[tuple[Config, Problem]]:
    """For each draw loser with M >= FITTED_MIN_M: its kept config, then swapped tiles (two
    cooperative consumers, FITTED_ROWS along N, persistent, the weights evicted first) whose width
    fits M, each at the deepest ring the space takes: timed against cuBLAS in one run."""
    chosen: list[tuple[Config, Problem]] = []
    widths = [w for w in HOPPER.knobs["blk_n"] if w >= 56]
    for kept, problem in _draw_losers():
        if problem.m < FITTED_MIN_M:
            continue
        chosen.append((kept, problem))
        for rows in FITTED_ROWS:
            for width in fitted_widths(problem.m, widths, FITTED_PER_ROWS):
                base = hopper_config(
                    blk_m=rows,
                    blk_n=width,
                    blk_k=64,
                    stages=1,
                    consumers=2,
                    persistent=True,
                    raster_group=8,
                    swap_ab=True,
                    l2_hint="first/none",
                    l2_promotion="256B",
                )
                deepest = [
                    base.replace(stages=s)
                    for s in sorted(HOPPER.knobs["stages"], reverse=True)
                    if HOPPER.is_valid(base.replace(stages=s), problem)
                ]
                if deepest and (deepest[0], problem) not in chosen:
                    chosen.append((deepest[0], problem))
    return chosen


def _ragged_starts() -> list[tuple[Config, Problem]]:
    """The first five starts a ragged suite job asks (Branch.start_configs, as the service hands
    them out) on the suite's ragged problems, the head start (ping-pong 128x152, peeled) also
    unpeeled at 3000x5000x2000 fp16, then the peeled path's correctness edges (SET_PEEL_CHECK).
    The peel kit's figures (the evidence for that head start) are not on file; this kit measures
    the starts as they now stand (bench/results/kits/2026-12-01-ragged-starts.md)."""
    from tirtune.space.branches import branch

    hopper = branch("sm_90a")
    problems = [Problem(3000, 5000, 2000, d) for d in ("float16", "bfloat16")] + [
        Problem(4000, 4000, 4000, d) for d in ("float16", "bfloat16")
    ]
    chosen = [(c, p) for p in problems for c in hopper.start_configs(p)[:5]]
    head, problem = chosen[0]
    return [*chosen, (head.replace(peel_k=False), problem), *SET_PEEL_CHECK]


# The small and ragged problems the /5 sweeps draw over, in their order.
SWEEP_PROBLEMS: tuple[Problem, ...] = tuple(
    Problem(m, n, k, dtype)
    for m, n, k, dtype in (
        (1, 4096, 4096, "float16"),
        (2, 24, 72, "bfloat16"),
        (7, 4095, 8, "float16"),
        (16, 200, 4096, "bfloat16"),
        (33, 8, 72, "float16"),
        (64, 4095, 136, "float16"),
        (100, 24, 4096, "bfloat16"),
        (512, 200, 72, "float16"),
        (1, 24, 14336, "float16"),
    )
)


def _fuzz_v5(count: int, seed: int, later: bool = False) -> list[tuple[Config, Problem]]:
    """Valid hopper-gemm/5 points that use a knob value /5 added (swap_ab, split_k > 1, a tile
    narrower than 64 or 96 wide, 8 stages) on the sweep's small and ragged problems, the problems
    in turn and every other point split-K (a split-K point's other knobs are mostly forced, so
    drawn freely they would crowd out the rest: persistent, clustered and ping-pong swaps).
    later: draw the knobs added to /5 after its first kit too, and keep only points that use one
    (an L2 hint, the 256-byte promotion, the descriptor prefetch or blk_k 256)."""
    import random

    rng = random.Random(seed)
    problems = [*SWEEP_PROBLEMS, Problem(1000, 1000, 1024, "bfloat16")]
    new_values = {"blk_n": (8, 16, 24, 32, 40, 48, 96), "stages": (8,)}
    chosen: list[tuple[Config, Problem]] = []
    for turn in range(100 * count):
        if len(chosen) == count:
            break
        problem, split = problems[turn % len(problems)], (turn + turn // len(problems)) % 2 == 0
        for _ in range(5000):  # a problem may have no valid split (K = 8 is one k-tile)
            knobs = {name: rng.choice(list(values)) for name, values in _drawn_knobs(HOPPER, later).items()}
            if split:
                knobs.update(
                    split_k=rng.choice([2, 4, 8]),
                    persistent=False,
                    cluster=1,
                    epilogue="register",
                    loader="tma",
                    raster_group=1,
                    schedule="cooperative",
                    epilogue_warpgroup=False,
                )
            else:
                knobs["split_k"] = 1
            if not (knobs["swap_ab"] or split or any(knobs[k] in v for k, v in new_values.items())):
                continue
            if later and not (
                knobs["l2_hint"] != "none/none"
                or knobs["l2_promotion"] != "128B"
                or knobs["prefetch_tensormap"]
                or knobs["blk_k"] == 256
            ):
                continue
            config = hopper_config(**knobs)
            if _drawable(HOPPER, config, problem) and (config, problem) not in chosen:
                chosen.append((config, problem))
                break
    return chosen


def _fuzz_rotate(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """Valid hopper-gemm/5 points with k_rotate on the sweep's small and ragged problems
    and the decode shapes, drawn from the whole grid (the later /5 knobs too) with the rotation
    on: every k loop then starts mid-K and wraps, so K tails (72, 136, 14336 = 112 k-tiles of 128),
    split-K ranges and persistent CTAs' later tiles start off zero."""
    import random

    rng = random.Random(seed)
    problems = [
        *SWEEP_PROBLEMS,
        Problem(16, 4096, 4096, "float16"),
        Problem(16, 4096, 14336, "bfloat16"),
        Problem(128, 4096, 4096, "float16"),
    ]
    drawn = {**_drawn_knobs(HOPPER, later=True), "k_rotate": (True,)}
    chosen: list[tuple[Config, Problem]] = []
    for turn in range(100 * count):
        if len(chosen) == count:
            break
        problem = problems[turn % len(problems)]
        for _ in range(5000):
            config = hopper_config(**{name: rng.choice(list(values)) for name, values in drawn.items()})
            if _drawable(HOPPER, config, problem) and (config, problem) not in chosen:
                chosen.append((config, problem))
                break
    return chosen


# Problems whose k-tile counts the splits past DRAWN_SPLITS divide (K = 3584: 28 k-tiles of 128 and
# 56 of 64; 5120: 40 and 80; 2880: 45 of 64; 1344: 21 of 64; 8192, 14336), decode to mid-size, both
# dtypes, with tails along M and N.
SPLIT_PROBLEMS: tuple[Problem, ...] = tuple(
    Problem(m, n, k, dtype)
    for m, n, k, dtype in (
        (1, 1024, 3584, "bfloat16"),
        (8, 512, 8192, "float16"),
        (16, 1280, 8192, "bfloat16"),
        (32, 4096, 14336, "float16"),
        (7, 2000, 5120, "bfloat16"),
        (100, 24, 4096, "float16"),
        (64, 4095, 1344, "float16"),
        (512, 200, 2880, "bfloat16"),
        (1000, 1000, 1792, "float16"),
        (3, 8, 3584, "float16"),
    )
)
DEEP_SPLITS = (3, 5, 6, 7, 12, 14, 16)


def _fuzz_forced(
    count: int,
    seed: int,
    problems: Sequence[Problem],
    forced: Callable[[Any, int], dict[str, Any]],
    accept: Callable[[Config, Problem], bool] = lambda c, p: True,
    space: SearchSpace = HOPPER,
    uneven: bool = False,
    swapped_staged: bool = False,
) -> list[tuple[Config, Problem]]:
    """`count` points for a correctness sweep: the problems in turn; for each turn, up to 5000
    draws of every knob from the whole grid (the later /5 knobs too), with `forced(rng, turn)`
    laid over them, until one is drawable in `space` (`_drawable`, with `uneven` and
    `swapped_staged`), `accept`ed and new."""
    import random

    rng = random.Random(seed)
    drawn = _drawn_knobs(HOPPER, later=True)
    chosen: list[tuple[Config, Problem]] = []
    for turn in range(100 * count):
        if len(chosen) == count:
            break
        problem = problems[turn % len(problems)]
        for _ in range(5000):
            knobs = {name: rng.choice(list(values)) for name, values in drawn.items()}
            knobs.update(forced(rng, turn))
            config = hopper_config(**knobs)
            if (
                _drawable(space, config, problem, uneven, swapped_staged)
                and accept(config, problem)
                and (config, problem) not in chosen
            ):
                chosen.append((config, problem))
                break
    return chosen


def _fuzz_split(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """Valid hopper-gemm/5 points split over DEEP_SPLITS CTAs (a cluster of up to 8 or the serial
    reduction past it), the problems in turn, the other knobs drawn from the whole grid (the later
    /5 knobs too) as far as a split allows: the correctness sweep of the deeper splits."""
    return _fuzz_forced(
        count,
        seed,
        SPLIT_PROBLEMS,
        lambda rng, turn: dict(
            split_k=rng.choice(DEEP_SPLITS),
            persistent=False,
            cluster=1,
            epilogue="register",
            loader="tma",
            raster_group=1,
            schedule="cooperative",
            epilogue_warpgroup=False,
        ),
    )


# Mid-size problems past one wave of tiles whose last wave is partial in most tilings, decode to
# prefill widths, both dtypes, with tails along M, N and K (K = 1152, 1536: k-tile counts with
# divisors 3, 6, 9, 12).
TAIL_PROBLEMS: tuple[Problem, ...] = tuple(
    Problem(m, n, k, dtype)
    for m, n, k, dtype in (
        (1700, 1300, 1152, "float16"),
        (2000, 1500, 2048, "bfloat16"),
        (1100, 2900, 1024, "float16"),
        (300, 7000, 1536, "bfloat16"),
        (100, 9000, 2048, "bfloat16"),
        (2500, 1000, 3072, "float16"),
        (1000, 2500, 4096, "bfloat16"),
        (3000, 700, 1536, "float16"),
        (40, 10000, 4096, "bfloat16"),
        (4095, 600, 1152, "float16"),
    )
)


def _fuzz_tail(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """Valid hopper-gemm/5 points with split_k_scope "tail" (the whole waves data-parallel, the
    last wave's tiles split and reduced in turn), the problems in turn, every split the space
    takes, the other knobs drawn from the whole grid as far as the tail split allows: its
    correctness sweep."""
    splits = tuple(v for v in HOPPER.knobs["split_k"] if v > 1)
    return _fuzz_forced(
        count,
        seed,
        TAIL_PROBLEMS,
        lambda rng, turn: dict(
            split_k=rng.choice(splits),
            split_k_reduce="serial",
            split_k_scope="tail",
            persistent=False,
            cluster=1,
            epilogue="register",
            loader="tma",
            raster_group=1,
            schedule="cooperative",
            epilogue_warpgroup=False,
            warp_specialized=True,
        ),
    )


def _fuzz_swap_pingpong(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """Valid hopper-gemm/5 points with swapped ping-pong consumers (persistent, no cluster: what
    swap_ab_pingpong_wide and swap_ab_pingpong_unclustered leave), over TAIL_PROBLEMS in turn,
    whose M spans one to many swapped tiles with ragged edges, the other knobs drawn from the whole
    grid: the correctness sweep of the swapped ping-pong tiles the space still takes (64 rows up
    to 120 wide, and 128 rows at any width)."""
    forced = dict(
        swap_ab=True,
        schedule="pingpong",
        persistent=True,
        cluster=1,
        epilogue="register",
        epilogue_warpgroup=False,
        warp_specialized=True,
        split_k=1,
    )
    return _fuzz_forced(count, seed, TAIL_PROBLEMS, lambda rng, turn: forced, accept=HOPPER.is_valid)


# The stream-K sweep's points take the three epilogues in turn (drawn freely, the staged ones
# would be rare: their rules refuse more tiles).
STREAM_EPILOGUES = ("register", "tma", "tma_chunked")


# What rules.stream_k_supported asks of the rest of a stream-K kernel: the plain persistent one.
STREAM_PLAIN: dict[str, Any] = dict(
    persistent=True,
    warp_specialized=True,
    cluster=1,
    split_k=1,
    schedule="cooperative",
    epilogue_warpgroup=False,
    trim=False,
    peel_k=False,
    k_rotate=False,
    loader="tma",
)


def _fuzz_stream(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """Valid hopper-gemm/5 points with stream_k (each persistent CTA an equal share of all the
    tiles' k-tiles, a tile two CTAs share finished by the first), over TAIL_PROBLEMS in turn and
    the epilogues in turn, the other knobs drawn from the whole grid as far as stream_k allows
    (rules.stream_k_supported: at least one round of tiles): its correctness sweep."""
    return _fuzz_forced(
        count,
        seed,
        TAIL_PROBLEMS,
        lambda rng, turn: dict(
            stream_k=True,
            **STREAM_PLAIN,
            epilogue=STREAM_EPILOGUES[turn % 3],
        ),
    )


def _fuzz_stream_tail(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """Valid hopper-gemm/5 points with stream_k and stream_k_scope "tail" (the whole rounds but
    the last data-parallel, the rest shared out), drawn as `_fuzz_stream` draws: its correctness
    sweep (on the mid-size problems of one to four rounds, so both parts run)."""
    return _fuzz_forced(
        count,
        seed,
        TAIL_PROBLEMS,
        lambda rng, turn: dict(
            stream_k=True,
            stream_k_scope="tail",
            **STREAM_PLAIN,
            epilogue=STREAM_EPILOGUES[turn % 3],
        ),
    )


# The fused epilogues' correctness sweep: the specs a decoder layer uses and every op alone, in turn.
EPILOGUE_SPECS = ("bias", "residual", "bias+residual", "scale_row", "scale_col", "scale_row+scale_col+bias+residual")


def _with_epilogues(problems: Sequence[Problem]) -> tuple[Problem, ...]:
    """The problems, each with a fused epilogue: EPILOGUE_SPECS in turn."""
    return tuple(replace(p, epilogue=EPILOGUE_SPECS[i % len(EPILOGUE_SPECS)]) for i, p in enumerate(problems))


def _fuzz_epilogue(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """Valid hopper-gemm/5 points over the decode-to-prefill problems of the split and tail
    sweeps (ragged M, N and K, both dtypes) each with a fused epilogue (EPILOGUE_SPECS in turn),
    every knob drawn from the whole grid: every path that writes D (register, swapped, staged,
    split-K through DSMEM or serially, the epilogue warpgroup) with the ops applied."""
    problems = _with_epilogues((*SPLIT_PROBLEMS, *TAIL_PROBLEMS))
    return _fuzz_forced(count, seed, problems, lambda rng, turn: {}, accept=HOPPER.is_valid)


# The swiglu epilogue's correctness sweep: decode (M of 1 to 16), ragged M, prefill, N a multiple of 8
# but not of 16 (the last tile's gate/up pair alone), both dtypes.
SWIGLU_PROBLEMS: tuple[Problem, ...] = tuple(
    Problem(m, n, k, dtype, "swiglu")
    for m, n, k, dtype in (
        (16, 14336, 4096, "bfloat16"),
        (1, 4096, 4096, "float16"),
        (7, 11008, 4096, "bfloat16"),
        (100, 1000, 2048, "float16"),
        (333, 2056, 1536, "bfloat16"),
        (1000, 3584, 3584, "float16"),
        (3000, 104, 512, "bfloat16"),
        (4096, 14336, 4096, "float16"),
        (257, 18944, 3584, "bfloat16"),
        (13, 1000, 1152, "float16"),
    )
)


def _fuzz_swiglu(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """Valid hopper-gemm/5 points over SWIGLU_PROBLEMS in turn, the knobs drawn from the whole grid
    with what swiglu needs laid over them (the register epilogue, no split, no stream-K: rules.swiglu_*):
    every register path that pairs gate and up (paired, swapped, ping-pong, persistent, clusters, trim)."""
    return _fuzz_forced(
        count,
        seed,
        SWIGLU_PROBLEMS,
        lambda rng, turn: dict(SWIGLU_KNOBS),
        accept=HOPPER.is_valid,
    )


# The FP8 sweep's problems: e4m3 A and B, a bf16 D; decode (M of 7 to 64), ragged M, N and K (K a
# multiple of 16, e4m3's 16-byte TMA rows, but not of the 128-deep k-tile: 1040, 1552), prefill
# and large, K from 512 to 16384 (the FP8 accumulation's error grows with K), each unscaled, with
# per-tensor scales or with per-token x per-channel ones, some with a bias or residual after them.
FP8_PROBLEMS: tuple[Problem, ...] = tuple(
    Problem(m, n, k, FP8, epilogue)
    for m, n, k, epilogue in (
        (16, 4096, 4096, "scale_a+scale_b"),
        (7, 11008, 4096, "scale_row+scale_col"),
        (100, 1000, 2048, "none"),
        (333, 2056, 1552, "scale_row+scale_col"),
        (1000, 3584, 3584, "scale_row+scale_col+bias"),
        (3000, 104, 512, "none"),
        (4096, 4096, 4096, "scale_row+scale_col"),
        (257, 18944, 3584, "scale_row+scale_col+residual"),
        (13, 1000, 1040, "none"),
        (2048, 2048, 16384, "scale_row+scale_col"),
        (64, 7168, 8192, "scale_a+scale_b+bias"),
        (8192, 8192, 1024, "scale_row+scale_col"),
    )
)


# The block-scaled FP8 sweep's problems (DeepSeek-V3's 1x128 / 128x128 scales, core/epilogue.py):
# decode to large, M and N off the tiles, N off 128 (B's last block partial), K off 128 (the last
# k block partial) and up to 16384, with a bias or a residual after the scales.
FP8_BLOCK_PROBLEMS: tuple[Problem, ...] = tuple(
    Problem(m, n, k, FP8, epilogue)
    for m, n, k, epilogue in (
        (16, 7168, 2048, "scale_a_block+scale_b_block"),
        (7, 4608, 7168, "scale_a_block+scale_b_block"),
        (100, 1000, 2048, "scale_a_block+scale_b_block+bias"),
        (333, 2056, 1552, "scale_a_block+scale_b_block"),
        (1000, 3584, 3584, "scale_a_block+scale_b_block+residual"),
        (3000, 104, 512, "scale_a_block+scale_b_block"),
        (4096, 4096, 4096, "scale_a_block+scale_b_block"),
        (257, 18944, 3584, "scale_a_block+scale_b_block"),
        (13, 1000, 1040, "scale_a_block+scale_b_block+bias+residual"),
        (2048, 2048, 16384, "scale_a_block+scale_b_block"),
        (64, 7168, 8192, "scale_a_block+scale_b_block"),
        (8192, 1536, 7168, "scale_a_block+scale_b_block"),
    )
)


def _fuzz_fp8_block(
    count: int, seed: int, accept: Callable[[Config, Problem], bool] = HOPPER.is_valid
) -> list[tuple[Config, Problem]]:
    """Valid hopper-gemm/5 points over FP8_BLOCK_PROBLEMS in turn, the knobs drawn from the whole
    grid with what a block-scaled FP8 kernel takes laid over them (TMA loads, 128-deep k-tiles, no
    trim, peel or stream-K): every path its k loop runs in (swapped, cooperative and ping-pong,
    persistent, clusters, split-K over both reductions and the tail, every store); `accept` keeps
    some of them (`_two_buffers`)."""
    forced = {**FP8_KNOBS, "blk_k": BLOCK_K}
    return _fuzz_forced(count, seed, FP8_BLOCK_PROBLEMS, lambda rng, turn: dict(forced), accept=accept)


def _two_buffers(config: Config, problem: Problem) -> bool:
    """A valid point whose consumers hold two product buffers (rules.fp8_block_buffers): the k loop
    over pairs of k-tiles, the odd last one after it."""
    return HOPPER.is_valid(config, problem) and fp8_block_buffers(config) == 2


def _block_buffers_tail() -> list[tuple[Config, Problem]]:
    """Two product buffers under the tail split (split_k_scope "tail", serial, 2 and 3 ranks),
    where a tile's k-tile count is known only at run time and may be odd on one rank and even on
    the next: four tiles over FP8_BLOCK_PROBLEMS, the valid points with two buffers."""
    tiles = (
        hopper_config(128, 128, 128, 4, 2, True, reg_split="240/24"),
        hopper_config(128, 64, 128, 4, 2, True),
        hopper_config(64, 128, 128, 6, 1, True),
        hopper_config(64, 16, 128, 6, 1, True, swap_ab=True),
    )
    points = [
        (tile.replace(split_k=split, split_k_reduce="serial", split_k_scope="tail"), problem)
        for problem in FP8_BLOCK_PROBLEMS
        for tile in tiles
        for split in (2, 3)
    ]
    return [(c, p) for c, p in points if _two_buffers(c, p)]


def _block_buffers_perf() -> list[tuple[Config, Problem]]:
    """One product buffer against two on the same tile: the block-scaled suite's 128x128x128
    winners (bench/results/fp8/2026-12-06-suite-h100.md) with reg_split 232/40 (one buffer) and
    240/24 (two: rules.fp8_block_buffers), on four large block-scaled problems, so that a kit's
    timing (`gpu_session.sh kit`) compares them in one process against the same baseline."""
    tiles = (
        hopper_config(128, 128, 128, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked",
                      l2_hint="first/none"),
        hopper_config(128, 128, 128, 4, 2, True),
    )
    problems = [Problem(m, n, k, FP8, "scale_a_block+scale_b_block")
                for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192), (2048, 2048, 2048), (8192, 6144, 4096))]
    return [(tile.replace(reg_split=split), problem)
            for problem in problems for tile in tiles for split in ("232/40", "240/24")]


def _block_stagger_fuzz() -> list[tuple[Config, Problem]]:
    """block_stagger's correctness sweep: 200 valid points over FP8_BLOCK_PROBLEMS drawn as the
    block-scaled sweep draws them with the knob on (so every one holds two product buffers and two
    or more cooperative consumers: rules.block_stagger_supported), seed 67, then the tail split's
    points of `_block_buffers_tail` that take it, whose k-tile count is a run-time value and may be
    0 or 1 on a rank (the odd consumer's first k-tile alone, then no pair)."""
    forced = {**FP8_KNOBS, "blk_k": BLOCK_K, "block_stagger": True}
    drawn = _fuzz_forced(200, 67, FP8_BLOCK_PROBLEMS, lambda rng, turn: dict(forced))
    tail = [(c.replace(block_stagger=True), p) for c, p in _block_buffers_tail()]
    return drawn + [(c, p) for c, p in tail if HOPPER.is_valid(c, p)]


def _block_stagger_perf() -> list[tuple[Config, Problem]]:
    """block_stagger's speed kit: each block-scaled problem's kept tile (two product buffers:
    bench/results/fp8/2026-12-06-suite-block-starts-h100.md, 2026-12-07-checks-h100.md) with and
    without the knob, on the large problems of `_block_buffers_perf` and 512x4096x14336, so that a
    kit's timing compares the twins in one process against the same baseline."""
    persistent = hopper_config(128, 128, 128, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked",
                               reg_split="240/24")
    mid = hopper_config(128, 128, 128, 4, 2, True, reg_split="240/24", l2_hint="none/first", l2_promotion="256B")
    points = [(persistent, Problem(m, n, k, FP8, "scale_a_block+scale_b_block"))
              for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192), (2048, 2048, 2048), (8192, 6144, 4096))]
    points.append((mid, Problem(512, 4096, 14336, FP8, "scale_a_block+scale_b_block")))
    return [(c.replace(block_stagger=stagger), p) for c, p in points for stagger in (False, True)]


# An fp16 D (the epilogue op out_float16): the FP8 and block-scaled sweeps' problems with it,
# taken in turn from each.
FP8_OUT16_PROBLEMS: tuple[Problem, ...] = tuple(
    Problem(p.m, p.n, p.k, FP8, EpilogueSpec((*p.epilogue.ops, OUT_FLOAT16)))
    for pair in zip(FP8_PROBLEMS, FP8_BLOCK_PROBLEMS, strict=True)
    for p in pair
)


def _fuzz_fp8_out16(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """Valid hopper-gemm/5 points over FP8_OUT16_PROBLEMS in turn, every knob drawn from the whole
    grid with what an FP8 kernel takes laid over them (FP8_KNOBS; 128-deep k-tiles where the block
    scales need them): the fp16 store on every path an FP8 problem is tuned over (split-K, the
    staged epilogues, swapped, ping-pong, persistent, clusters)."""

    def forced(rng: Any, turn: int) -> dict[str, Any]:
        block = FP8_OUT16_PROBLEMS[turn % len(FP8_OUT16_PROBLEMS)].epilogue.block_scaled
        return {**FP8_KNOBS, "blk_k": BLOCK_K} if block else dict(FP8_KNOBS)

    return _fuzz_forced(count, seed, FP8_OUT16_PROBLEMS, forced, accept=HOPPER.is_valid)


def _fp8_out16_perf() -> list[tuple[Config, Problem]]:
    """The same FP8 kernel with a bf16 D and with an fp16 one (out_float16), side by side: the
    H100 FP8 suite's best configs of four problems, per tensor and rowwise
    (bench/results/fp8/2026-12-06-suite-h100.md), and the two-buffer block-scaled tile of
    `_block_buffers_perf`, so that a kit's timing compares the two stores in one process."""
    cases = (
        (hopper_config(128, 128, 128, 6, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked",
                       schedule="pingpong"), Problem(8192, 8192, 8192, FP8, "scale_a+scale_b")),
        (hopper_config(64, 16, 256, 8, 1, True, swap_ab=True, l2_hint="first/none", l2_promotion="256B"),
         Problem(16, 4096, 4096, FP8, "scale_a+scale_b")),
        (hopper_config(128, 256, 128, 4, 2, True, persistent=True, raster_group=16, epilogue="tma_chunked"),
         Problem(4096, 14336, 4096, FP8, "scale_a+scale_b")),
        (hopper_config(128, 128, 128, 6, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked",
                       schedule="pingpong"), Problem(4096, 4096, 4096, FP8, "scale_row+scale_col")),
        (hopper_config(128, 128, 128, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked",
                       l2_hint="first/none", reg_split="240/24"),
         Problem(4096, 4096, 4096, FP8, "scale_a_block+scale_b_block")),
    )
    out16 = [(c, Problem(p.m, p.n, p.k, FP8, EpilogueSpec((*p.epilogue.ops, OUT_FLOAT16)))) for c, p in cases]
    return [point for pair in zip(cases, out16, strict=True) for point in pair]


def _cluster_m_perf() -> list[tuple[Config, Problem]]:
    """Each mid-sized loser of the H100 draw (bench/results/generalize/2026-12-06-1039785609-h100.md)
    on its best config, then on the same config with a cluster along M of 2 and of 4 CTAs (each B
    tile loaded once and multicast to the cluster's row tiles), where the space takes it. cuBLAS ran
    all four with a cluster along M that spans the problem's row tiles and read B from DRAM once
    (bench/results/profiles/2026-12-06-gemm-h100-draw-losers.md); the question is what our
    multicast is worth on the same tiles."""
    bests = (
        ("256x176x64 s3 c2 ws persist g16 tma_chunked l2 none/first", Problem(398, 11008, 4096, "float16")),
        ("128x160x64 s4 c2 ws persist g16 tma_chunked ewg l2 last/first p256B", Problem(444, 5120, 14336, "bfloat16")),
        ("256x160x64 s3 c2 ws persist g16 tma_chunked r240/24 l2 none/first pftm",
         Problem(1935, 2560, 3072, "bfloat16")),
        ("256x144x64 s3 c2 ws persist g16 tma_chunked l2 none/first", Problem(398, 11008, 4096, "float16")),
    )
    out = []
    for label, problem in bests:
        best = Config.from_label(label, HOPPER_KNOBS)
        for config in (best, best.replace(cluster=2, cluster_dim="m"), best.replace(cluster=4, cluster_dim="m")):
            if HOPPER.is_valid(config, problem):
                out.append((config, problem))
    return out


# Problems for clusters along M whose B tile splits unevenly: row tiles of 64..256 that pair and
# quadruple (M = 1024 and 512 rows), ragged N and K, both 2-byte types.
UNEVEN_PROBLEMS: tuple[Problem, ...] = (
    Problem(1024, 1000, 1000, "float16"),
    Problem(512, 1368, 520, "bfloat16"),
    Problem(1024, 776, 200, "bfloat16"),
    Problem(512, 2056, 1096, "float16"),
    Problem(1000, 1024, 200, "float16"),
)


def _fuzz_uneven(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """Valid points whose cluster along M splits B's tile into uneven multicast slices
    (plan.multicast_slices), the problems in turn, every other knob drawn from the whole grid: the
    correctness sweep of uneven slices."""
    from tirtune.kernels.hopper.plan import plan as hopper_plan

    def forced(rng: Any, turn: int) -> dict[str, Any]:
        cluster = rng.choice((2, 4))  # B's width: 8-row atoms that do not split evenly over the cluster
        blk_n = rng.choice([w for w in HOPPER_KNOBS["blk_n"].values if w % (8 * cluster)])
        return {"cluster": cluster, "cluster_dim": "m", "persistent": True, "warp_specialized": True, "blk_n": blk_n}

    def uneven(config: Config, problem: Problem) -> bool:
        return HOPPER.is_valid(config, problem) and not hopper_plan(config, problem).multicast_even

    return _fuzz_forced(count, seed, UNEVEN_PROBLEMS, forced, accept=uneven, uneven=True)


def _block_mid() -> list[tuple[Config, Problem]]:
    """Block-scaled tiles on the mid-sized FP8 problems: 512x4096x14336 ran best on 128x64 tiles
    (0.58 of torch, bench/results/fp8/2026-12-06-suite-block-starts-h100.md), two rounds of 256
    tiles, because its class starts are 64 wide or swapped 64x256, which the block rules refuse
    (`rules.fp8_block_registers`), and 16 trials never reached the 128x128 tile that won every large
    block-scaled problem. Here the 128x128 tile (one round of 128 tiles) with two product buffers,
    data-parallel and persistent, at several ring depths, and swapped 64x128 and 128x128 tiles,
    beside that best, on it and on 128x4096x4096."""
    labels = (
        "128x64x128 s8 c2 ws l2 none/first",
        "128x128x128 s4 c2 ws persist g8 tma_chunked r240/24 l2 first/none",
        "128x128x128 s4 c2 ws r240/24 l2 none/first",
        "128x128x128 s5 c2 ws r240/24 l2 none/first",
        "128x128x128 s6 c2 ws r240/24 l2 none/first",
        "128x128x128 s6 c2 ws persist r240/24 l2 none/first",
        "64x128x128 s8 c1 ws swap l2 first/none",
        "128x128x128 s4 c2 ws swap r240/24 l2 first/none",
    )
    problems = [Problem(m, n, k, FP8, "scale_a_block+scale_b_block") for m, n, k in ((512, 4096, 14336), (128, 4096, 4096))]
    points = [(Config.from_label(label, HOPPER_KNOBS), problem) for problem in problems for label in labels]
    return [(c, p) for c, p in points if HOPPER.is_valid(c, p)]


def _mid_l2() -> list[tuple[Config, Problem]]:
    """The H100 draws' mid-sized losers' bests (generalize/2026-12-06-1039785609-h100.md,
    generalize/2026-12-07-2439082570-h100-partial.md) with the weights' L2 policy changed: every
    row of tiles re-reads the same weight tiles, but most of those bests load them evict_first
    (`l2 X/first`; with swap_ab the weights are the kernel's A). Each best, then each hint of the
    space with the weights' operand under another policy (default, evict_last, evict_first)."""
    bests = (
        (Problem(398, 11008, 4096, "float16"), "256x176x64 s3 c2 ws persist g16 tma_chunked r240/24 l2 last/first"),
        (Problem(444, 5120, 14336, "bfloat16"), "128x160x64 s4 c2 ws persist g16 tma_chunked ewg l2 last/first p256B"),
        (Problem(1935, 2560, 3072, "bfloat16"),
         "256x160x64 s3 c2 ws persist g16 tma_chunked r240/24 l2 none/first pftm"),
        (Problem(536, 4096, 1024, "bfloat16"), "128x160x64 s5 c1 ws persist g16 tma_chunked l2 first/last pftm"),
        (Problem(647, 22016, 4096, "bfloat16"), "128x216x64 s5 c2 ws persist g16 r240/24 swap p256B"),
        (Problem(3286, 3072, 4096, "float16"), "128x208x64 s4 c2 ws persist g16 tma_chunked l2 none/first"),
    )
    out = []
    for problem, label in bests:
        best = Config.from_label(label, HOPPER_KNOBS)
        # The weights are B (the hint's second half) unswapped, A (its first) swapped.
        hints = ("none/none", "last/first", "first/none") if best.swap_ab else ("none/none", "first/last", "none/first")
        for config in (best, *(best.replace(l2_hint=h) for h in hints if h != best.l2_hint)):
            if HOPPER.is_valid(config, problem):
                out.append((config, problem))
    return out


SWAP_RASTER_SEED = 3202612  # the catalogue draw the set `swap-raster` takes its mid-sized problems from


def _swap_raster() -> list[tuple[Config, Problem]]:
    """The tile order of swapped kernels on mid-sized problems. With swap_ab the weights' tiles
    are the kernel's rows, so raster groups of 8 or 16 rows put the tiles that share a weight tile
    (one per tile of tokens) 8-16 apart, and a persistent grid's round boundary can fall between
    them; row-major order (raster_group 1) puts them next to each other. Problems: the two H100
    losers whose swapped tiles ran slowest (generalize/2026-12-07-2487683144-h100.md,
    profiles/2026-12-07-gemm-h100-mid-l2.md) and the first six of a catalogue draw
    (SWAP_RASTER_SEED) with 128 <= M <= 2048. Each: the swapped 128-row tile whose width fits M in
    the fewest tiles of at most 256, with the chunked TMA store and the deepest ring it takes (at
    most 6), in row-major, 16-row and column-major order with the weights evict_first and the
    tokens evict_last, row-major with no hint, and its unswapped twin (128 rows of tokens)."""
    from bench.generalize import catalogue, draw

    drawn = [d.problem for d in draw(catalogue(), 400, SWAP_RASTER_SEED) if 128 <= d.problem.m <= 2048][:6]
    problems = [Problem(330, 36864, 4608, "bfloat16"), Problem(647, 22016, 4096, "bfloat16"), *drawn]
    out: list[tuple[Config, Problem]] = []
    for problem in problems:
        variants = ((1, "first/last"), (16, "first/last"), (0, "first/last"), (1, "none/none"))
        for group, hint in variants:
            found = _fitted_tile(problem, swap=True, raster_group=group, l2_hint=hint)
            if found is not None:
                out.append((found, problem))
        twin = _fitted_tile(problem, swap=False, raster_group=16, l2_hint="last/first")
        if twin is not None:
            out.append((twin, problem))
    return out


def _fitted_tile(problem: Problem, *, swap: bool, **knobs: Any) -> Config | None:
    """The 128-row tile whose width is the tokens' tile fitted to M in the fewest tiles of at most
    256: swapped (the width over the tokens) or its unswapped twin (the same width over the
    weights, 128 rows of tokens); with the chunked TMA store, the deepest ring it takes (at most 6)
    and `knobs`; None if none is valid."""
    width = -(-problem.m // -(-problem.m // 256))
    width = -(-width // 8) * 8
    return next(
        (
            c
            for stages in range(6, 1, -1)
            if HOPPER.is_valid(
                c := hopper_config(
                    blk_m=128, blk_n=width, blk_k=64, stages=stages, consumers=2, persistent=True,
                    epilogue="tma_chunked", swap_ab=swap, **knobs,  # type: ignore[arg-type]
                ),
                problem,
            )
        ),
        None,
    )


def _swap_stream() -> list[tuple[Config, Problem]]:
    """Swapped row-major tiles whose last round leaves SMs idle, with stream-K over the tail and
    over everything: 330x36864x4608 bf16 (576 tiles, 4.4 rounds: its swapped tile reads what
    cuBLAS reads yet keeps the tensor pipe busy 74% of cycles against 88%,
    profiles/2026-12-07-gemm-h100-swap-raster.md) and the first six problems of the catalogue draw
    of `swap-raster` (SWAP_RASTER_SEED) with at least a round of such tiles and a last round under
    90% full. Each: the fitted swapped tile (`_fitted_tile`, row-major, weights evict_first, tokens
    evict_last), then with stream_k_scope "tail", then stream_k over every tile."""
    from bench.generalize import catalogue, draw

    def fill(problem: Problem) -> float:
        config = _fitted_tile(problem, swap=True, l2_hint="first/last")
        tiles = kernel_tiles(config, problem) if config is not None else 0
        return tiles / (-(-tiles // SMS) * SMS) if tiles >= SMS else 1.0

    drawn = [d.problem for d in draw(catalogue(), 400, SWAP_RASTER_SEED) if 128 <= d.problem.m <= 2048]
    problems = [Problem(330, 36864, 4608, "bfloat16"), *[p for p in drawn if fill(p) < 0.9][:6]]
    out: list[tuple[Config, Problem]] = []
    for problem in problems:
        for knobs in ({}, {"stream_k": True, "stream_k_scope": "tail"}, {"stream_k": True}):
            config = _fitted_tile(problem, swap=True, l2_hint="first/last", **knobs)
            if config is not None:
                out.append((config, problem))
    return out


def _staged_twins(config: Config, problem: Problem) -> list[Config]:
    """A swapped register-store config with the chunked TMA store instead: the deepest ring that
    fits (at most its own), without and then with the epilogue warpgroup (the first register split
    the space takes for it); those the space takes."""
    out = []
    for ewg in (False, True):
        splits = (config.reg_split, "232/24", "240/24") if ewg else (config.reg_split,)
        found = next(
            (
                c
                for stages in range(config.stages, 1, -1)
                for split in splits
                if HOPPER.is_valid(
                    c := config.replace(epilogue="tma_chunked", epilogue_warpgroup=ewg, stages=stages, reg_split=split),
                    problem,
                )
            ),
            None,
        )
        if found is not None:
            out.append(found)
    return out


def _swap_staged_mid() -> list[tuple[Config, Problem]]:
    """Mid-sized problems that our tiles pad along M where cuBLAS's do not (the H100 draws' losers,
    docs/perf-notes.md "Measured on an H100: where the mid-sized kernels lose", and the H200's
    fitted-width problems, kits/2026-12-03-swap-fitted.md): each problem's best from its draw, the
    swapped tile whose width fits M with the register store, and the same tile with the chunked TMA
    store (`_staged_twins`)."""
    swap = "ws persist g16 swap l2 none/first"
    rows = (
        (Problem(398, 11008, 4096, "float16"), "256x176x64 s3 c2 ws persist g16 tma_chunked r240/24 l2 last/first",
         f"256x136x64 s4 c2 {swap}"),
        (Problem(444, 5120, 14336, "bfloat16"), "128x160x64 s4 c2 ws persist g16 tma_chunked ewg l2 last/first p256B",
         f"128x152x64 s6 c2 {swap}"),
        (Problem(1935, 2560, 3072, "bfloat16"),
         "256x160x64 s3 c2 ws persist g16 tma_chunked r240/24 l2 none/first pftm", f"256x152x64 s4 c2 {swap}"),
        (Problem(536, 4096, 1024, "bfloat16"), "128x160x64 s5 c1 ws persist g16 tma_chunked l2 first/last pftm",
         f"128x136x64 s6 c2 {swap}"),
        (Problem(647, 22016, 4096, "bfloat16"), "128x256x64 s4 c2 ws persist g16 tma_chunked l2 last/first p256B",
         "128x216x64 s5 c2 ws persist g16 r240/24 swap p256B"),
        (Problem(1643, 3072, 4096, "bfloat16"), "128x192x64 s4 c2 ws persist g16 tma_chunked l2 none/first",
         "256x152x64 s4 c2 ws persist gcol swap l2 first/none"),
        (Problem(286, 10240, 7168, "float16"), "64x208x64 s6 c1 ws persist g8 tma_chunked l2 none/first p256B pftm",
         "256x96x64 s5 c2 ws persist g8 swap l2 first/none p256B"),
        (Problem(222, 7168, 3584, "bfloat16"), "64x224x64 s5 c1 ws persist g8 tma_chunked p256B pftm",
         "128x112x64 s6 c2 ws persist g8 swap l2 first/none p256B"),
        (Problem(217, 8192, 8192, "float16"), "128x144x64 s6 c1 ws persist g16 tma_chunked l2 none/first pftm",
         "128x112x64 s6 c2 ws persist g8 swap l2 first/none p256B"),
    )
    out = []
    for problem, best, tile in rows:
        swapped = Config.from_label(tile, HOPPER_KNOBS)
        for config in (Config.from_label(best, HOPPER_KNOBS), swapped, *_staged_twins(swapped, problem)):
            if HOPPER.is_valid(config, problem):
                out.append((config, problem))
    return out


def _trial_cost() -> list[tuple[Config, Problem]]:
    """Kept configs of a random draw (generalize/2026-12-07-2487683144-h100.md) whose kernels run
    from a few microseconds to several milliseconds: what one tuning trial's measurement costs
    across kernel lengths, under the measuring child's settings and variations of them
    (bench/trial_cost.py)."""
    rows = (
        (Problem(1, 4608, 18432, "float16"), "64x8x256 s4 c1 ws persist gcol swap l2 first/none p256B pftm"),
        (Problem(12, 3456, 5120, "bfloat16"), "64x16x256 s5 c1 ws persist swap l2 first/none p256B pftm krot"),
        (Problem(69, 4608, 512, "bfloat16"),
         "64x72x64 s8 c2 ws persist tma_chunked pingpong swap l2 first/none p256B pftm"),
        (Problem(1018, 768, 2048, "bfloat16"), "64x104x64 s8 c1 ws persist g16 tma_chunked swap"),
        (Problem(444, 4096, 11008, "bfloat16"), "64x256x64 s5 c1 ws persist g16 tma_chunked l2 last/first p256B"),
        (Problem(330, 36864, 4608, "bfloat16"),
         "128x216x64 s4 c2 ws persist g16 tma_chunked r240/24 l2 last/first p256B"),
        (Problem(5393, 7168, 1792, "bfloat16"),
         "128x184x64 s4 c2 ws persist g16 tma_chunked pingpong r232/24 pftm"),
        (Problem(2942, 57344, 8192, "float16"),
         "128x176x64 s4 c2 ws persist g16 tma_chunked pingpong r240/24 p256B"),
    )
    return [(Config.from_label(label, HOPPER_KNOBS), problem) for problem, label in rows]


def _swap_staged_fp8() -> list[tuple[Config, Problem]]:
    """The FP8 suite's problems whose kept config on the H200 was a swapped tile storing from
    registers (fp8/2026-12-06-suite.md: 2048^3 0.971, 1024^3 0.967, 8192x8192x1024 0.839, 4000^3
    0.834, 512x4096x14336 0.966 per tensor and 0.879 rowwise, 64x28672x4096 1.095): that config,
    then with the chunked TMA store (`_staged_twins`), beside the H100 suite's kept config for the
    same problem (fp8/2026-12-06-suite-h100.md) as the same run's unswapped reference."""
    rows = (
        ("2048x2048x2048", "scale_a+scale_b", "128x128x128 s6 c2 ws persist g16 pingpong swap",
         "128x128x128 s6 c2 ws persist g8 tma_chunked pingpong"),
        ("1024x1024x1024", "scale_a+scale_b", "128x64x128 s8 c2 ws persist g8 swap",
         "128x64x128 s8 c2 ws persist g8 tma_chunked pingpong pftm"),
        ("8192x8192x1024", "scale_a+scale_b", "128x128x128 s5 c2 ws persist g16 pingpong swap p256B",
         "128x128x128 s6 c2 ws persist g8 tma_chunked pingpong"),
        ("4000x4000x4000", "scale_a+scale_b", "128x256x128 s4 c2 ws persist g8 swap pftm",
         "128x256x128 s4 c2 ws persist g8 tma_chunked l2 first/none pftm"),
        ("512x4096x14336", "scale_a+scale_b", "128x128x128 s6 c2 ws persist g8 pingpong swap",
         "64x256x128 s4 c1 ws swap l2 first/none"),
        ("512x4096x14336", "scale_row+scale_col", "64x256x128 s4 c1 ws swap l2 first/none",
         "128x96x128 s8 c2 ws l2 none/first"),
        ("64x28672x4096", "scale_a+scale_b", "128x64x128 s8 c2 ws persist g8 pingpong swap l2 first/none",
         "64x64x256 s6 c1 ws l2 none/first"),
    )
    out = []
    for shape, epilogue, swapped_label, reference in rows:
        problem = Problem.parse(shape, FP8, epilogue)
        swapped = Config.from_label(swapped_label, HOPPER_KNOBS)
        for config in (Config.from_label(reference, HOPPER_KNOBS), swapped, *_staged_twins(swapped, problem)):
            if HOPPER.is_valid(config, problem) and (config, problem) not in out:
                out.append((config, problem))
    return out


# Every width the swapped TMA store takes (64 and up), a last box of D's rows in most.
SWAP_STAGED_WIDTHS = tuple(n for n in HOPPER_KNOBS["blk_n"].values if n >= 64)


def _fuzz_swap_staged(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """Valid hopper-gemm/5 points that swap A and B and stage the store through TMA
    (tma_chunked: each box transposed by stmatrix .trans, a last box of D's rows where blk_n is
    off the 64-wide box), over TAIL_PROBLEMS (ragged M, N and K), the same with a fused epilogue
    (EPILOGUE_SPECS in turn) and FP8_PROBLEMS in turn, every other knob drawn from the whole grid:
    the correctness sweep of the swapped TMA store."""
    problems = (
        *TAIL_PROBLEMS,
        *_with_epilogues(TAIL_PROBLEMS),
        *FP8_PROBLEMS[::2],
    )
    return _fuzz_forced(
        count,
        seed,
        problems,
        lambda rng, turn: dict(swap_ab=True, epilogue="tma_chunked", split_k=1, blk_n=rng.choice(SWAP_STAGED_WIDTHS)),
        accept=HOPPER.is_valid,
        swapped_staged=True,
    )


def _fuzz_swap_stream(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """Valid hopper-gemm/5 points that swap A and B, stage the store through TMA (tma_chunked) and
    share the k-tiles by stream-K, over the tail and over every tile in turn, on TAIL_PROBLEMS and
    the same with a fused epilogue (EPILOGUE_SPECS in turn), every other knob drawn from the whole
    grid as far as stream_k allows: the correctness sweep of the combination, which the stream-K
    sweeps (register store only for swapped tiles then) and the swapped store's (no stream-K
    drawn) left out."""
    problems = (
        *TAIL_PROBLEMS,
        *_with_epilogues(TAIL_PROBLEMS),
    )
    return _fuzz_forced(
        count,
        seed,
        problems,
        lambda rng, turn: dict(
            swap_ab=True,
            epilogue="tma_chunked",
            blk_n=rng.choice(SWAP_STAGED_WIDTHS),
            stream_k=True,
            stream_k_scope=("tail", "all")[turn % 2],
            **STREAM_PLAIN,
        ),
        accept=HOPPER.is_valid,
        swapped_staged=True,
    )


def _swap_mid() -> list[tuple[Config, Problem]]:
    """cuBLAS's tiles on the H100 draw's mid-sized losers read as swapped ones: its grids (2x66,
    4x30, 2x65, 2x64) match tiles whose 136 or 152 side lies along the problem's M (3, 3, 13 and 4
    row tiles) and whose 128 or 256 side lies along N, one wave of at most 132 tiles each
    (bench/results/profiles/2026-12-06-gemm-h100-draw-losers.md). Here that is swap_ab (the
    kernel's N is the problem's M) with the register epilogue, without and with a cluster, each
    beside the problem's best from the draw."""
    reg = "ws persist g16 swap l2 none/first"
    rows = (
        (Problem(398, 11008, 4096, "float16"), "256x176x64 s3 c2 ws persist g16 tma_chunked l2 none/first",
         (f"256x136x64 s4 c2 {reg}", f"256x136x64 s3 c2 {reg}")),
        (Problem(444, 5120, 14336, "bfloat16"), "128x160x64 s4 c2 ws persist g16 tma_chunked ewg l2 last/first p256B",
         (f"128x152x64 s6 c2 {reg}",)),
        (Problem(1935, 2560, 3072, "bfloat16"),
         "256x160x64 s3 c2 ws persist g16 tma_chunked r240/24 l2 none/first pftm", (f"256x152x64 s4 c2 {reg}",)),
        (Problem(536, 4096, 1024, "bfloat16"), "128x160x64 s5 c1 ws persist g16 tma_chunked l2 first/last pftm",
         (f"128x136x64 s6 c2 {reg}",)),
    )
    out = []
    for problem, best, tiles in rows:
        out.append((Config.from_label(best, HOPPER_KNOBS), problem))
        for label in tiles:
            tile = Config.from_label(label, HOPPER_KNOBS)
            for config in (tile, tile.replace(cluster=2), tile.replace(cluster=4)):
                if HOPPER.is_valid(config, problem):
                    out.append((config, problem))
    return out


def _cluster_m_uneven() -> list[tuple[Config, Problem]]:
    """The tiles cuBLAS ran three mid-sized losers of the H100 draw with (256x136 in 2x1 clusters
    with 4 stages, 128x152 in 4x1 with 6, 256x152 in 2x1 with 4:
    bench/results/profiles/2026-12-06-gemm-h100-draw-losers.md), which split B's rows into uneven
    multicast slices (72 + 64; 40 + 40 + 40 + 32; 80 + 72). Their stages fit beside the register
    epilogue only; each tile also with the chunked TMA store (a stage fewer) and without a cluster,
    beside the problem's best from the draw."""
    rows = (
        (Problem(398, 11008, 4096, "float16"), "256x176x64 s3 c2 ws persist g16 tma_chunked l2 none/first",
         ("256x136x64 s4 c2 ws persist g16 l2 none/first",
          "256x136x64 s3 c2 ws persist g16 tma_chunked l2 none/first")),
        (Problem(444, 5120, 14336, "bfloat16"), "128x160x64 s4 c2 ws persist g16 tma_chunked ewg l2 last/first p256B",
         ("128x152x64 s6 c2 ws persist g16 l2 none/first",
          "128x152x64 s5 c2 ws persist g16 tma_chunked l2 none/first")),
        (Problem(1935, 2560, 3072, "bfloat16"),
         "256x160x64 s3 c2 ws persist g16 tma_chunked r240/24 l2 none/first pftm",
         ("256x152x64 s4 c2 ws persist g16 l2 none/first",
          "256x136x64 s3 c2 ws persist g16 tma_chunked l2 none/first")),
    )
    out = []
    for problem, best, tiles in rows:
        out.append((Config.from_label(best, HOPPER_KNOBS), problem))
        for label in tiles:
            tile = Config.from_label(label, HOPPER_KNOBS)
            for config in (tile, tile.replace(cluster=2, cluster_dim="m"), tile.replace(cluster=4, cluster_dim="m")):
                if HOPPER.is_valid(config, problem):
                    out.append((config, problem))
    return out


# What an FP8 kernel took when fp8-fuzz was drawn (rules.FP8_KNOBS then): TMA loads, the register
# epilogue, whole sums. The sweep fp8-paths-fuzz has lifted the last two since; the set draws as it drew.
FP8_FUZZ_KNOBS: dict[str, object] = {
    **FP8_KNOBS,
    "epilogue": "register",
    "epilogue_warpgroup": False,
    "split_k": 1,
    "split_k_reduce": "dsmem",
    "split_k_scope": "all",
}


def _fuzz_fp8(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """Valid hopper-gemm/5 points over FP8_PROBLEMS in turn, the knobs drawn from the whole grid
    with what an FP8 kernel took when it was drawn laid over them (TMA loads, the register epilogue,
    whole sums: FP8_FUZZ_KNOBS), blk_k 128 or 256 as drawn: every path an FP8 problem can be tuned over
    (swapped, ping-pong, persistent, clusters with multicast, L2 hints, k_rotate)."""
    return _fuzz_forced(count, seed, FP8_PROBLEMS, lambda rng, turn: dict(FP8_FUZZ_KNOBS), accept=HOPPER.is_valid)


# The FP8 paths refused until this sweep ran (fp8_paths.SWEPT), drawn and built through their own
# template (bench/fp8_paths.py): split-K over DSMEM clusters and the serial workspace, the tail
# split, the staged epilogues with and without the epilogue warpgroup; every other rule holds.
FP8_PATHS_SPACE = replace(HOPPER, config_rules=fp8_paths.config_rules())
FP8_PATHS_EPILOGUES = ("register", "tma", "tma_chunked")


def _fuzz_fp8_paths(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """Valid points of FP8_PATHS_SPACE over FP8_PROBLEMS in turn, two turns of three split (2 to
    16 CTAs, either reduction, all tiles or the tail), the third staged (the two staged epilogues
    in turn, the epilogue warpgroup as drawn), TMA loads, no trim or peel, no stream-K: the sweep
    that decided that the two FP8 refusals could go."""

    def forced(rng: Any, turn: int) -> dict[str, Any]:
        base: dict[str, Any] = {"loader": "tma", "trim": False, "peel_k": False, "stream_k": False}
        if turn % 3 != 2:  # two turns of three split, every third of them the tail alone (serially)
            split = {**base, "split_k": rng.choice((2, 4, *DEEP_SPLITS)), "epilogue": "register",
                     "epilogue_warpgroup": False}
            return {**split, "split_k_scope": "tail", "split_k_reduce": "serial"} if turn % 9 == 1 else split
        return {**base, "split_k": 1, "epilogue": FP8_PATHS_EPILOGUES[1 + (turn // 3) % 2]}

    def uses_a_refused_path(config: Config, problem: Problem) -> bool:
        return any(rule(config, problem) for rule in fp8_paths.SWEPT) and FP8_PATHS_SPACE.is_valid(
            config, problem
        )

    return _fuzz_forced(count, seed, FP8_PROBLEMS, forced, accept=uses_a_refused_path, space=FP8_PATHS_SPACE)


# Stream-K's speed probe: problems drawn from bench/generalize.py's catalogue with this seed (none
# chosen by hand), kept where 128x128 tiles fill one to three rounds and then part of another;
# each base tile persistent as it is and with stream_k.
STREAM_PERF_SEED = 535353
STREAM_PERF_PROBLEMS = 8
STREAM_PERF_BASES = (
    hopper_config(
        blk_m=128,
        blk_n=128,
        blk_k=64,
        stages=5,
        consumers=2,
        persistent=True,
        raster_group=8,
        epilogue="tma_chunked",
        reg_split="240/24",
    ),
    hopper_config(
        blk_m=128,
        blk_n=256,
        blk_k=64,
        stages=4,
        consumers=2,
        persistent=True,
        raster_group=16,
        epilogue="tma_chunked",
        reg_split="240/24",
    ),
)


def _stream_perf() -> list[tuple[Config, Problem]]:
    """Each drawn problem with each base tile, persistent, without and with stream_k (where the
    tile leaves at least one round of tiles): the same tile timed against cuBLAS both ways."""
    from bench.generalize import catalogue, draw

    problems: list[Problem] = []
    for drawn in draw(catalogue(), 400, STREAM_PERF_SEED):
        p = drawn.problem
        tiles = -(-p.m // 128) * -(-p.n // 128)
        if p.m >= 64 and SMS <= tiles < 4 * SMS and tiles % SMS:
            problems.append(p)
        if len(problems) == STREAM_PERF_PROBLEMS:
            break
    chosen: list[tuple[Config, Problem]] = []
    for problem in problems:
        for base in STREAM_PERF_BASES:
            chosen += [(c, problem) for c in (base, base.replace(stream_k=True)) if HOPPER.is_valid(c, problem)]
    return chosen


def _stream_tail_perf() -> list[tuple[Config, Problem]]:
    """stream-perf's problems and tiles with stream_k_scope "tail" (where it runs data-parallel
    rounds first: two rounds of tiles or more), beside the same tile data-parallel and shared out
    whole, so the three are timed in one run."""
    chosen = []
    for config, problem in _stream_perf():
        tail = config.replace(stream_k=True, stream_k_scope="tail")
        if config.stream_k and HOPPER.is_valid(tail, problem) and kernel_tiles(tail, problem) >= 2 * SMS:
            base = config.replace(stream_k=False)
            chosen += [(base, problem), (config, problem), (tail, problem)]
    return chosen


# The tail split's speed probe: problems drawn from bench/generalize.py's catalogue with this seed
# (none chosen by hand), kept where 128x128 tiles run one to three whole waves and then a partial
# one of at most 80 tiles, M at least 64; the first TAIL_PERF_PROBLEMS of them.
TAIL_PERF_SEED = 424242
TAIL_PERF_PROBLEMS = 6
TAIL_PERF_BASES = (
    hopper_config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2),
    hopper_config(blk_m=128, blk_n=256, blk_k=64, stages=4, consumers=2),
)


def _tail_perf() -> list[tuple[Config, Problem]]:
    """Each drawn problem with each base tile as it is (one CTA a tile), persistent (grouped by 8),
    and split_k_scope "tail" at each of 2, 3, 4, 6 and 8 the problem allows: the same tile with and
    without its last wave split, timed against cuBLAS by the kit's run."""
    from bench.generalize import catalogue, draw

    problems: list[Problem] = []
    for drawn in draw(catalogue(), 400, TAIL_PERF_SEED):
        p = drawn.problem
        tiles = -(-p.m // 128) * -(-p.n // 128)
        if p.m >= 64 and SMS < tiles < 4 * SMS and 0 < tiles % SMS <= 80:
            problems.append(p)
        if len(problems) == TAIL_PERF_PROBLEMS:
            break
    chosen: list[tuple[Config, Problem]] = []
    for problem in problems:
        for base in TAIL_PERF_BASES:
            variants = [base, base.replace(persistent=True, raster_group=8)] + [
                base.replace(split_k=s, split_k_reduce="serial", split_k_scope="tail") for s in (2, 3, 4, 6, 8)
            ]
            chosen += [(c, problem) for c in variants if HOPPER.is_valid(c, problem)]
    return chosen


# The one wrong result of the suite's run (2026-11-30, job 4 trial 20, 1024^3 fp16: relative error 1.3e-01;
# the check refused it, nothing served it): a swapped persistent ping-pong kernel in 2-CTA clusters along the
# kernel's M with the register epilogue. Its kit (v5-wrong) ran on the H200
# (bench/results/sweeps/2026-11-30-wrong-kernel-neighbours.md: 18 of 28 wrong, all swapped ping-pong in 2-CTA
# clusters) and the rule swap_ab_pingpong_unclustered refuses the combination since.
SUITE_WRONG = hopper_config(
    blk_m=64,
    blk_n=128,
    blk_k=64,
    stages=8,
    consumers=2,
    warp_specialized=True,
    persistent=True,
    raster_group=1,
    epilogue="register",
    cluster=2,
    cluster_dim="m",
    schedule="pingpong",
    reg_split="232/24",
    swap_ab=True,
    l2_hint="last/first",
)


def _bisect(config: Config, problem: Problem) -> list[tuple[Config, Problem]]:
    """`config` on `problem`, then every valid config one knob away from it (each knob through
    each of its other values), then `config` on neighbouring problems: a kit that names the knob
    a wrong result needs, run once under the smoke watchdog."""
    chosen = [(config, problem)]
    for name, values in HOPPER.knobs.items():
        for value in values:
            if value == getattr(config, name):
                continue
            other = config.replace(**{name: value})
            if _drawable(HOPPER, other, problem):
                chosen.append((other, problem))
    for m, n, k in ((2048, 2048, 2048), (1024, 1024, 512), (1000, 1000, 1024), (512, 1024, 1024)):
        other_problem = Problem(m, n, k, problem.dtype)
        if _drawable(HOPPER, config, other_problem):
            chosen.append((config, other_problem))
    return chosen


def _journey() -> list[tuple[str, Config, Problem]]:
    from bench.journey import JOURNEY

    return [(step.name, step.config, step.problem) for step in JOURNEY]


# Each set: (config, problem) pairs, or (name, config, problem) where the manifest names the entry.
SETS: dict[str, Callable[[], Sequence[tuple[Any, ...]]]] = {
    "v1": lambda: SET,
    "v2": lambda: SET_V2,
    "v3": lambda: SET_V3_TAILS + SET_V3_PERF,
    "v3-tails": lambda: SET_V3_TAILS,
    "v3-perf": lambda: SET_V3_PERF,
    "v3-more": lambda: SET_V3_MORE,
    "v3-fuzz": _fuzz,
    "v4": lambda: SET_V4_TAILS + _fuzz(24, seed=4, space=HOPPER, new_in_v4=True) + SET_V4_PERF,
    "v4-fuzz": lambda: _fuzz(150, seed=5, space=HOPPER, new_in_v4=True),
    "v5": lambda: SET_V5_PERF + SET_V5_SERIAL + SET_V5_RAGGED,
    "v5-serial": lambda: SET_V5_SERIAL,
    "v5-perf": lambda: SET_V5_PERF,
    "v5-ragged": lambda: SET_V5_RAGGED,
    "v5-fuzz": lambda: _fuzz_v5(120, seed=6),
    # The hopper-gemm/5 correctness sweep (bench/results/sweeps/2026-11-30-hopper-gemm-5.md): 300 points (the
    # first 120 are v5-fuzz's, the same draws).
    "v5-sweep": lambda: _fuzz_v5(300, seed=6),
    "v5b": lambda: SET_V5B_PERF + SET_V5B_RAGGED + _fuzz_v5(10, seed=7, later=True),
    "v5b-fuzz": lambda: _fuzz_v5(120, seed=8, later=True),
    "v5-wrong": lambda: _bisect(SUITE_WRONG, Problem(1024, 1024, 1024, "float16")),
    "ragged-tail": lambda: SET_TAIL_PERF + SET_TAIL_CHECK,
    "trim": lambda: SET_TRIM_PERF + SET_TRIM_CHECK,
    "decode-best": lambda: SET_DECODE_BEST,
    "decode-deep": lambda: SET_DECODE_DEEP,
    "decode-rotate": lambda: SET_DECODE_ROTATE,
    "decode-narrow": lambda: SET_DECODE_NARROW,
    "krot-fuzz": lambda: _fuzz_rotate(48, seed=31),
    # The deeper splits' correctness sweep: 300 points over SPLIT_PROBLEMS.
    "split-fuzz": lambda: _fuzz_split(300, seed=33),
    # The tail split's correctness sweep: 300 points over TAIL_PROBLEMS.
    "tail-fuzz": lambda: _fuzz_tail(300, seed=35),
    # Its thirds, for sweeps run apart (the same points).
    "tail-fuzz-a": lambda: _fuzz_tail(300, seed=35)[:100],
    "tail-fuzz-b": lambda: _fuzz_tail(300, seed=35)[100:200],
    "tail-fuzz-c": lambda: _fuzz_tail(300, seed=35)[200:],
    "tail-perf": _tail_perf,
    # Swapped ping-pong without a cluster, where the space still takes it (swap_ab_pingpong_wide):
    # 200 points over TAIL_PROBLEMS.
    "swap-pingpong-fuzz": lambda: _fuzz_swap_pingpong(200, seed=37),
    # Stream-K's correctness sweep (300 points over TAIL_PROBLEMS) and speed probe.
    "stream-fuzz": lambda: _fuzz_stream(300, seed=39),
    "stream-perf": _stream_perf,
    "stream-tail-fuzz": lambda: _fuzz_stream_tail(300, seed=41),
    "stream-tail-perf": _stream_tail_perf,
    "epilogue-fuzz": lambda: _fuzz_epilogue(300, seed=43),
    # The kept configs of the draws' losers, for a profile beside cuBLAS's kernels.
    "draw-losers": _draw_losers,
    # The same losers' kept configs beside swapped tiles fitted to M, for a timing against cuBLAS.
    "swap-fitted": _swap_fitted,
    # The swiglu epilogue's correctness sweep: 100 points over SWIGLU_PROBLEMS, seed 45.
    "swiglu-fuzz": lambda: _fuzz_swiglu(100, seed=45),
    # The FP8 kernels' correctness sweep: 200 points over FP8_PROBLEMS, seed 47.
    "fp8-fuzz": lambda: _fuzz_fp8(200, seed=47),
    # The FP8 paths still refused, built without those two rules (bench/fp8_paths.py): 200 points, seed 49.
    "fp8-paths-fuzz": lambda: _fuzz_fp8_paths(200, seed=49),
    # The block-scaled FP8 kernels' correctness sweep: 200 points over FP8_BLOCK_PROBLEMS, seed 51;
    # its first 40, for a first check within a short GPU call (the same points).
    "fp8-block-fuzz": lambda: _fuzz_fp8_block(200, seed=51),
    "fp8-block-fuzz-a": lambda: _fuzz_fp8_block(200, seed=51)[:40],
    # The block-scaled kernels with two product buffers: 200 points over FP8_BLOCK_PROBLEMS, seed 53,
    # and the tail split's run-time k-tile counts (the draw took none).
    "fp8-block-buffers-fuzz": lambda: _fuzz_fp8_block(200, seed=53, accept=_two_buffers) + _block_buffers_tail(),
    # An fp16 D on FP8 kernels (out_float16): 72 points over FP8_OUT16_PROBLEMS, seed 55.
    "fp8-out16-fuzz": lambda: _fuzz_fp8_out16(72, seed=55),
    # The same FP8 kernels with a bf16 D and with an fp16 one, timed as a kit.
    "fp8-out16-perf": _fp8_out16_perf,
    "cluster-m-perf": _cluster_m_perf,
    # The same losers on cuBLAS's tiles, whose multicast slices are uneven.
    "cluster-m-uneven": _cluster_m_uneven,
    # The same losers on cuBLAS's tiles read as swapped ones.
    "swap-mid": _swap_mid,
    "mid-l2": _mid_l2,
    "swap-staged-mid": _swap_staged_mid,
    # Swapped tiles in row-major, grouped and column-major order on mid-sized problems.
    "swap-raster": _swap_raster,
    # The same fitted swapped tiles where their last round leaves SMs idle, with stream-K.
    "swap-stream": _swap_stream,
    # Its correctness sweep: 300 swapped, TMA-staged stream-K points, seed 65.
    "swap-stream-fuzz": lambda: _fuzz_swap_stream(300, seed=65),
    "swap-staged-fuzz": lambda: _fuzz_swap_staged(300, seed=63),
    "swap-staged-fp8": _swap_staged_fp8,
    # A draw's kept configs from microseconds to milliseconds: what a trial's measurement costs.
    "trial-cost": _trial_cost,
    "fp8-block-mid": _block_mid,
    # 300 random valid points with uneven multicast slices, for the smoke run.
    "uneven-fuzz": lambda: _fuzz_uneven(300, seed=61),
    # One product buffer against two on the same tiles, timed as a kit.
    "fp8-block-buffers-perf": _block_buffers_perf,
    "fp8-stagger-fuzz": _block_stagger_fuzz,
    "fp8-stagger": _block_stagger_perf,
    "ragged-best": lambda: SET_RAGGED_BEST,
    "ragged-wide": lambda: SET_RAGGED_WIDE,
    "ragged-cluster": lambda: SET_RAGGED_CLUSTER,
    "ragged-k": lambda: SET_RAGGED_K,
    "peel": lambda: SET_PEEL_PERF + SET_PEEL_CHECK,
    "ragged-pingpong": lambda: SET_RAGGED_PINGPONG,
    "ragged-starts": _ragged_starts,
    "v3-final": lambda: SET_V3_FINAL,
    "waves": lambda: SET_V3_FINAL + SET_WAVES,
    "round4": lambda: SET_ROUND4,
    "journey": _journey,
}


def _slug(config: Config, problem: Problem) -> str:
    ws = "ws" if config.warp_specialized else "mono"
    extra = "".join(
        [
            "_persist" if config.persistent else "",
            f"_g{config.raster_group}" if config.raster_group != 1 else "",
            f"_{config.epilogue}" if config.epilogue != "register" else "",
            f"_{config.schedule}" if config.schedule != "cooperative" else "",
            f"_r{config.reg_split.replace('/', '-')}" if config.reg_split != "232/40" else "",
            f"_cl{config.cluster}{config.cluster_dim}" if config.cluster != 1 else "",
            f"_{config.loader}" if config.loader != "tma" else "",
            "_ewg" if config.epilogue_warpgroup else "",
            f"_sk{config.split_k}" if config.split_k != 1 else "",
            f"-{config.split_k_reduce}" if config.split_k != 1 and config.split_k_reduce != "dsmem" else "",
            f"-{config.split_k_scope}" if config.split_k_scope != "all" else "",
            "_swap" if config.swap_ab else "",
            f"_l2{config.l2_hint.replace('/', '-')}" if config.l2_hint != "none/none" else "",
            f"_p{config.l2_promotion}" if config.l2_promotion != "128B" else "",
            "_pftm" if config.prefetch_tensormap else "",
            "_trim" if config.trim else "",
            "_peelk" if config.peel_k else "",
            "_krot" if config.k_rotate else "",
            "_streamk" if config.stream_k else "",
            f"-{config.stream_k_scope}" if config.stream_k_scope != "all" else "",
            "_bstagger" if config.block_stagger else "",
        ]
    )
    return (
        f"{config.blk_m}x{config.blk_n}x{config.blk_k}_s{config.stages}_c{config.consumers}_{ws}{extra}"
        f"__{problem.shape}_{problem.dtype}"
        + (f"_{str(problem.epilogue).replace('+', '-')}" if problem.epilogue.ops else "")
    )


# Sets drawn from and built by another space and template than the product's (HOPPER, the
# registry's Hopper template): the FP8 paths still refused.
SET_SPACES: dict[str, tuple[SearchSpace, str]] = {"fp8-paths-fuzz": (FP8_PATHS_SPACE, fp8_paths.TEMPLATE)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=sorted(SETS), default="v1")
    parser.add_argument("--out", type=Path, default=Path(".build/verify"))
    parser.add_argument("--cache-dir", type=Path, default=Path(".build/cache"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--strip", action="store_true", help="strip the copies (a third smaller; the device's upload is capped)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    chosen = [e if len(e) == 3 else (None, *e) for e in SETS[args.set]()]
    space, template = SET_SPACES.get(args.set, (HOPPER, DEFAULT_TEMPLATE))
    for _, config, problem in chosen:
        space.check_problem(problem)
        if not _valid_but_later(space, config, problem):
            bad = space.violations(config, problem)
            raise SystemExit(f"{config.label()} {problem}: {'; '.join(map(str, bad))}")
    for _, config, problem in chosen:  # drawn when valid, refused by a rule added since
        for v in space.violations(config, problem):
            logger.warning("left out %s %s: %s", config.label(), problem, v)
    chosen = [(n, c, p) for n, c, p in chosen if space.is_valid(c, p)]
    names = {(c, p): n for n, c, p in chosen if n}
    candidates = [Candidate(c, p, TEMPLATE_VERSION) for _, c, p in chosen]
    started = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda c: compile_candidate(c, str(args.cache_dir), args.timeout, template), candidates))

    args.out.mkdir(parents=True, exist_ok=True)
    entries, total = [], 0
    for result in results:
        cand = result.candidate
        name = _slug(cand.config, cand.problem)
        if (cand.config, cand.problem) in names:
            name = f"{names[cand.config, cand.problem]}__{name}"
        if result.outcome is not Outcome.OK or result.artifact is None:
            logger.error("FAILED %s: %s %s", name, result.outcome.value, result.message)
            continue
        shutil.copyfile(result.artifact, args.out / f"{name}.so")
        if args.strip:  # the static symbol table only: tvm_ffi finds its entry points in the dynamic one
            subprocess.run(["strip", "--strip-unneeded", str(args.out / f"{name}.so")], check=True)
        record = json.loads((Path(result.artifact).parent / "build.json").read_text())
        size = (args.out / f"{name}.so").stat().st_size
        total += size
        entries.append(
            {
                "name": name,
                "label": cand.config.label(),
                "config": cand.config.to_json(),
                "problem": cand.problem.to_json(),
                "so": f"{name}.so",
                "so_bytes": size,
                "template_version": cand.template_version,
                "build_key": cand.build_key(),
                "ptxas": record.get("ptxas"),
                "nvcc_s": record.get("nvcc_s"),
                "lower_s": record.get("lower_s"),
            }
        )
        logger.info("%-55s %6.1f s  %s  %d B", name, result.seconds, "cached" if result.cached else "built", size)
    # The compiler that made the .so files, for reports made where TVM is not installed.
    manifest = {"template_version": TEMPLATE_VERSION, "template": template, "tvm": version("apache-tvm"), "entries": entries}
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    logger.info(
        "%d/%d built in %.0f s, %.1f MB total -> %s",
        len(entries),
        len(chosen),
        time.perf_counter() - started,
        total / 2**20,
        args.out / "manifest.json",
    )
    return 0 if len(entries) == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
