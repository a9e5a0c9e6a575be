"""The Hopper (sm_90a) branch of the GEMM template: its knobs, rules, spaces and starts, and the
binding to its template.

- `knobs.py`: the knob table, each knob's type, default, values and meaning (docs/design.md
  shows it).
- `rules.py`: the validity rules and the limits they check.
- `spaces.py`: the search space of each template version (hopper-gemm/1 to /5).
- `starts.py`: the configs a job starts from, per shape class.

`BRANCH` binds them to the template (`tirtune.kernels.hopper:build`) and the target; the registry
(`tirtune.space.branches`) composes it with the other branches.
"""

from __future__ import annotations

from tirtune.core import Config, Problem
from tirtune.core.epilogue import BLOCK_K
from tirtune.space.branch import Branch
from tirtune.space.hopper.knobs import KNOBS, REG_SPLITS, SPLIT_KS
from tirtune.space.hopper.rules import (
    FP8_KNOBS,
    FP8_SWIZZLE_ELEMENTS,
    MAX_BLK_K,
    SWIGLU_KNOBS,
    SWIGLU_TILE_ALIGN,
    fp8_block_buffers,
    k_tail_steps,
    kernel_tiles,
    rounds,
)
from tirtune.space.hopper.spaces import (
    HOPPER,
    HOPPER_V1,
    HOPPER_V2,
    HOPPER_V3,
    HOPPER_V4,
    SPACES,
    TEMPLATE_VERSION,
    same_kernel,
    space_for,
)
from tirtune.space.hopper.starts import HOPPER_START, HOPPER_STARTS, WAVE_FITTED
from tirtune.space.shapes import SMS

__all__ = [
    "BRANCH",
    "HOPPER",
    "HOPPER_START",
    "HOPPER_STARTS",
    "HOPPER_V1",
    "HOPPER_V2",
    "HOPPER_V3",
    "HOPPER_V4",
    "KNOBS",
    "SPACES",
    "TEMPLATE_VERSION",
    "same_kernel",
    "space_for",
]


def _wave_fitted(config: Config) -> bool:
    """The ragged starts whose blk_n is fitted per problem (`starts.WAVE_FITTED`), peeled or not."""
    return config.replace(peel_k=False) in WAVE_FITTED


def _unswapped_block_tile(config: Config, problem: Problem) -> Config:
    """A swapped block-scaled start the block rules refuse (its consumers would hold the product
    beside the sums for a tile 128 or more wide, `rules.fp8_block_registers`) as an unswapped tile
    of 128 rows, two cooperative consumers, BLOCK_K or half as many columns: the one whose busiest
    SM does the least work (the tiles it computes, spread evenly over the SMS, times the tile's
    width; CTAs that share an SM share its tensor cores), the wider on a tie, the weights' L2 hint
    kept on the weights. Left to the job's repair, the nearest valid config was a swapped
    64x136 tile with one product buffer: 0.27-0.41 of torch at 512x4096x14336, where the unswapped
    128x128 tile ran at 0.86 and 128x64 at 0.56, while at 128x4096x4096 (32 tiles of 128x128 on 132
    SMs) 128x64 ran at 1.07 and 128x128 at 0.89 (docs/perf-notes.md, "Measured on an H100: where
    the mid-sized kernels lose, block-scaled FP8 on mid-sized problems, a third draw")."""
    hint_a, hint_b = config.l2_hint.split("/")
    tiles = [
        config.replace(
            swap_ab=False, blk_m=128, blk_n=n, consumers=2, schedule="cooperative", l2_hint=f"{hint_b}/{hint_a}"
        )
        for n in (BLOCK_K, BLOCK_K // 2)
    ]
    return min(tiles, key=lambda c: (-(-kernel_tiles(c, problem) // SMS) * c.blk_n, -c.blk_n))


def _block_fitted(config: Config, problem: Problem) -> Config:
    """A 16-bit start made a block-scaled one the block rules take, each step only where they
    refuse it as it stands: a swapped tile unswapped (`_unswapped_block_tile`), an unswapped tile
    128 columns wide (its consumers hold twice the
    accumulators, `rules.fp8_block_registers`), cooperative consumers instead of ping-pong ones
    (which each hold a whole tile's), then the register split that gives the consumers two product
    buffers (`rules.fp8_block_buffers`: the next k-tile's wgmma run while the last one is promoted;
    +9-27% on the same tiles, docs/perf-notes.md, "Block-scaled FP8 with two product buffers,
    measured"). Left to the job's repair, the nearest valid config of a 128x256 start was a
    128x64 or 128x8 tile, and of a ping-pong one the one-buffer split."""
    if config.swap_ab and not HOPPER.is_valid(config, problem):
        config = _unswapped_block_tile(config, problem)
    if not config.swap_ab and config.blk_n > BLOCK_K and not HOPPER.is_valid(config, problem):
        config = config.replace(blk_n=BLOCK_K)
    if config.schedule == "pingpong" and not HOPPER.is_valid(config, problem):
        config = config.replace(schedule="cooperative")
    if fp8_block_buffers(config) == 1:
        for split in REG_SPLITS:
            two = config.replace(reg_split=split)
            if fp8_block_buffers(two) == 2 and HOPPER.is_valid(two, problem):
                return two
    return config


def _fit_start(config: Config, problem: Problem) -> Config:
    """A peeled last k-tile (peel_k) only where K leaves k16 steps to skip: elsewhere its
    unpeeled twin. For swiglu (which takes the register epilogue, whole sums and tiles of whole
    16-column gate/up pairs: rules.swiglu_*), the start's register-stored twin: no staged store
    or epilogue warpgroup, no split or stream-K, blk_n rounded up to a multiple of 16. For FP8
    (rules.fp8_*), the start's TMA-loaded, untrimmed, unpeeled twin without stream-K, its k-tile
    twice as deep (the same bytes a stage, at 1-byte elements) up to MAX_BLK_K; with block scales
    one 128-deep block (rules.fp8_block_k_tile), its ring as many stages deeper as the same bytes
    hold (a start the other block rules refuse is repaired by the job, as any refused start is)."""
    if config.peel_k and k_tail_steps(config, problem) == 0:
        config = config.replace(peel_k=False)
    if problem.is_fp8 and problem.epilogue.block_scaled:
        # A 16-bit start's k-tile of blk_k elements is 2 * blk_k bytes a row; the block's 128 e4m3
        # are 128: the ring holds blk_k / 64 times the stages in the same bytes.
        stages = min(config.stages * max(1, config.blk_k // 64), max(int(v) for v in KNOBS["stages"].values))
        config = _block_fitted(config.replace(**FP8_KNOBS, blk_k=BLOCK_K, stages=stages), problem)
    elif problem.is_fp8:
        config = config.replace(**FP8_KNOBS, blk_k=max(FP8_SWIZZLE_ELEMENTS, min(2 * config.blk_k, MAX_BLK_K)))
    if problem.epilogue.gated:
        config = config.replace(
            **SWIGLU_KNOBS,
            blk_n=config.blk_n if config.swap_ab else -(-config.blk_n // SWIGLU_TILE_ALIGN) * SWIGLU_TILE_ALIGN,
        )
    return config


def _split_fitted(config: Config, problem: Problem) -> Config:
    """A start's K split no deeper than adds no round of CTAs. A split gives each tile split_k
    CTAs to fill SMs that too few tiles leave idle; where the tiles alone fill them, its CTAs run
    as further rounds (`rules.rounds`). Of the 79 pairs on file (a split config and its unsplit
    twin measured on one problem and GPU, 17 problems, 16-bit and FP8, decode and not) in which the
    split adds rounds, the split won 2; of the 34 16-bit pairs off decode in which it adds none, 30
    (bench/results/generalize/2026-12-06-split-rounds.md). A start that splits every tile
    (split_k_scope "all") and adds rounds takes the deepest shallower split the space holds that
    adds none and the rules take, else none; one that adds none, or splits the last round's tiles
    alone (split_k_scope "tail"), stays as it is."""
    if config.split_k <= 1 or config.split_k_scope != "all" or config.stream_k:
        return config
    unsplit = config.replace(split_k=1)
    most = rounds(unsplit, problem)
    if rounds(config, problem) <= most:
        return config
    for split in sorted((s for s in SPLIT_KS if 1 < s < config.split_k), reverse=True):
        shallower = config.replace(split_k=split)
        if rounds(shallower, problem) <= most and HOPPER.is_valid(shallower, problem):
            return shallower
    return same_kernel(unsplit)


def _fit_tiled(config: Config, problem: Problem) -> Config:
    """A start once its tile is fitted to the problem: a swapped block-scaled tile the block rules
    refuse (its width fitted to M past what they take) unswapped (`_block_fitted`), then its K split
    (`_split_fitted`)."""
    if problem.epilogue.block_scaled and config.swap_ab and not HOPPER.is_valid(config, problem):
        config = _block_fitted(config, problem)
    return _split_fitted(config, problem)


BRANCH = Branch(
    arch="sm_90a",
    name="Hopper",
    compute_capabilities=("9.x",),
    gpu_models=("H100", "H200"),
    described="Hopper, 9.x",
    knobs=KNOBS,
    space=HOPPER,
    template="tirtune.kernels.hopper:build",
    gencode="-gencode=arch=compute_90a,code=sm_90a",
    version_prefix="hopper-",
    status="run",
    status_text="run on an H200: every trial verified, then timed",
    start_with=HOPPER_STARTS,
    mma_flops_per_sm_clock=4096,
    wave_fit=_wave_fitted,
    fit_start=_fit_start,
    fit_tiled=_fit_tiled,
)
