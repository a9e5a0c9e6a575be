"""The Hopper GEMM template: tracing and lowering (fast), and real sm_90a builds (marked nvcc).

The nvcc tests compile a few representative configs, in parallel, and read the SASS: the kernel
must use wgmma (HGMMA) fed by TMA (UTMALDG), spill nothing, and have the shape each knob asks for.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tirtune.builder import toolchain
from tirtune.kernels import build, plan
from tirtune.space import Config, Problem, SpaceError
from tirtune.space.hopper import rules
from tirtune.space.hopper.knobs import config as hopper_config


def _c(bm: int, bn: int, bk: int, st: int, cons: int, ws: bool, **v2: object) -> Config:
    return hopper_config(blk_m=bm, blk_n=bn, blk_k=bk, stages=st, consumers=cons, warp_specialized=ws, **v2)  # type: ignore[arg-type]


# Between them: ws and not, 1 and 2 consumers, 64- and 128-row consumers (1 and 2 m64 blocks),
# blk_k 64 and 128, every blk_n, fp16 and bf16, tails along M, N and K.
CASES = {
    "simplest-tail": (_c(64, 64, 64, 2, 1, False), Problem(1000, 1000, 1000, "float16")),
    "ws-c2-n256": (_c(128, 256, 64, 4, 2, True), Problem(4096, 4096, 4096, "float16")),
    "mono-k128-2mblk-bf16": (_c(128, 128, 128, 3, 1, False), Problem(520, 392, 200, "bfloat16")),
    "ws-c1-n192-k128-tiny": (_c(64, 192, 128, 3, 1, True), Problem(100, 200, 64, "bfloat16")),
    "ws-m256-c2": (_c(256, 128, 64, 3, 2, True), Problem(1000, 1000, 1000, "float16")),
    # hopper-gemm/2: persistent, grouped rasterization, stmatrix + TMA-store epilogue.
    "persist-g8-tma-n256": (
        _c(128, 256, 64, 3, 2, True, persistent=True, raster_group=8, epilogue="tma"),
        Problem(4096, 4096, 4096, "float16"),
    ),
    # hopper-gemm/3: ping-pong consumers, chunked TMA stores, the 240/24 split, clusters with
    # multicast along M and N, persistent CTAs without a producer, the thread loader.
    "pingpong-chunked-r240": (
        _c(
            64,
            256,
            64,
            4,
            2,
            True,
            persistent=True,
            raster_group=8,
            epilogue="tma_chunked",
            schedule="pingpong",
            reg_split="240/24",
        ),
        Problem(4096, 4096, 4096, "float16"),
    ),
    "pingpong-2mblk-tma-tail": (
        _c(128, 128, 64, 4, 2, True, persistent=True, epilogue="tma", schedule="pingpong"),
        Problem(777, 336, 136, "bfloat16"),
    ),
    "cluster2m-chunked": (
        _c(128, 256, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked", cluster=2),
        Problem(4096, 4096, 4096, "float16"),
    ),
    "cluster4n-tail": (
        _c(128, 64, 64, 4, 2, True, persistent=True, cluster=4, cluster_dim="n"),
        Problem(1000, 1024, 200, "float16"),
    ),
    # Uneven multicast slices: B's 152 rows over 4 CTAs are 40 + 40 + 40 + 32 (a box each).
    "cluster4m-uneven-152": (
        _c(128, 152, 64, 5, 2, True, persistent=True, raster_group=16, epilogue="tma_chunked", cluster=4),
        Problem(512, 5120, 1024, "bfloat16"),
    ),
    "ws-c3-m192-chunked": (
        _c(192, 128, 64, 4, 3, True, persistent=True, raster_group=8, epilogue="tma_chunked"),
        Problem(1000, 1000, 1000, "float16"),
    ),
    "mono-persist-threads": (
        _c(128, 128, 64, 1, 2, False, persistent=True, raster_group=8, loader="threads"),
        Problem(200, 100, 72, "bfloat16"),
    ),
    # hopper-gemm/4: the epilogue warpgroup (whole-tile and chunked staging, cooperative and
    # ping-pong) and four consumer warpgroups (with and without setmaxnreg).
    "ewg-chunked-m256": (
        _c(256, 128, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked",
           epilogue_warpgroup=True, reg_split="232/24"),
        Problem(4096, 4096, 4096, "float16"),
    ),
    "ewg-pingpong-tma-tail": (
        _c(128, 128, 64, 4, 2, True, persistent=True, epilogue="tma", schedule="pingpong",
           epilogue_warpgroup=True, reg_split="232/24"),
        Problem(777, 336, 136, "bfloat16"),
    ),
    "c4-chunked-r112": (
        _c(256, 128, 64, 3, 4, True, persistent=True, raster_group=8, epilogue="tma_chunked", reg_split="112/24"),
        Problem(1000, 1000, 1000, "float16"),
    ),
    "c4-ewg-n64-tail": (
        _c(256, 64, 64, 4, 4, True, epilogue="tma_chunked", epilogue_warpgroup=True),
        Problem(300, 200, 136, "bfloat16"),
    ),
    # hopper-gemm/5: swap_ab (decode shapes on wgmma's N), narrow tiles, split-K clusters reducing
    # through distributed shared memory, one-row operands (M = 1, with and without the swap).
    # The fitted widths (56..120): a swapped tile whose width fits M (217 rows: two of 112), and a
    # plain one whose 104 columns end off the 64-wide box (register stores).
    "swap-fitted-n112": (
        _c(128, 112, 64, 6, 2, True, persistent=True, raster_group=8, swap_ab=True, l2_hint="first/none"),
        Problem(217, 8192, 8192, "float16"),
    ),
    "fitted-n104-bf16": (_c(64, 104, 64, 6, 1, True), Problem(300, 4096, 2048, "bfloat16")),
    "swap-m16-n16": (_c(64, 16, 128, 8, 1, True, swap_ab=True), Problem(16, 4096, 4096, "float16")),
    "swap-sk2-m16": (_c(64, 16, 128, 8, 1, True, swap_ab=True, split_k=2), Problem(16, 4096, 4096, "bfloat16")),
    "swap-m1-n8": (_c(64, 8, 128, 8, 1, True, swap_ab=True), Problem(1, 4096, 4096, "float16")),
    # The swapped chunked TMA store: boxes transposed by stmatrix .trans, the last box D's last
    # 24 rows (216 = 3 x 64 + 24: x4 and x2 stores), with the epilogue warpgroup on a 40-row tail.
    "swap-chunked-n216": (
        _c(128, 216, 64, 4, 2, True, persistent=True, raster_group=16, swap_ab=True, epilogue="tma_chunked",
           reg_split="240/24"),
        Problem(647, 22016, 4096, "bfloat16"),
    ),
    "swap-chunked-ewg-n104": (
        _c(128, 104, 64, 5, 2, True, persistent=True, swap_ab=True, epilogue="tma_chunked", epilogue_warpgroup=True),
        Problem(222, 7168, 3584, "float16"),
    ),
    "m1-noswap-sk4-mono": (_c(64, 64, 64, 4, 1, False, split_k=4), Problem(1, 4096, 4096, "float16")),
    "sk2-c2-tail": (_c(128, 128, 64, 4, 2, True, split_k=2), Problem(1000, 1000, 1024, "float16")),
    # Splits past powers of two: a 7-CTA cluster (K = 3584: 28 k-tiles of 128) and a serial
    # split over 16 CTAs (no cluster past the portable 8).
    "sk7-cluster-swap-m8": (_c(64, 8, 128, 4, 1, True, swap_ab=True, split_k=7), Problem(8, 1024, 3584, "bfloat16")),
    "serial-sk16-swap-m16": (
        _c(64, 16, 64, 4, 1, True, swap_ab=True, split_k=16, split_k_reduce="serial"),
        Problem(16, 512, 8192, "float16"),
    ),
    # Serial split-K: a global workspace and per-tile semaphores instead of a cluster.
    "serial-sk4-swap-m16": (
        _c(64, 16, 128, 8, 1, True, swap_ab=True, split_k=4, split_k_reduce="serial"),
        Problem(16, 4096, 4096, "float16"),
    ),
    "serial-sk2-c2-mono-tail": (
        _c(128, 64, 64, 4, 2, False, split_k=2, split_k_reduce="serial"),
        Problem(100, 200, 4096, "bfloat16"),
    ),
    # split_k_scope "tail": the whole waves' tiles over the whole K, the last wave's split and
    # reduced in turn (154 tiles: 132 + 22 x 3 CTAs; swapped, 423 tiles: 396 + 27 x 4).
    "serial-tail-sk3-c2": (
        _c(128, 128, 64, 4, 2, True, split_k=3, split_k_reduce="serial", split_k_scope="tail"),
        Problem(1700, 1300, 1152, "float16"),
    ),
    "serial-tail-sk4-swap": (
        _c(64, 48, 128, 4, 1, True, swap_ab=True, split_k=4, split_k_reduce="serial", split_k_scope="tail"),
        Problem(100, 9000, 2048, "bfloat16"),
    ),
    # 18 k-tiles over 4 CTAs: shares of 4, 5, 4, 5 k-tiles, counted at run time.
    "serial-tail-sk4-uneven": (
        _c(128, 128, 64, 4, 2, True, split_k=4, split_k_reduce="serial", split_k_scope="tail"),
        Problem(1700, 1300, 1152, "bfloat16"),
    ),
    "narrow-n24-persist-pingpong-swap-tail": (
        _c(64, 24, 64, 4, 2, True, persistent=True, raster_group=8, schedule="pingpong", swap_ab=True),
        Problem(33, 4095, 136, "bfloat16"),
    ),
    # The TMA loads' L2 options (eviction priority per operand, 256-byte promotion, descriptor
    # prefetch, stores' prefetch included) and four swizzle atoms a stage (blk_k 256).
    "l2-hints-swap-sk2-m16": (
        _c(64, 16, 128, 8, 1, True, swap_ab=True, split_k=2, l2_hint="first/last", l2_promotion="256B",
           prefetch_tensormap=True),
        Problem(16, 4096, 4096, "float16"),
    ),
    "k256-swap-sk2-tail": (
        _c(64, 16, 256, 4, 1, True, swap_ab=True, split_k=2, l2_hint="first/none"), Problem(13, 4095, 1000, "bfloat16")
    ),
    "l2-hints-cluster4n-multicast": (
        _c(128, 32, 64, 4, 2, True, persistent=True, cluster=4, cluster_dim="n", l2_hint="last/first"),
        Problem(100, 1024, 200, "float16"),
    ),
    "pftm-p256-chunked-tail": (
        _c(128, 128, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked", l2_promotion="256B",
           prefetch_tensormap=True),
        Problem(777, 336, 136, "float16"),
    ),
    # Ragged widths (off the 64-wide store box): chunked TMA stores whose last box is narrower,
    # 24 wide (16 + 8 columns: an x4 and an x2 stmatrix) and 40 wide through the epilogue warpgroup.
    "ragged-n152-chunked-box24": (
        _c(128, 152, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked"),
        Problem(3000, 5000, 2000, "float16"),
    ),
    # cuBLAS's tile at 3000x5000x2000 (profiles/2026-12-01-gemm-ragged.md): two consumers of 128 rows, 152
    # accumulators a thread, chunked stores with a 24-wide last box; no spill.
    "ragged-m256-n152-chunked": (
        _c(256, 152, 64, 3, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked"),
        Problem(3000, 5000, 2000, "float16"),
    ),
    "ragged-n168-chunked-box40-ewg-bf16": (
        _c(128, 168, 64, 3, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked",
           epilogue_warpgroup=True),
        Problem(777, 1000, 136, "bfloat16"),
    ),
    # trim: the MMAs past a ragged problem's edges skipped: a dead m64 block (the last tile row
    # holds 56 of 128 rows), the last column's narrower wgmma (8 / 40 wide), the last k-tile's
    # steps past K (1 of 4 kept); chunked TMA stores, and swapped 64-row ping-pong tiles.
    "trim-n192-chunked-bf16": (
        _c(128, 192, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked", trim=True),
        Problem(3000, 5000, 2000, "bfloat16"),
    ),
    "trim-pingpong-swap": (
        _c(64, 64, 64, 4, 2, True, persistent=True, raster_group=8, schedule="pingpong", swap_ab=True, trim=True),
        Problem(100, 4095, 200, "float16"),
    ),
    # peel_k: the last k-tile (16 of 64 columns live) after the loop, one k16 step.
    "peel-k2000-n152-chunked": (
        _c(128, 152, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked", reg_split="240/24",
           peel_k=True),
        Problem(3000, 5000, 2000, "float16"),
    ),
    # k_rotate: the decode tile's k loop from its own k-tile on; with a split (each
    # CTA's half of K rotated within it) over a K tail the rotation moves into the loop.
    "krot-decode": (
        _c(64, 16, 128, 8, 1, True, swap_ab=True, l2_hint="first/none", k_rotate=True),
        Problem(16, 4096, 4096, "float16"),
    ),
    "krot-swap-sk2-tail-bf16": (
        _c(64, 16, 128, 4, 1, True, swap_ab=True, split_k=2, l2_hint="first/none", k_rotate=True),
        Problem(13, 4095, 1000, "bfloat16"),
    ),
    # stream_k: every persistent CTA an equal share of all the tiles' k-tiles; chunked TMA stores
    # over 240 tiles of 128x256 (1.82 rounds), and register stores over 154 ragged tiles of
    # 128x128 with 18 k-tiles (shares of 21, so most tiles are split between two CTAs).
    "streamk-chunked-bf16": (
        _c(128, 256, 64, 4, 2, True, persistent=True, raster_group=16, epilogue="tma_chunked", reg_split="240/24",
           stream_k=True),
        Problem(2502, 3072, 3072, "bfloat16"),
    ),
    "streamk-register-tail": (
        _c(128, 128, 64, 4, 2, True, persistent=True, raster_group=8, stream_k=True),
        Problem(1700, 1300, 1152, "float16"),
    ),
    # stream_k_scope "tail": 516 tiles of 128x128 (3.9 rounds), the first two rounds data-parallel,
    # the last 252 tiles shared out; and 154 tiles (1.17 rounds), where nothing runs before.
    "streamk-scope-tail-chunked-bf16": (
        _c(128, 128, 64, 5, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked", reg_split="240/24",
           stream_k=True, stream_k_scope="tail"),
        Problem(273, 22016, 4096, "bfloat16"),
    ),
}
# Chunked TMA-store kernels whose last box is narrower than 64 (blk_n off the box).
TAIL_CASES = sorted(n for n, (c, _) in CASES.items() if c.epilogue == "tma_chunked" and c.blk_n % 64)
# Kernels a split-K cluster reduces through distributed shared memory, and serial split-K kernels.
SPLIT_K_CASES = sorted(n for n, (c, _) in CASES.items() if c.split_k > 1 and c.split_k_reduce == "dsmem")
SERIAL_CASES = sorted(n for n, (c, _) in CASES.items() if c.split_k > 1 and c.split_k_reduce == "serial")
SPLIT_TAIL_CASES = sorted(n for n, (c, _) in CASES.items() if c.split_k_scope == "tail")
TRIM_CASES = sorted(n for n, (c, _) in CASES.items() if c.trim)
STREAM_CASES = sorted(n for n, (c, _) in CASES.items() if c.stream_k)
# peel_k, lowered only: two m64 blocks a consumer and 128-deep k-tiles with 7 of 8 steps live,
# one k-tile in all (the loop runs none), ping-pong, the prefetching consumer without a producer,
# a cluster, swap-AB.
PEEL_LOWERED = {
    "two-blocks-k128": (_c(128, 128, 128, 3, 1, True, peel_k=True), Problem(700, 900, 1000, "bfloat16")),
    "one-k-tile": (_c(128, 152, 64, 4, 2, True, persistent=True, epilogue="tma_chunked", peel_k=True),
                   Problem(1000, 1000, 8, "float16")),
    "pingpong": (_c(128, 128, 64, 6, 2, True, persistent=True, raster_group=16, epilogue="tma_chunked",
                    schedule="pingpong", peel_k=True), Problem(2000, 2000, 2000, "float16")),
    "mono": (_c(128, 128, 64, 4, 2, False, peel_k=True), Problem(1000, 512, 1000, "float16")),
    "cluster": (_c(128, 256, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked", cluster=2,
                   prefetch_tensormap=True, peel_k=True), Problem(4000, 4000, 4000, "bfloat16")),
    "swap": (_c(64, 16, 128, 8, 1, True, swap_ab=True, l2_hint="first/none", peel_k=True),
             Problem(16, 4096, 4000, "bfloat16")),
}


@dataclass(frozen=True)
class Built:
    config: Config
    problem: Problem
    source: str
    nvcc_output: str
    sass: str


def test_plan_derives_the_launch_shape() -> None:
    p = plan(_c(256, 128, 64, 3, 2, True), Problem(1000, 1000, 1000))
    assert (p.rows, p.m_blocks, p.k_tiles, p.grid, p.threads) == (128, 2, 16, (4, 8), 384)
    assert p.stage_bytes == (256 + 128) * 64 * 2
    assert plan(_c(64, 64, 64, 2, 1, False), Problem(64, 64, 8)).threads == 128
    assert "bf16.bf16" in plan(_c(64, 64, 64, 2, 1, False), Problem(64, 64, 64, "bf16")).wgmma_name
    persistent = plan(_c(128, 256, 64, 3, 2, True, persistent=True, raster_group=8), Problem(4096, 4096, 4096))
    assert (persistent.tiles, persistent.ctas, persistent.tiles_per_cta) == (512, 132, 4)
    small = plan(_c(128, 128, 64, 3, 2, True, persistent=True), Problem(1000, 1000, 1000))
    assert (small.tiles, small.ctas, small.tiles_per_cta) == (64, 64, 1)
    assert plan(_c(256, 128, 64, 3, 2, True, epilogue="tma"), Problem(4096, 4096, 4096)).store_boxes == (4, 2)
    pingpong = plan(
        _c(64, 256, 64, 4, 2, True, persistent=True, epilogue="tma", schedule="pingpong"), Problem(4096, 4096, 4096)
    )
    assert (pingpong.rows, pingpong.row_base, pingpong.releasers, pingpong.store_boxes) == (64, 0, 1, (2, 4))
    assert (pingpong.tiles, pingpong.tiles_per_cta) == (1024, 8)
    pair = plan(
        _c(128, 256, 64, 4, 2, True, persistent=True, epilogue="tma_chunked", cluster=2), Problem(4096, 4096, 4096)
    )
    assert (pair.ctas, pair.clusters, pair.cluster_grid, pair.tiles_per_cta) == (132, 66, (16, 16), 4)
    assert (pair.releasers, pair.multicast_rows, pair.staging_boxes) == (4, 128, 4)
    quad = plan(_c(128, 128, 64, 4, 2, True, persistent=True, cluster=4, cluster_dim="n"), Problem(1000, 1024, 200))
    assert (quad.ctas, quad.cluster_grid, quad.multicast_rows) == (64, (8, 2), 32)
    split = plan(_c(128, 256, 64, 4, 2, True, reg_split="240/24"), Problem(4096, 4096, 4096))
    assert (split.consumer_regs, split.producer_regs) == (240, 24)
    # hopper-gemm/5: the swapped kernel's M is the problem's N; a split-K cluster of 2 CTAs per
    # tile multiplies half the k-tiles each; a one-row operand's stage carries one row.
    decode = plan(_c(64, 16, 128, 8, 1, True, swap_ab=True, split_k=2), Problem(16, 4096, 4096))
    assert (decode.m, decode.n, decode.problem_shape, decode.grid) == (4096, 16, (16, 4096), (64, 1))
    assert (decode.k_tiles, decode.cta_k_tiles, decode.tiles, decode.ctas) == (32, 16, 64, 128)
    assert (decode.reduce_regs, decode.stage_bytes) == (8, (64 + 16) * 128 * 2)
    gemv = plan(_c(64, 8, 128, 8, 1, True, swap_ab=True), Problem(1, 4096, 4096))
    assert (gemv.one_row_a, gemv.one_row_b, gemv.stage_bytes) == (False, True, (64 + 1) * 128 * 2)
    assert plan(_c(64, 64, 64, 4, 1, True), Problem(1, 4096, 4096)).stage_bytes == (1 + 64) * 64 * 2
    # Four atoms a stage; the L2 options become the loads' keyword arguments (none at the defaults).
    deep = plan(_c(64, 16, 256, 5, 1, True, swap_ab=True, split_k=2, l2_hint="first/none"), Problem(16, 4096, 4096))
    assert (deep.atoms, deep.k_tiles, deep.cta_k_tiles, deep.stage_bytes) == (4, 16, 8, (64 + 16) * 256 * 2)
    assert deep.load_options("a") == {"cache_hint": "evict_first"} and deep.load_options("b") == {}
    tuned = plan(_c(128, 64, 64, 4, 2, True, l2_hint="last/first", l2_promotion="256B", prefetch_tensormap=True),
                 Problem(128, 4096, 4096))
    assert tuned.load_options("a") == {"cache_hint": "evict_last", "tensormap_l2_promotion": "L2::256B",
                                       "prefetch_tensormap": True}
    assert tuned.load_options("b")["cache_hint"] == "evict_first"
    assert tuned.store_options() == {"prefetch_tensormap": True}
    assert plan(_c(128, 64, 64, 4, 2, True), Problem(128, 4096, 4096)).store_options() == {}


@pytest.mark.parametrize(
    "config, problem",
    [
        (_c(128, 256, 64, 4, 2, True, epilogue="tma"), Problem(4096, 4096, 4096)),  # staging tile: smem
        (_c(128, 128, 64, 3, 2, True, epilogue="tma"), Problem(1000, 1001, 64)),  # TMA store: N*2 % 16
        (_c(128, 256, 64, 5, 2, True, epilogue="tma_chunked"), Problem(4096, 4096, 4096)),  # 5 stages + chunks
        (_c(128, 128, 64, 4, 2, True, persistent=True, cluster=2), Problem(1100, 4096, 4096)),  # 9 tile rows
        (_c(128, 128, 64, 4, 2, True, schedule="pingpong"), Problem(4096, 4096, 4096)),  # not persistent
        (_c(128, 128, 64, 2, 1, False, loader="threads"), Problem(4096, 4096, 4096)),  # threads need 1 stage
        (_c(128, 256, 64, 4, 1, False), Problem(4096, 4096, 4096)),  # 256 accumulators a thread
        (_c(64, 64, 64, 4, 2, True), Problem(4096, 4096, 4096)),  # 32 rows per consumer
        (_c(256, 256, 128, 4, 2, True), Problem(4096, 4096, 4096)),  # shared memory
        (_c(64, 64, 64, 2, 1, False), Problem(64, 64, 12)),  # K*2 B not a multiple of 16
        (_c(64, 16, 64, 4, 1, True, swap_ab=True, epilogue="tma"), Problem(16, 4096, 4096)),  # swap: registers
        (_c(128, 128, 64, 4, 2, True, persistent=True, split_k=2), Problem(1024, 1024, 1024)),  # split: 1 tile
        (_c(128, 128, 64, 4, 2, True, split_k=8), Problem(1024, 1024, 200)),  # 4 k-tiles over 8 CTAs
        (_c(128, 128, 64, 4, 2, True, persistent=True, cluster=2, cluster_dim="n"), Problem(1, 4096, 4096)),  # M=1
        # split_k_scope "tail": the serial reduction only; a whole wave before the tail; the tail's
        # CTAs in one wave (124 tiles x 2); a producer
        (_c(128, 128, 64, 4, 2, True, split_k=3, split_k_scope="tail"), Problem(1700, 1300, 1152)),
        (_c(128, 128, 64, 4, 2, True, split_k=3, split_k_reduce="serial", split_k_scope="tail"),
         Problem(1000, 1000, 1152)),
        (_c(128, 128, 64, 4, 2, True, split_k=2, split_k_reduce="serial", split_k_scope="tail"),
         Problem(2048, 2048, 1024)),
        (_c(128, 128, 64, 4, 2, False, split_k=3, split_k_reduce="serial", split_k_scope="tail"),
         Problem(1700, 1300, 1152)),
        # a tail tile's CTAs need a k-tile each (2 k-tiles over 3)
        (_c(128, 128, 64, 4, 2, True, split_k=3, split_k_reduce="serial", split_k_scope="tail"),
         Problem(1700, 1300, 128)),
    ],
)
def test_invalid_pairs_are_refused_with_the_rule(config: Config, problem: Problem) -> None:
    with pytest.raises(SpaceError, match="cannot build"):
        build(config, problem)


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowers_to_cuda(name: str) -> None:
    config, problem = CASES[name]
    source = toolchain.lower_to_cuda(config, problem)
    p = plan(config, problem)
    assert f"__launch_bounds__({p.threads})" in source
    # The kernel takes tensor maps for the operands TMA moves.
    assert ("CUtensorMap A_tensormap" in source) == (config.loader == "tma")
    assert ("CUtensorMap D_tensormap" in source) == (config.epilogue != "register")
    assert source.count("wgmma_fence") >= 1
    assert ("setmaxnreg" in source) == p.rebalances_registers
    if p.rebalances_registers:
        assert f"setmaxnreg.inc.sync.aligned.u32 {p.consumer_regs};" in source
        assert f"setmaxnreg.dec.sync.aligned.u32 {p.producer_regs};" in source
    assert ("stmatrix" in source) == (config.epilogue != "register")
    assert ("multicast::cluster" in source) == (config.cluster > 1)
    # A cluster launch: multicast clusters, or split-K clusters (which multicast nothing).
    dsmem = config.split_k > 1 and config.split_k_reduce == "dsmem"
    assert ("clusterDim" in source) == (config.cluster > 1 or dsmem)
    assert ("ld.shared::cluster" in source) == dsmem
    assert ("tirtune_splitk_serial" in source) == (
        config.split_k > 1 and config.split_k_reduce == "serial" or config.stream_k
    )
    # The TMA loads' L2 options: absent at their defaults (those kernels are byte-identical to before).
    assert ("L2::cache_hint" in source) == (config.l2_hint != "none/none")
    assert ("prefetch.tensormap" in source) == config.prefetch_tensormap
    assert ("static_cast<CUtensorMapL2promotion>(3)" in source) == (config.l2_promotion == "256B")


@pytest.mark.parametrize("name", SPLIT_TAIL_CASES)
def test_a_tail_split_runs_the_whole_waves_then_splits_the_last(name: str) -> None:
    """split_k_scope "tail": a 1-D grid of the whole waves' tiles (one CTA each) and the last
    wave's tiles' split_k CTAs each; workspace slots and semaphores for the tail tiles alone; the
    whole waves' CTAs store from registers, the tail's take turns."""
    from tirtune.builder.device_build import lower_device

    config, problem = CASES[name]
    p = plan(config, problem)
    assert p.dp_tiles % rules.SMS == 0 and p.dp_tiles > 0
    assert 0 < p.split_tiles < rules.SMS and p.split_tiles * config.split_k <= rules.SMS
    assert p.ctas == p.dp_tiles + p.split_tiles * config.split_k
    source, spec = lower_device(config, problem)
    assert spec.grid == (p.ctas, 1, 1) and spec.cluster == (1, 1, 1)
    assert f"static float ws[{p.split_tiles * config.blk_m * config.blk_n}];" in source
    assert f"static int sem[{p.split_tiles}];" in source
    assert f"((int)blockIdx.x) < {p.dp_tiles})" in source
    # A whole wave's tile multiplies every k-tile; a tail CTA its share, a constant when split_k
    # divides the k-tiles, else counted from its rank at run time (18 over 4: 4, 5, 4, 5).
    assert f"condval = {p.k_tiles};" in source
    uneven = re.search(r"condval = \(.*blockIdx\.x.*\);", source)
    if p.k_tiles % config.split_k == 0:
        assert f"condval = {p.cta_k_tiles};" in source and uneven is None
        # The same config with every tile split launches split_k CTAs a tile.
        everywhere = plan(config.replace(split_k_scope="all"), problem)
        assert everywhere.ctas == p.tiles * config.split_k and everywhere.split_tiles == p.tiles
    else:
        assert uneven is not None


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        *(CASES[n] for n in STREAM_CASES),
        (_c(64, 64, 64, 4, 1, True, persistent=True, stream_k=True), Problem(1000, 1000, 4000, "float16")),
        (_c(128, 128, 64, 4, 2, True, persistent=True, stream_k=True), Problem(1408, 1536, 2048, "float16")),
        (_c(256, 128, 64, 3, 2, True, persistent=True, stream_k=True), Problem(4000, 4000, 200, "bfloat16")),
        (_c(64, 64, 64, 4, 1, True, persistent=True, stream_k=True, stream_k_scope="tail"),
         Problem(1000, 1000, 4000, "float16")),
        (_c(128, 128, 64, 4, 2, True, persistent=True, stream_k=True, stream_k_scope="tail"),
         Problem(1700, 1300, 1152, "float16")),
        (_c(128, 128, 64, 4, 2, True, persistent=True, stream_k=True, stream_k_scope="tail"),
         Problem(4096, 4096, 640, "float16")),
    ],
)
def test_stream_k_shares_cover_every_k_tile_once_and_at_most_two_ctas_share_a_tile(
    config: Config, problem: Problem
) -> None:
    """plan.stream_pieces, the walk the kernel's producer and consumers make: every k-tile of
    every tile in exactly one CTA's share; a tile whole in one CTA, or split between CTAs c and
    c + 1, its first k-tiles the last piece of c (which finishes it) and the rest the first piece
    of c + 1 (which hands them over as its share begins); no CTA walks more than stream_units
    pieces. 1408x1536 in 128x128 tiles: 132 tiles, one each, nothing split. With stream_k_scope
    "tail", every whole round but the last first, tile r * 132 + c whole in CTA c in round r
    (4096x4096 in 128x128: 1024 tiles, 6 rounds data-parallel, 232 tiles shared)."""
    p = plan(config, problem)
    ctas = p.tile_schedule.ctas
    assert ctas == rules.SMS <= p.tiles
    rounds = p.stream_rounds
    assert rounds == (max(p.tiles // ctas - 1, 0) if config.stream_k_scope == "tail" else 0)
    assert ctas <= p.tiles - rounds * ctas < 2 * ctas or config.stream_k_scope == "all"
    seen: dict[int, list[tuple[int, int, int, int]]] = {}
    for cta in range(ctas):
        pieces = p.stream_pieces(cta)
        assert rounds + 1 <= len(pieces) <= p.stream_units
        assert pieces[:rounds] == [(r * ctas + cta, 0, p.k_tiles) for r in range(rounds)]
        g0, g1 = p.stream_span(cta)
        assert sum(ke - kb for _, kb, ke in pieces) == rounds * p.k_tiles + g1 - g0
        for i, (t, kb, ke) in enumerate(pieces):
            assert 0 <= kb < ke <= p.k_tiles
            seen.setdefault(t, []).append((cta, i, kb, ke))
            if kb > 0:
                assert i == rounds  # only a share's first piece starts mid-tile
            if ke < p.k_tiles:
                assert i == len(pieces) - 1  # only its last ends mid-tile
    assert sorted(seen) == list(range(p.tiles))
    for parts in seen.values():
        parts.sort(key=lambda x: x[2])
        assert [(kb, ke) for *_, kb, ke in parts][0][0] == 0 and parts[-1][3] == p.k_tiles
        assert all(a[3] == b[2] for a, b in zip(parts, parts[1:], strict=False)), "gaps or overlaps"
        assert len(parts) <= 2
        if len(parts) == 2:
            (owner, _, _, _), (helper, first, _, _) = parts
            assert helper == owner + 1 and first == rounds
    if p.tiles == rules.SMS:
        assert all(len(parts) == 1 for parts in seen.values())


@pytest.mark.parametrize("name", STREAM_CASES)
def test_a_stream_k_kernel_launches_one_cta_an_sm_with_a_workspace_slot_each(name: str) -> None:
    """stream_k lowers to a persistent 1-D grid of one CTA an SM, the serial split's helper with
    an fp32 tile slot and a semaphore per CTA, and the acquiring wait and releasing signal."""
    from tirtune.builder.device_build import lower_device

    config, problem = CASES[name]
    source, spec = lower_device(config, problem)
    assert spec.grid == (rules.SMS, 1, 1) and spec.cluster == (1, 1, 1)
    assert f"static float ws[{rules.SMS * config.blk_m * config.blk_n}];" in source
    assert f"static int sem[{rules.SMS}];" in source
    assert "ld.acquire.gpu.global.b32" in source and "st.release.gpu.global.b32" in source
    # The same config without stream_k walks whole tiles: no workspace.
    assert "static float ws[" not in lower_device(config.replace(stream_k=False, stream_k_scope="all"), problem)[0]


def test_lowering_failure_carries_the_cause() -> None:
    def broken(config: Config, problem: Problem) -> object:
        raise RuntimeError("template exploded at trace time")

    with pytest.raises(toolchain.LoweringError, match="template exploded"):
        toolchain.lower_to_cuda(*CASES["simplest-tail"], template=broken)


@pytest.mark.nvcc
def test_nvcc_error_carries_the_compiler_message(tmp_path: Path) -> None:
    cu = tmp_path / "bad.cu"
    cu.write_text("this is not C++;\n")
    with pytest.raises(toolchain.NvccError, match="error"):
        toolchain.nvcc_shared_library(cu, tmp_path / "bad.so", timeout_s=120, cache_dir=tmp_path)


def _compile(name: str, root: Path) -> Built:
    config, problem = CASES[name]
    out = root / name
    out.mkdir()
    source = toolchain.lower_to_cuda(config, problem)
    (out / "kernel.cu").write_text(source)
    output = toolchain.nvcc_shared_library(out / "kernel.cu", out / "kernel.so", timeout_s=600, cache_dir=root)
    return Built(config, problem, source, output, toolchain.sass(out / "kernel.so"))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    root = tmp_path_factory.mktemp("template-build")
    with ThreadPoolExecutor(2) as pool:  # nvcc is single-threaded; 2 cores in CI
        return dict(zip(sorted(CASES), pool.map(lambda n: _compile(n, root), sorted(CASES)), strict=True))


def _count(sass: str, opcode: str) -> int:
    return len(re.findall(rf"\b{opcode}\b", sass))


@pytest.mark.nvcc
@pytest.mark.parametrize("name", sorted(CASES))
def test_sass_uses_wgmma_and_tma_without_spills(built: dict[str, Built], name: str) -> None:
    b = built[name]
    p = plan(b.config, b.problem)
    elem = "BF16" if b.problem.dtype == "bfloat16" else "F16"
    hgmma = re.findall(rf"HGMMA\.64x{b.config.blk_n}x16\.F32(?:\.{elem})?\b", b.sass)
    # One HGMMA per k16 step and m64 block, in the main loop at least.
    assert len(hgmma) >= (b.config.blk_k // 16) * p.m_blocks, b.sass[:2000]
    if elem == "BF16":
        assert all(".BF16" in h for h in hgmma)
    loads = re.findall(r"\bUTMALDG\.[12]D(\.MULTICAST)?\b", b.sass)
    if b.config.loader == "threads":
        assert not loads and _count(b.sass, "LDG") > 0 and _count(b.sass, "STS") > 0
    else:
        assert len(loads) >= 2 * (b.config.blk_k // 64)
    # A cluster multicasts the operand its CTAs share (one load of the pair is local).
    assert any(loads) == (b.config.cluster > 1)
    # A one-row operand (M = 1) is one row a stage: a 1-D tensor map.
    assert bool(re.search(r"\bUTMALDG\.1D\b", b.sass)) == (b.problem.m == 1 or b.problem.n == 1)
    assert _count(b.sass, "STL") == 0 and _count(b.sass, "LDL") == 0
    resources = toolchain.ptxas_resources(b.nvcc_output)
    assert resources is not None and not resources.spills, b.nvcc_output[-2000:]
    assert resources.registers * p.threads <= 65536
    # The producer gives registers back and the consumers take them (two consumers only).
    assert (_count(b.sass, "USETMAXREG") >= 2) == p.rebalances_registers
    assert "setmaxnreg' ignored" not in b.nvcc_output


@pytest.mark.nvcc
@pytest.mark.parametrize(
    "name",
    [
        "persist-g8-tma-n256",
        "pingpong-chunked-r240",
        "pingpong-2mblk-tma-tail",
        "cluster2m-chunked",
        "swap-chunked-n216",
        "swap-chunked-ewg-n104",
    ],
)
def test_sass_of_the_tma_store_epilogues(built: dict[str, Built], name: str) -> None:
    sass = built[name].sass
    assert _count(sass, "STSM") >= 1 and _count(sass, "UTMASTG") >= 1
    assert _count(sass, "STG") == 0  # no register stores left: everything leaves through TMA


def test_the_swapped_tma_store_transposes_each_box() -> None:
    """Swapped, each box leaves through stmatrix .trans (216 = 3 x 64 + 24: the 24-row last box
    takes an x4 and an x2), the kernel's rows as D's columns; unswapped, the same store does not
    transpose."""
    config, problem = CASES["swap-chunked-n216"]
    source = toolchain.lower_to_cuda(config, problem)
    assert "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in source
    assert "stmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in source
    assert "stmatrix.sync.aligned.m8n8.x4.shared.b16" not in source
    plain = toolchain.lower_to_cuda(config.replace(swap_ab=False), problem)
    assert ".trans" not in plain and "stmatrix.sync.aligned.m8n8.x4.shared.b16" in plain


@pytest.mark.nvcc
def test_sass_of_the_swapped_tma_store(built: dict[str, Built]) -> None:
    """One TMA store per box of each consumer's m64 block: three 64-row boxes and the last."""
    assert _count(built["swap-chunked-n216"].sass, "UTMASTG") == 4


@pytest.mark.nvcc
def test_sass_of_the_register_epilogue(built: dict[str, Built]) -> None:
    for name in ("ws-c2-n256", "cluster4n-tail", "mono-persist-threads"):
        assert _count(built[name].sass, "UTMASTG") == 0 and _count(built[name].sass, "STG") > 0


@pytest.mark.nvcc
@pytest.mark.parametrize("name", SPLIT_K_CASES)
def test_sass_of_the_split_k_reduction(built: dict[str, Built], name: str) -> None:
    """The split-K cluster: launched with a cluster of split_k CTAs, two cluster barriers around
    the reduction, and the peers' fragments read through distributed shared memory (mapa shows
    as the shared window's base, SR_SWINHI, and the CTA rank PRMT-ed into the address; the
    reads are generic LD.E of that window: the kernel has no other generic loads)."""
    b = built[name]
    assert "clusterDim.x = " in b.source and "tvm_builtin_cluster_ctaid_x" in b.source
    assert "mapa.shared::cluster.u32" in b.source and "ld.shared::cluster.f32" in b.source
    # The first barrier publishes the parked fragments (release: MEMBAR before UCGABAR_ARV); the
    # last only keeps shared memory alive for the peers' loads (relaxed: no fence).
    assert "barrier.cluster.arrive.relaxed.aligned" in b.source
    arrives = [i for i, line in enumerate(b.sass.splitlines()) if "UCGABAR_ARV" in line]
    lines = b.sass.splitlines()
    assert any("MEMBAR" in lines[i - k] for k in range(1, 8) for i in arrives[:1])
    assert not any("MEMBAR" in lines[arrives[-1] - k] for k in range(1, 8))
    assert _count(b.sass, "UCGABAR_ARV") >= 2 and _count(b.sass, "UCGABAR_WAIT") >= 2
    assert "SR_SWINHI" in b.sass and "SR_CgaCtaId" in b.sass
    p = plan(b.config, b.problem)
    # Each consumer thread sums its share of register pairs over split_k CTAs: two loads a pair
    # and CTA, unrolled.
    pairs = -(-p.reduce_regs // 2 // b.config.split_k)
    assert len(re.findall(r"\bLD\.E\b", b.sass)) >= 2 * b.config.split_k * pairs
    assert p.ctas == p.tiles * b.config.split_k


@pytest.mark.nvcc
@pytest.mark.parametrize("name", SERIAL_CASES)
def test_sass_of_the_serial_split_k(built: dict[str, Built], name: str) -> None:
    """Serial split-K: no cluster; the turn is taken with an acquiring load and passed with a
    releasing store of the tile's semaphore, the partial tile goes through L2 (ld/st.global.cg:
    LDG/STG.E.STRONG.GPU, whole fragments), the consumers meet at named barrier 5, and the
    writer fences before passing the turn."""
    b = built[name]
    p = plan(b.config, b.problem)
    assert "clusterDim" not in b.source and _count(b.sass, "UCGABAR_ARV") == 0
    assert "ld.acquire.gpu.global.b32" in b.source and "st.release.gpu.global.b32" in b.source
    regs = p.reduce_regs
    assert len(re.findall(r"\bLDG\.E\.STRONG\.GPU\b", b.sass)) >= regs + 1  # the partial + the spin
    assert len(re.findall(r"\bSTG\.E\.STRONG\.GPU\b", b.sass)) >= regs + 2  # the partial, pass, reset
    assert re.search(r"\bBAR\.SYNC(\.DEFER_BLOCKING)? 0x5, ", b.sass), "named barrier 5 over the consumers"
    assert _count(b.sass, "MEMBAR") >= 1


@pytest.mark.nvcc
@pytest.mark.parametrize("name", STREAM_CASES)
def test_sass_of_stream_k(built: dict[str, Built], name: str) -> None:
    """stream_k: the partial tile handed over and taken through L2 (LDG/STG.E.STRONG.GPU, a whole
    fragment each way), the semaphore's spin and signals, the consumers meeting at named barrier
    5, a fence before the signal; and the tile's own stores as its epilogue asks (TMA or STG)."""
    b = built[name]
    regs = plan(b.config, b.problem).reduce_regs
    assert len(re.findall(r"\bLDG\.E\.STRONG\.GPU\b", b.sass)) >= regs + 1
    assert len(re.findall(r"\bSTG\.E\.STRONG\.GPU\b", b.sass)) >= regs + 2
    assert re.search(r"\bBAR\.SYNC(\.DEFER_BLOCKING)? 0x5, ", b.sass), "named barrier 5 over the consumers"
    assert _count(b.sass, "MEMBAR") >= 1
    if b.config.epilogue == "tma_chunked":
        assert _count(b.sass, "UTMASTG") >= 1
    else:
        assert _count(b.sass, "UTMASTG") == 0


@pytest.mark.nvcc
@pytest.mark.parametrize("name", sorted(n for n, (c, _) in CASES.items() if c.swap_ab and c.epilogue == "register"))
def test_sass_of_the_swapped_epilogue(built: dict[str, Built], name: str) -> None:
    """swap_ab's register epilogue stores the transposed fragment one 16-bit element at a time
    (the serial split-K's workspace and semaphore stores are the strong, L2-scoped ones); its
    chunked TMA store is `test_sass_of_the_tma_store_epilogues`'s."""
    sass = built[name].sass
    assert _count(sass, "UTMASTG") == 0
    stores = [s for s in re.findall(r"\bSTG\.E[.\w]*", sass) if ".STRONG." not in s]
    assert stores and set(stores) == {"STG.E.U16"}, "every store of the transposed fragment is a 2-byte STG.E.U16"


# The cache-policy words TVM encodes for the loads' L2::cache_hint (createpolicy, fraction 1.0):
# in SASS the policy's high half is moved into the uniform register pair UTMALDG reads as desc[URx].
POLICY_HIGH = {"first": "0x12f00000", "last": "0x14f00000"}


@pytest.mark.nvcc
@pytest.mark.parametrize("name", sorted(CASES))
def test_sass_of_the_tma_load_options(built: dict[str, Built], name: str) -> None:
    """A hinted operand's loads carry a cache policy (UTMALDG ..., desc[URx]) whose high word is
    evict_first's or evict_last's; unhinted loads carry none. The descriptor prefetch is one
    UTMACCTL.PF per tensor map the kernel uses (load and store maps)."""
    b = built[name]
    p = plan(b.config, b.problem)
    lines = b.sass.splitlines()
    loads = [line for line in lines if re.search(r"\bUTMALDG\.", line)]
    with_policy = [line for line in loads if re.search(r"desc\[UR\d+\]", line)]
    policies = {p.l2_hint_a, p.l2_hint_b} - {"none"}
    if not policies:
        assert not with_policy, "an unhinted kernel's loads carry no cache policy"
    elif "none" not in (p.l2_hint_a, p.l2_hint_b):
        assert loads and with_policy == loads, "both operands hinted: every load carries a policy"
    else:
        assert 0 < len(with_policy) < len(loads), "one operand hinted: its loads only"
    for policy in ("first", "last"):
        assert (POLICY_HIGH[policy] in b.sass) == (policy in policies), policy
    signature = next(line for line in b.source.splitlines() if "__global__" in line)
    maps = len(re.findall(r"CUtensorMap \w+", signature))
    prefetches = _count(b.sass, "UTMACCTL.PF")
    assert prefetches == (maps if b.config.prefetch_tensormap else 0), (prefetches, maps)


@pytest.mark.parametrize("name", TAIL_CASES)
def test_a_ragged_width_stores_its_last_box_through_a_narrower_unswizzled_map(name: str) -> None:
    """blk_n = 64q + t: q full 64x64 boxes through the swizzled map, then a t-wide box through a
    second map of box {t, 64}, no swizzle (its staging buffer is plain row-major: rows 2t bytes
    apart), staged by x4 stmatrix per 16 columns and an x2 for a last 8. Swapped, the last box is
    D's last t rows: a map of box {64, t}, 128B-swizzled like the full boxes."""
    config, problem = CASES[name]
    tail = config.blk_n % 64
    source = toolchain.lower_to_cuda(config, problem)
    assert "CUtensorMap D_tensormap_1" in source
    encodes = re.findall(r"cuTensorMapEncodeTiled\(.*?\);", source)
    # A, B (a map for each rank's slice where a cluster's multicast slices are uneven), then the
    # full boxes' map and the last box's, a pair for each m64 block a consumer owns.
    kernel = plan(config, problem)
    operands = 2 if kernel.cluster == 1 or kernel.multicast_even else 1 + kernel.cluster
    assert len(encodes) == operands + 2 * (rules.consumer_rows(config) // 64)
    boxes = re.findall(r"auto (tensormap_arg(?:_\d+)?_5) = (\d+);\n\s*auto tensormap_arg(?:_\d+)?_6 = (\d+);", source)
    box = ("64", str(tail)) if config.swap_ab else (str(tail), "64")
    assert box in [(w, h) for _, w, h in boxes], boxes
    assert ("m8n8.x2" in source) == (tail % 16 == 8)
    swizzles = re.findall(r"static_cast<CUtensorMapSwizzle>\((\d)\)", source)
    # Every other map (A, B, the full boxes) is 128B-swizzled: an unswizzled one is the last box's.
    assert ("0" in swizzles) == (not config.swap_ab) and set(swizzles) <= {"0", "3"}


@pytest.mark.nvcc
@pytest.mark.parametrize("name", TAIL_CASES)
def test_sass_of_the_narrow_last_box(built: dict[str, Built], name: str) -> None:
    sass = built[name].sass
    # Every m64 block's boxes leave through TMA (a store instruction per map in the code at least).
    assert _count(sass, "UTMASTG") >= 2 and _count(sass, "STSM") >= 1
    assert _count(sass, "STG") == 0


@pytest.mark.parametrize("name", sorted(PEEL_LOWERED))
def test_a_peeled_kernel_issues_only_the_last_k_tiles_live_steps(name: str) -> None:
    """peel_k: the consumers' loop keeps its full k-tile of wgmmas and the peeled last k-tile adds
    its live k16 steps, PEEL_K of BK/16 for every run of the loop's wgmma calls; unpeeled, the
    same config's kernel has no such tail (and with one k-tile in all, no loop)."""

    config, problem = PEEL_LOWERED[name]
    p = plan(config, problem)
    assert p.peel_k == rules.k_tail_steps(config, problem) > 0
    assert plan(config.replace(peel_k=False), problem).peel_k == 0

    def calls(source: str) -> int:
        return len(re.findall(rf"m64n{config.blk_n}k16\w*\(acc", source))

    peeled, plain = calls(toolchain.lower_to_cuda(config, problem)), calls(
        toolchain.lower_to_cuda(config.replace(peel_k=False), problem))
    steps = config.blk_k // 16
    assert plain > 0 and plain % steps == 0, plain
    # With one k-tile in all the loop runs no iteration and is gone: only the peeled steps stay.
    loop = plain if p.cta_k_tiles > 1 else 0
    assert peeled - loop == plain // steps * p.peel_k, (peeled, plain, p.peel_k)


KROT_CASES = sorted(n for n, (c, _) in CASES.items() if c.k_rotate)


@pytest.mark.parametrize("name", KROT_CASES)
def test_a_rotated_kernel_differs_only_in_its_loads_k_coordinate(name: str) -> None:
    """k_rotate: the lowered kernel takes its k-tile modulo the CTA's k-tiles where the plain one
    does not, and issues the same wgmmas and TMA loads (only the producer's k index moves)."""

    config, problem = CASES[name]
    kt = plan(config, problem).cta_k_tiles
    modulo = f"& {kt - 1})" if kt & (kt - 1) == 0 else f"% {kt})"  # the k-tile count: a power of two here

    def loads(source: str) -> list[str]:  # the TMA loads' call sites (not the helpers' definitions)
        return [line for line in source.splitlines() if "cp_async_bulk_tensor_g2s" in line and "__device__" not in line]

    rotated = loads(toolchain.lower_to_cuda(config, problem))
    plain = loads(toolchain.lower_to_cuda(config.replace(k_rotate=False), problem))
    assert len(rotated) == len(plain) > 0
    assert all(modulo in line for line in rotated) and not any(modulo in line for line in plain), modulo
    assert plan(config, problem).k_rotate and not plan(config.replace(k_rotate=False), problem).k_rotate


@pytest.mark.nvcc
@pytest.mark.parametrize("name", KROT_CASES)
def test_sass_of_a_rotated_kernel(built: dict[str, Built], name: str) -> None:
    sass = built[name].sass
    assert _count(sass, "UTMALDG") >= 2 and _count(sass, "HGMMA") >= 1
    assert _count(sass, "STL") == 0 and _count(sass, "LDL") == 0


@pytest.mark.parametrize("name", TRIM_CASES)
def test_a_trimmed_kernel_issues_no_mma_past_the_problem(name: str) -> None:
    """trim: the last column's narrower wgmma beside the full one, the m64 blocks and k16 steps
    past M and K behind uniform conditions; the same config untrimmed has neither."""

    from tirtune.space.hopper.rules import trim_work

    config, problem = CASES[name]
    narrow, steps, dead = trim_work(config, problem)
    assert narrow and steps and dead == (config.blk_m == 128)  # the 64-row tiles have no block to skip
    source = toolchain.lower_to_cuda(config, problem)
    assert f"m64n{narrow}k16" in source and f"m64n{config.blk_n}k16" in source
    plain = toolchain.lower_to_cuda(config.replace(trim=False), problem)
    assert f"m64n{narrow}k16" not in plain
    p = plan(config, problem)
    assert (p.trim_n, p.trim_k, p.trim_m) == (narrow, steps, dead)
    assert (plan(config.replace(trim=False), problem).trim_n, plan(config.replace(trim=False), problem).trim_m) == (
        0, False)


@pytest.mark.nvcc
@pytest.mark.parametrize("name", TRIM_CASES)
def test_sass_of_the_trimmed_mmas(built: dict[str, Built], name: str) -> None:
    b = built[name]
    p = plan(b.config, b.problem)
    # The accumulating HGMMAs (F32); ptxas adds F16 ones with RZ operands where it injects a
    # warpgroup.arrive (its C7519 note) around the wgmmas behind a condition.
    shapes = set(re.findall(r"HGMMA\.64x(\d+)x16\.F32", b.sass))
    assert shapes == {str(b.config.blk_n), str(p.trim_n)}, shapes
    assert _count(b.sass, "STL") == 0 and _count(b.sass, "LDL") == 0


@pytest.mark.nvcc
def test_sass_of_the_peeled_k_tile(built: dict[str, Built]) -> None:
    """The loop's body keeps its four HGMMAs a k-tile (the last with gsb0), and one more follows
    the loop, alone in its group: 16 live columns of the last k-tile, one k16 step."""
    sass = built["peel-k2000-n152-chunked"].sass
    hgmma = re.findall(r"HGMMA\.64x152x16\.F32[^;]*", sass)
    groups = " ".join("E" if "gsb0" in h else "." for h in hgmma).split("E")
    runs = [g.count(".") + 1 for g in groups[:-1]]
    assert runs[-1] == 1 and all(r == 4 for r in runs[:-1]) and len(runs) >= 2, runs
