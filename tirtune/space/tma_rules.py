"""Validity rules every TMA-fed GEMM branch shares (sm_90a and sm_100a): the tensor maps' row
strides, the 128-byte swizzle atom along K, the raster groups of a persistent grid, the loader.

Each is a named predicate returning None or the reason, as the branches' own rules
(`tirtune.space.hopper.rules`, `tirtune.space.blackwell.rules`), which list them among theirs.
"""

from __future__ import annotations

from tirtune.core import Config, Problem
from tirtune.space.validity import reads

__all__ = [
    "LOADERS",
    "SWIZZLE_ELEMENTS",
    "TMA_EPILOGUES",
    "TMA_ROW_BYTES",
    "blk_k_matches_swizzle",
    "loader_supported",
    "raster_group_valid",
    "tma_row_stride_aligned",
    "tma_store_row_stride_aligned",
]

# TMA row strides are multiples of this.
TMA_ROW_BYTES = 16
SWIZZLE_ELEMENTS = 64  # one 128-byte swizzle atom of 2-byte elements along K
TMA_EPILOGUES = ("tma", "tma_chunked")
# How a stage is filled: "tma" (the copy engine) or "threads" (the teaching path's thread copies).
LOADERS = ("tma", "threads")


def tma_row_stride_aligned(problem: Problem) -> str | None:
    """TMA needs every row stride of A (M,K) and B (N,K) to be a multiple of 16 bytes."""
    stride = problem.k * problem.element_bytes
    if stride % TMA_ROW_BYTES:
        return (
            f"K={problem.k} gives a row stride of {stride} B; TMA needs a multiple of {TMA_ROW_BYTES} B, "
            f"so K must be a multiple of {TMA_ROW_BYTES // problem.element_bytes}"
        )
    return None


@reads("blk_k")
def blk_k_matches_swizzle(config: Config, problem: Problem) -> str | None:
    if config.blk_k % SWIZZLE_ELEMENTS or config.blk_k <= 0:
        return f"blk_k={config.blk_k}: the 128B-swizzled K-major tile needs a multiple of {SWIZZLE_ELEMENTS}"
    return None


@reads("raster_group", "persistent")
def raster_group_valid(config: Config, problem: Problem) -> str | None:
    """Tile rows per group: 1 = row-major, N = groups of N rows, 0 = column-major (one group)."""
    if config.raster_group < 0:
        return f"raster_group={config.raster_group}: tile rows per group, 0 (all: column-major) or more"
    if config.raster_group != 1 and not config.persistent:
        return f"raster_group={config.raster_group} needs persistent: the one-tile-per-CTA grid is always row-major"
    return None


@reads("loader", "stages", "warp_specialized", "cluster")
def loader_supported(config: Config, problem: Problem) -> str | None:
    """The thread loader is the synchronous teaching path: copy, sync, multiply, one stage."""
    if config.loader not in LOADERS:
        return f"loader={config.loader!r}: known loaders are {', '.join(LOADERS)}"
    if config.loader == "threads" and (config.stages != 1 or config.warp_specialized or config.cluster != 1):
        return (
            "loader=threads needs stages=1, no producer warpgroup and no cluster: the consumer threads "
            "copy each k-tile themselves and wait for it (there is no ring to run ahead in)"
        )
    return None


@reads("epilogue")
def tma_store_row_stride_aligned(config: Config, problem: Problem) -> str | None:
    """The TMA store's tensor map over D (M,N) needs a row stride that is a multiple of 16 bytes."""
    stride = problem.n * problem.out_bytes
    if config.epilogue in TMA_EPILOGUES and stride % 16:
        return (
            f"N={problem.n} gives D a row stride of {stride} B; a TMA store needs a multiple of 16 B, "
            f"so N must be a multiple of {16 // problem.out_bytes} (the register epilogue takes any N)"
        )
    return None
