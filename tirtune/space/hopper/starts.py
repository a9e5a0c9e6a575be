"""Where a Hopper job starts, per shape class (space/shapes.py): the configs measured best there.

The branch registry (space/branches.py) hands a job its class's list (after the configs the
tuner transfers from the nearest tuned problems, tuner/start.py). Each list holds the best
configs measured on the H200 for the class's problems, most likely first; every figure cited is
in the results file named beside it. A tile that must fit the problem (swap-AB's small M on
wgmma's N, a narrow N) is fitted by `shapes.fitted`, so one list serves M = 1 and M = 16 alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from tirtune.core import Config
from tirtune.space.hopper.knobs import config
from tirtune.space.shapes import ShapeClass

__all__ = ["HOPPER_START", "HOPPER_STARTS", "WAVE_FITTED"]

# Every result file cited below is under bench/results/.
# The 4096^3 points (kits/2026-11-29-hopper-gemm-3-best.md, L2 flushed, median of 3 processes): ping-pong
# consumers with chunked TMA stores, 1.024x cuBLAS at 4096^3 fp16 (1.046x at 8192^3, 1.022x bf16),
# and the cooperative 128x256 with chunked stores (1.026x fp16, 1.020x bf16); then the best
# hopper-gemm/2 point (0.985x) and the hand-tuned v1 shapes (docs/perf-notes.md, "hopper-gemm/1").
HOPPER_START: tuple[Config, ...] = (
    config(
        blk_m=128,
        blk_n=128,
        blk_k=64,
        stages=6,
        consumers=2,
        warp_specialized=True,
        persistent=True,
        raster_group=16,
        epilogue="tma_chunked",
        schedule="pingpong",
    ),
    config(
        blk_m=128,
        blk_n=256,
        blk_k=64,
        stages=4,
        consumers=2,
        warp_specialized=True,
        persistent=True,
        raster_group=8,
        epilogue="tma_chunked",
    ),
    config(
        blk_m=128,
        blk_n=256,
        blk_k=64,
        stages=3,
        consumers=2,
        warp_specialized=True,
        persistent=True,
        raster_group=8,
        epilogue="tma",
    ),
    config(blk_m=128, blk_n=256, blk_k=64, stages=4, consumers=2, warp_specialized=True),
    config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2, warp_specialized=True),
)

# The table's default is warp_specialized=True (a producer warpgroup), which every list below uses.
# Decode (M <= 16): swap-AB puts the small M on wgmma's N (fitted to M), 64 rows of N per CTA,
# deep rings of 128-wide k-tiles, and the streamed weights (the kernel's A) loaded evict_first, so
# the L2's dirty lines stop being written back under them (kits/2026-11-30-hopper-gemm-5-l2-options.md:
# 16x4096x4096 1.266x without a split, 1.21-1.22x with K split over a 2-CTA cluster; 8x4096x4096
# 1.225x, 1x4096x4096 1.118x; the same tiles without the hint 1.09-1.13x). The head loads each
# tile's k loop from its own k-tile on (k_rotate), so the 64 CTAs stop reading the same column block
# of their rows at once: 16x4096x4096 15.26 -> 14.59 us (1.216x -> 1.279x), bf16 1.261x -> 1.294x,
# 1x4096x4096 1.116x -> 1.157x in the same processes (decode/2026-12-02-probes-k-rotate.md); with
# 256-byte L2 promotion 1.309x against the rotated tile's 1.282x (decode/2026-12-02-probes-narrow.md,
# within its spread).
_DECODE_HEAD = config(blk_m=64, blk_n=16, blk_k=128, stages=8, consumers=1, swap_ab=True, l2_hint="first/none")
DECODE: tuple[Config, ...] = (
    _DECODE_HEAD.replace(k_rotate=True, l2_promotion="256B"),
    _DECODE_HEAD.replace(k_rotate=True),
    _DECODE_HEAD,
    config(
        blk_m=64,
        blk_n=16,
        blk_k=128,
        stages=8,
        consumers=1,
        swap_ab=True,
        split_k=2,
        l2_hint="first/none",
        l2_promotion="256B",
        prefetch_tensormap=True,
    ),
    config(blk_m=64, blk_n=16, blk_k=256, stages=5, consumers=1, swap_ab=True, split_k=2, l2_hint="first/none"),
    config(blk_m=64, blk_n=16, blk_k=128, stages=8, consumers=1, swap_ab=True, split_k=2, l2_hint="first/none"),
    config(blk_m=64, blk_n=16, blk_k=128, stages=4, consumers=1, swap_ab=True, split_k=4, l2_hint="first/none"),
)

# Small batch (M <= 512): 128x4096x4096's best were 128x64 tiles with K split in two and the
# weights (the kernel's B) evict_first: 1.116x with 128-wide k-tiles, 1.079x with 64 (0.979x
# without the hint); 4-CTA clusters multicasting A lost (0.5x) (kits/2026-11-30-hopper-gemm-5-l2-options.md);
# swapped 64x128 tiles 0.864x in the first kit (kits/2026-11-30-hopper-gemm-5.md; 4 stages here, so a
# swapped M of 256 fits).
SMALL_BATCH: tuple[Config, ...] = (
    config(blk_m=128, blk_n=64, blk_k=128, stages=4, consumers=2, split_k=2, l2_hint="none/first"),
    config(blk_m=128, blk_n=64, blk_k=64, stages=6, consumers=2, split_k=2, l2_hint="none/first"),
    config(blk_m=128, blk_n=64, blk_k=64, stages=6, consumers=2, l2_hint="none/first"),
    config(blk_m=64, blk_n=128, blk_k=64, stages=4, consumers=1, swap_ab=True, split_k=2, l2_hint="first/none"),
    config(blk_m=64, blk_n=64, blk_k=128, stages=6, consumers=1, split_k=2, l2_hint="none/first"),
)

# Fewer 128x128 tiles than SMs (1024^3): 128x64 tiles give 128 CTAs; persistent with chunked TMA
# stores and an 8-stage ring (every k-tile in flight) 0.993x, 6 stages 0.93x, 128-wide k-tiles
# 0.954x (kits/2026-11-30-hopper-gemm-5-l2-options.md); 128x128 split-K 0.76x, ping-pong 0.82x
# (kits/2026-11-30-hopper-gemm-5.md).
FEW_TILES: tuple[Config, ...] = (
    config(
        blk_m=128, blk_n=64, blk_k=64, stages=8, consumers=2, persistent=True, raster_group=8, epilogue="tma_chunked"
    ),
    config(
        blk_m=128,
        blk_n=64,
        blk_k=64,
        stages=8,
        consumers=2,
        persistent=True,
        raster_group=8,
        epilogue="tma_chunked",
        prefetch_tensormap=True,
    ),
    config(
        blk_m=128, blk_n=64, blk_k=64, stages=6, consumers=2, persistent=True, raster_group=8, epilogue="tma_chunked"
    ),
    config(
        blk_m=128,
        blk_n=64,
        blk_k=128,
        stages=4,
        consumers=2,
        persistent=True,
        raster_group=8,
        epilogue="tma_chunked",
        prefetch_tensormap=True,
    ),
    config(
        blk_m=64, blk_n=128, blk_k=64, stages=8, consumers=1, persistent=True, raster_group=8, epilogue="tma_chunked"
    ),
)

# Ragged (M or N not a multiple of 128): 3000x5000x2000's best was 128x192 (0.969x and 0.957x in
# two runs), 192x128 with three consumers 0.951x; 4000^3's 128x256 (0.958-0.966x, with the tensor
# maps prefetched 0.966x), ping-pong 128x128 0.92x (kits/2026-11-30-hopper-gemm-5.md and its
# -l2-options twin). Those tiles
# pad 3000 -> 3072 and 5000 -> 5056 and leave the last round's SMs part idle: 92.5% of the SMs'
# tile work is the problem's (shapes.wave_fill). WAVE_FITTED_TWO takes, per problem, the blk_n of
# at least 128 that best fills the rounds (shapes.wave_fitted; 3000x5000: 152, 97.3%), stored by
# chunked TMA boxes whose last is narrower. Measured (kits/2026-11-30-ragged-tail.md): 128x152 0.956x
# against 128x192's 0.961x, so filling the rounds buys nothing, and the three-consumer fitted tile
# (192x152, 192x160) 0.87-0.89x, no longer a start. What ragged tiles waste is MMAs past the
# problem's edges (a dead m64 block, the last column's padding, the last k-tile's); trimming them
# (the trim knob) was measured slower in every pair (kits/2026-11-30-trim.md: 128x192 0.967x ->
# 0.881x at 3000x5000x2000), so no start is trimmed. Ping-pong consumers on 64-row tiles, wave-
# fitted (64x200 fills 3000x5000's rounds 98.6%, 64x160 4000^3's; 128-row ping-pong tiles hold at
# most 128 columns), were tried as a start through the service and lost
# (suite/2026-12-01-ragged-pingpong64-start.md: 0.78x and 0.77x at 3000x5000x2000, 0.64x and 0.62x
# at 4000^3). Not
# profiled; each B tile serves 64 rows, so a flop moves 1.45x the bytes of 128x152 through L2.
# cuBLAS's own kernel at 3000x5000x2000 (Nsight Compute: profiles/2026-12-01-gemm-ragged.md) is a cooperative
# 256x152 tile in our axes (nvjet_sm90_hsh_152x256_64x4_1x2_h_bz_coopA: two consumers of 128 rows,
# 152 accumulators a thread, 2-CTA clusters). The space takes it since (up to 192 accumulators a
# thread), but it was a start for one suite run only: 0.945x / 0.935x through the service against
# 128x152's 0.951x / 0.938x (suite/2026-12-01-wide-ragged-start.md), 0.947x against 0.948x in the
# same processes (kits/2026-12-01-ragged-wide.md); 256x192 0.819x, 256x168 at 4000^3 0.959x against
# 128x256's 0.969x. What
# 128x152 loses there is K's (3072x5016x2000: 0.976x, M and N ragged alone 0.998-1.003x, padded
# 1.001x); the template's 2-CTA clusters lose more than they save (kits/2026-12-01-ragged-cluster.md).
WAVE_FITTED_TWO = config(
    blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2, persistent=True, raster_group=8, epilogue="tma_chunked"
)
WAVE_FITTED: frozenset[Config] = frozenset({WAVE_FITTED_TWO})

_RAGGED_256 = config(
    blk_m=128,
    blk_n=256,
    blk_k=64,
    stages=4,
    consumers=2,
    persistent=True,
    raster_group=8,
    epilogue="tma_chunked",
    prefetch_tensormap=True,
)
_RAGGED_192 = config(
    blk_m=128, blk_n=192, blk_k=64, stages=4, consumers=2, persistent=True, raster_group=8, epilogue="tma_chunked"
)

# The ragged list starts with ping-pong consumers on 128x152 (5 stages), then the two best tiles,
# each with its last k-tile peeled (peel_k: a K that is not a multiple of 64 pads its last k-tile
# with zeros, 3 of 128 k16 steps at K = 2000; the peeled kernel skips them with no branch in its
# loop). Measured as they stand (kits/2026-12-01-ragged-starts.md, same processes): at
# 3000x5000x2000 the ping-pong head 1.009x / 0.993x (unpeeled 0.990x fp16), 128x152 peeled
# 0.965x / 0.950x against 0.954x / 0.940x unpeeled; at 4000^3 128x256 peeled 0.978x / 0.975x
# (unpeeled 0.965x / 0.967x), the ping-pong head 0.916x / 0.899x. Through the service
# (suite/2026-12-01-ragged-peeled-starts.md, 32 trials): 3000x5000x2000 1.001x / 0.991x,
# 4000^3 0.977x / 0.979x. The unpeeled tiles follow; where K has no tail the branch's fit drops
# the peel (Branch.start_configs), so those problems start as before.
RAGGED: tuple[Config, ...] = (
    config(
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
    ),
    _RAGGED_256.replace(peel_k=True),
    WAVE_FITTED_TWO.replace(peel_k=True),
    _RAGGED_256,
    WAVE_FITTED_TWO,
    _RAGGED_192,
    config(
        blk_m=192, blk_n=128, blk_k=64, stages=4, consumers=3, persistent=True, raster_group=8, epilogue="tma_chunked"
    ),
    HOPPER_START[0],
    config(
        blk_m=256, blk_n=128, blk_k=64, stages=4, consumers=2, persistent=True, raster_group=8, epilogue="tma_chunked"
    ),
)

# Narrow output (N <= 64): narrow tiles, K split so the few tiles fill the SMs.
TALL_SKINNY: tuple[Config, ...] = (
    config(blk_m=128, blk_n=64, blk_k=64, stages=6, consumers=2, split_k=2),
    config(blk_m=128, blk_n=32, blk_k=128, stages=4, consumers=2, split_k=2),
    config(blk_m=128, blk_n=64, blk_k=64, stages=6, consumers=2, persistent=True, raster_group=8),
    config(blk_m=64, blk_n=64, blk_k=128, stages=6, consumers=1, split_k=4),
)

# K-heavy: the squares' points, then K split over a cluster.
K_HEAVY: tuple[Config, ...] = (
    *HOPPER_START[:2],
    config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2, split_k=2),
    config(blk_m=128, blk_n=64, blk_k=64, stages=6, consumers=2, split_k=2),
    *HOPPER_START[2:],
)

HOPPER_STARTS: Mapping[ShapeClass, tuple[Config, ...]] = MappingProxyType(
    {
        ShapeClass.DECODE: DECODE,
        ShapeClass.SMALL_BATCH: SMALL_BATCH,
        ShapeClass.TALL_SKINNY: TALL_SKINNY,
        ShapeClass.FEW_TILES: FEW_TILES,
        ShapeClass.K_HEAVY: K_HEAVY,
        ShapeClass.RAGGED: RAGGED,
        ShapeClass.SQUARE: HOPPER_START,
    }
)
