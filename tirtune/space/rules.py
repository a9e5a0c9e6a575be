"""Validity rules: small named predicates returning None (valid) or the reason it is not.

Problem rules look at the problem alone and refuse it before anything is proposed; config rules
look at one (config, problem) pair. Each rule's name is what the dashboard and the database show.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tirtune.space.config import Config
from tirtune.space.problem import Problem

__all__ = [
    "CONFIG_RULES",
    "PROBLEM_RULES",
    "SMEM_LIMIT_BYTES",
    "ConfigRule",
    "ProblemRule",
    "Violation",
    "accumulator_fits_registers",
    "blk_k_matches_swizzle",
    "consumers_split_m",
    "epilogue_supported",
    "persistent_needs_producer",
    "pipeline_depth_in_range",
    "smem_bytes",
    "smem_fits",
    "raster_group_valid",
    "tma_row_stride_aligned",
    "tma_store_row_stride_aligned",
    "wgmma_n_supported",
]

ProblemRule = Callable[[Problem], "str | None"]
ConfigRule = Callable[[Config, Problem], "str | None"]

# Dynamic shared memory one CTA may opt into on sm_90 (227 KiB).
SMEM_LIMIT_BYTES = 232_448
# Barriers, the 1024 B alignment of the 128B-swizzled tiles, and slack.
SMEM_OVERHEAD_BYTES = 2_048
# fp32 accumulator registers a consumer thread may hold: the rest of the 255-register cap (240
# after setmaxnreg) is addressing, descriptors and loop state.
MAX_ACCUMULATOR_REGS = 128
SWIZZLE_ELEMENTS = 64  # one 128-byte swizzle atom of 2-byte elements along K
EPILOGUES = ("register", "tma")


@dataclass(frozen=True, slots=True)
class Violation:
    rule: str
    reason: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.reason}"


def tma_row_stride_aligned(problem: Problem) -> str | None:
    """TMA needs every row stride of A (M,K) and B (N,K) to be a multiple of 16 bytes."""
    stride = problem.k * problem.element_bytes
    if stride % 16:
        return (
            f"K={problem.k} gives a row stride of {stride} B; TMA needs a multiple of 16 B, "
            f"so K must be a multiple of {16 // problem.element_bytes}"
        )
    return None


def staging_bytes(config: Config) -> int:
    """The TMA-store epilogue stages the whole blk_m x blk_n output tile (2-byte elements)."""
    return config.blk_m * config.blk_n * 2 if config.epilogue == "tma" else 0


def smem_bytes(config: Config) -> int:
    stage = (config.blk_m + config.blk_n) * config.blk_k * 2
    return config.stages * stage + staging_bytes(config) + SMEM_OVERHEAD_BYTES


def smem_fits(config: Config, problem: Problem) -> str | None:
    need = smem_bytes(config)
    if need > SMEM_LIMIT_BYTES:
        tiles = f"({config.blk_m}+{config.blk_n})x{config.blk_k}"
        staging = f" + a {config.blk_m}x{config.blk_n} output staging tile" if staging_bytes(config) else ""
        return (f"{config.stages} stages of {tiles}{staging} need {need} B of shared memory "
                f"> {SMEM_LIMIT_BYTES} B")
    return None


def persistent_needs_producer(config: Config, problem: Problem) -> str | None:
    """A persistent CTA loads the next tile's stages while consuming this one's."""
    if config.persistent and not config.warp_specialized:
        return ("a persistent kernel needs warp_specialized: only a producer warpgroup runs the loads "
                "ahead across tile boundaries (the prefetching consumer thread stays within one tile)")
    return None


def raster_group_valid(config: Config, problem: Problem) -> str | None:
    if config.raster_group < 1:
        return f"raster_group={config.raster_group}: needs at least 1 tile row per group"
    if config.raster_group != 1 and not config.persistent:
        return (f"raster_group={config.raster_group} needs persistent: the one-tile-per-CTA grid "
                "is always row-major")
    return None


def epilogue_supported(config: Config, problem: Problem) -> str | None:
    if config.epilogue not in EPILOGUES:
        return f"epilogue={config.epilogue!r}: known epilogues are {', '.join(EPILOGUES)}"
    return None


def tma_store_row_stride_aligned(config: Config, problem: Problem) -> str | None:
    """The TMA store's tensor map over D (M,N) needs a row stride that is a multiple of 16 bytes."""
    stride = problem.n * problem.element_bytes
    if config.epilogue == "tma" and stride % 16:
        return (f"N={problem.n} gives D a row stride of {stride} B; a TMA store needs a multiple of 16 B, "
                f"so N must be a multiple of {16 // problem.element_bytes} (the register epilogue takes any N)")
    return None


def consumers_split_m(config: Config, problem: Problem) -> str | None:
    if config.consumers < 1 or config.blk_m % config.consumers:
        return f"blk_m={config.blk_m} does not split evenly over {config.consumers} consumer warpgroups"
    rows = config.blk_m // config.consumers
    if rows not in (64, 128):
        return f"each consumer would own {rows} rows; wgmma m64 tiles allow 64 or 128"
    return None


def accumulator_fits_registers(config: Config, problem: Problem) -> str | None:
    rows = config.blk_m // max(config.consumers, 1)
    regs = rows * config.blk_n // 128
    if regs > MAX_ACCUMULATOR_REGS:
        return f"a consumer thread would hold {regs} fp32 accumulators; at most {MAX_ACCUMULATOR_REGS} fit in registers"
    return None


def wgmma_n_supported(config: Config, problem: Problem) -> str | None:
    if config.blk_n % 8 or not 8 <= config.blk_n <= 256:
        return f"blk_n={config.blk_n}: wgmma needs N a multiple of 8 in 8..256"
    return None


def blk_k_matches_swizzle(config: Config, problem: Problem) -> str | None:
    if config.blk_k % SWIZZLE_ELEMENTS or config.blk_k <= 0:
        return f"blk_k={config.blk_k}: the 128B-swizzled K-major tile needs a multiple of {SWIZZLE_ELEMENTS}"
    return None


def pipeline_depth_in_range(config: Config, problem: Problem) -> str | None:
    if not 1 <= config.stages <= 8:
        return f"stages={config.stages}: the barrier ring supports 1..8 stages"
    if config.warp_specialized and config.stages < 2:
        return "a warp-specialized pipeline needs at least 2 stages to overlap"
    return None


PROBLEM_RULES: tuple[ProblemRule, ...] = (tma_row_stride_aligned,)
CONFIG_RULES: tuple[ConfigRule, ...] = (
    wgmma_n_supported,
    blk_k_matches_swizzle,
    consumers_split_m,
    accumulator_fits_registers,
    pipeline_depth_in_range,
    smem_fits,
    persistent_needs_producer,
    raster_group_valid,
    epilogue_supported,
    tma_store_row_stride_aligned,
)
