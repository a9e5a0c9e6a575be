"""Validity rules of the Blackwell (sm_100a) GEMM space: named predicates returning None or a reason.

What the knobs mean on Blackwell and which values they take: the knob table
(`tirtune.space.blackwell.knobs`). The rules that mean the same thing as on Hopper (TMA strides,
the swizzle atom, raster groups, the loader) are the TMA branches' shared ones
(`tirtune.space.tma_rules`).
"""

from __future__ import annotations

from tirtune.core import Config, Problem
from tirtune.space.blackwell.knobs import CLUSTERS, CONSUMERS, EPILOGUES, KNOBS
from tirtune.space.tma_rules import (
    blk_k_matches_swizzle,
    loader_supported,
    raster_group_valid,
    tma_row_stride_aligned,
    tma_store_row_stride_aligned,
)
from tirtune.space.validity import ConfigRule, ProblemRule, knobs_off_default

__all__ = [
    "BLACKWELL_CONFIG_RULES",
    "BLACKWELL_PROBLEM_RULES",
    "CONSUMER_ROWS",
    "EPILOGUE_CHUNK",
    "SMEM_LIMIT_BYTES",
    "TMEM_COLUMNS",
    "cluster_is_a_cta_pair",
    "consumers_own_128_rows",
    "epilogue_supported",
    "fused_epilogue_supported",
    "operand_dtype_supported",
    "hopper_knobs_at_default",
    "pipeline_depth_in_range",
    "smem_bytes",
    "smem_fits",
    "tcgen05_shape_supported",
    "tmem_columns_fit",
]

# Dynamic shared memory one CTA may opt into on sm_100 (227 KiB, as on sm_90).
SMEM_LIMIT_BYTES = 232_448
# Barriers, the TMEM address slot, the 1024 B alignment of the swizzled tiles.
SMEM_OVERHEAD_BYTES = 2_048
# Tensor memory: 128 lanes x 512 columns of 32 bits per SM.
TMEM_COLUMNS = 512
# Rows of one consumer's accumulator: the full 128-lane TMEM datapath (M=128 per CTA).
CONSUMER_ROWS = 128
# Columns the epilogue moves per TMEM load and per TMA-store box (64 x 2 B = one swizzle atom).
EPILOGUE_CHUNK = 64
MAX_STAGES = 8
# The knobs this branch's template has a code path for: its table's. Every other knob (schedule,
# reg_split and any later Hopper one) builds here only at its default, so a new knob is refused
# until implemented.
IMPLEMENTED_KNOBS = frozenset(knob.name for knob in KNOBS.own)


def b_rows(config: Config) -> int:
    """Rows of the B tile each CTA loads: all of blk_n, or its half of the pair's."""
    return int(config.blk_n // max(config.cluster, 1))


def staging_bytes(config: Config) -> int:
    """The TMA-store epilogue stages one 128 x 64 chunk per consumer (2-byte elements)."""
    return config.consumers * CONSUMER_ROWS * EPILOGUE_CHUNK * 2 if config.epilogue == "tma" else 0


def smem_bytes(config: Config) -> int:
    stage = (config.blk_m + b_rows(config)) * config.blk_k * 2
    return int(config.stages * stage + staging_bytes(config) + SMEM_OVERHEAD_BYTES)


def consumers_own_128_rows(config: Config, problem: Problem) -> str | None:
    if config.consumers not in CONSUMERS:
        return f"consumers={config.consumers}: the branch has one or two MMA consumers"
    if config.blk_m != CONSUMER_ROWS * config.consumers:
        return (
            f"blk_m={config.blk_m} with {config.consumers} consumer(s): each consumer owns the "
            f"{CONSUMER_ROWS} rows of the full TMEM datapath, so blk_m must be {CONSUMER_ROWS * config.consumers}"
        )
    return None


def cluster_is_a_cta_pair(config: Config, problem: Problem) -> str | None:
    """cluster=2 is the tcgen05 CTA pair (cta_group::2): both CTAs lie along M."""
    if config.cluster not in CLUSTERS:
        return f"cluster={config.cluster}: tcgen05 pairs at most 2 CTAs (cta_group::1 or ::2)"
    if config.cluster == 2 and config.cluster_dim != "m":
        return "cluster_dim must be 'm': the CTA pair of a cta_group::2 MMA splits M (and shares B)"
    if config.cluster == 2 and not config.warp_specialized:
        return (
            "cluster=2 needs warp_specialized: the peer CTA's producer and writeback run "
            "on their own while CTA 0 issues the pair's MMAs"
        )
    return None


def tcgen05_shape_supported(config: Config, problem: Problem) -> str | None:
    """tcgen05.mma kind::f16: M=128 (cta_group::1) or 256 (::2), N a multiple of 16 in 16..256 (32.. for
    M=256). With N a multiple of 16, each CTA of a pair loads blk_n/2 rows of B: whole 8-row swizzle groups."""
    m = CONSUMER_ROWS * max(config.cluster, 1)
    low = 32 if m == 256 else 16
    if config.blk_n % 16 or not low <= config.blk_n <= 256:
        return f"blk_n={config.blk_n}: tcgen05.mma M={m} needs N a multiple of 16 in {low}..256"
    return None


def tmem_columns_fit(config: Config, problem: Problem) -> str | None:
    need = config.consumers * config.blk_n
    if need > TMEM_COLUMNS:
        return (
            f"{config.consumers} consumer(s) x blk_n={config.blk_n} fp32 accumulators need {need} "
            f"TMEM columns > {TMEM_COLUMNS}"
        )
    return None


def epilogue_supported(config: Config, problem: Problem) -> str | None:
    if config.epilogue not in EPILOGUES:
        return f"epilogue={config.epilogue!r}: the Blackwell branch has the epilogues {', '.join(EPILOGUES)}"
    return None


def hopper_knobs_at_default(config: Config, problem: Problem) -> str | None:
    """Knobs only the Hopper branch implements must keep their defaults (the kernel would ignore them)."""
    foreign = knobs_off_default(config, IMPLEMENTED_KNOBS)
    if foreign:
        return f"the Blackwell branch has no code path for {', '.join(foreign)} (only the default)"
    return None


def pipeline_depth_in_range(config: Config, problem: Problem) -> str | None:
    if not 1 <= config.stages <= MAX_STAGES:
        return f"stages={config.stages}: the barrier ring supports 1..{MAX_STAGES} stages"
    if config.warp_specialized and config.stages < 2:
        return "a warp-specialized pipeline needs at least 2 stages to overlap"
    return None


def smem_fits(config: Config, problem: Problem) -> str | None:
    need = smem_bytes(config)
    if need > SMEM_LIMIT_BYTES:
        tiles = f"({config.blk_m}+{b_rows(config)})x{config.blk_k}"
        staging = " + the output staging chunks" if staging_bytes(config) else ""
        return f"{config.stages} stages of {tiles}{staging} need {need} B of shared memory > {SMEM_LIMIT_BYTES} B"
    return None


def fused_epilogue_supported(problem: Problem) -> str | None:
    """The Blackwell template writes D = A @ B.T alone: a fused epilogue (bias, residual, scales;
    core/epilogue.py) is applied by the Hopper template only (docs/design.md, "Epilogues")."""
    if not problem.epilogue.is_none:
        return (
            f"epilogue={problem.epilogue}: the Blackwell branch has no fused epilogue (only 'none'); "
            "the Hopper branch (sm_90a) applies it"
        )
    return None


def operand_dtype_supported(problem: Problem) -> str | None:
    """The Blackwell template issues tcgen05.mma kind::f16 (f16 and bf16 operands): FP8 operands
    (kind::f8f6f4) are built by the Hopper template only."""
    if problem.is_fp8:
        return f"dtype={problem.dtype}: the Blackwell branch multiplies f16 and bf16 only; the Hopper branch takes FP8"
    return None


BLACKWELL_PROBLEM_RULES: tuple[ProblemRule, ...] = (
    tma_row_stride_aligned,
    fused_epilogue_supported,
    operand_dtype_supported,
)
BLACKWELL_CONFIG_RULES: tuple[ConfigRule, ...] = (
    consumers_own_128_rows,
    cluster_is_a_cta_pair,
    tcgen05_shape_supported,
    tmem_columns_fit,
    blk_k_matches_swizzle,
    pipeline_depth_in_range,
    smem_fits,
    raster_group_valid,
    epilogue_supported,
    tma_store_row_stride_aligned,
    loader_supported,
    hopper_knobs_at_default,
)
