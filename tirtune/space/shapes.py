"""Shape classes of GEMM problems: what kind of kernel a problem needs before anything is measured.

A job's first trials come from its class (each template branch keeps starting configs per class)
and from the best configs of the nearest problems already tuned (transfer), so a decode problem
does not start from the tiles of a 4096^3 square. The classes, in the order they are tested:

* `decode`: M <= 16 (a token or a few per step): memory-bound, B streamed once; the small M
  rides wgmma's N (swap-AB) and K is split so every SM streams;
* `small_batch`: M <= 512: still short of the compute roofline's ridge or of tiles for 132 SMs;
* `tall_skinny`: N <= 64: narrow output, few tiles along N;
* `few_tiles`: fewer 128x128 output tiles than SMs (1024^3: 64): small tiles or split-K;
* `k_heavy`: K >= 4 * max(M, N) (8192x8192x1024 is not; 1024x1024x8192 is): split-K candidates;
* `ragged`: M or N not a multiple of 128 (4000^3, 3000x5000x2000): tails in every tile row/column;
* `square`: the rest, big and aligned (4096^3, 8192^3, 4096x14336x4096).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from enum import Enum

from tirtune.core import Config, Problem

__all__ = ["SMS", "ShapeClass", "fitted", "log_distance", "nearest_problems", "shape_class", "wave_fill", "wave_fitted"]

SMS = 132  # the H100/H200 SXM's streaming multiprocessors


class ShapeClass(str, Enum):
    DECODE = "decode"
    SMALL_BATCH = "small_batch"
    TALL_SKINNY = "tall_skinny"
    FEW_TILES = "few_tiles"
    K_HEAVY = "k_heavy"
    RAGGED = "ragged"
    SQUARE = "square"


def shape_class(problem: Problem) -> ShapeClass:
    """The first class (in the module docstring's order) whose test the problem passes."""
    m, n, k = problem.m, problem.gemm_n, problem.k  # the GEMM's width: 2N with swiglu
    if m <= 16:
        return ShapeClass.DECODE
    if m <= 512:
        return ShapeClass.SMALL_BATCH
    if n <= 64:
        return ShapeClass.TALL_SKINNY
    if math.ceil(m / 128) * math.ceil(n / 128) < SMS:
        return ShapeClass.FEW_TILES
    if k >= 4 * max(m, n):
        return ShapeClass.K_HEAVY
    if m % 128 or n % 128:
        return ShapeClass.RAGGED
    return ShapeClass.SQUARE


def log_distance(a: Problem, b: Problem) -> float:
    """Euclidean distance in log space, sqrt(sum over M, N, K of ln(a/b)^2): doubling a dimension
    costs the same at any scale (4096^3 is as far from 2048x4096x4096 as from 8192x4096x4096)."""
    return math.sqrt(sum(math.log(x / y) ** 2 for x, y in ((a.m, b.m), (a.n, b.n), (a.k, b.k))))


def nearest_problems(
    problem: Problem,
    candidates: Iterable[Problem],
    limit: int,
    *,
    other_dtype: float = math.inf,
    other_epilogue: float = 0.0,
) -> list[Problem]:
    """The `limit` candidates closest to `problem` (itself excluded), nearest first; ties go to
    the smaller shape, then M, N, K order. A candidate of another dtype is `other_dtype` further
    away (infinitely by default: left out), one of another fused epilogue `other_epilogue` (the
    caller chooses which epilogues it offers)."""

    def distance(c: Problem) -> float:
        return (
            log_distance(problem, c)
            + (0.0 if c.dtype == problem.dtype else other_dtype)
            + (0.0 if c.epilogue == problem.epilogue else other_epilogue)
        )

    others = (c for c in candidates if c != problem and math.isfinite(distance(c)))
    ranked = sorted(others, key=lambda c: (distance(c), c.m * c.n * c.k, c.m, c.n, c.k, c.dtype, str(c.epilogue)))
    return ranked[:limit]


def fitted(config: Config, problem: Problem, widths: Sequence[int]) -> Config:
    """`config` with a tile fitted to a small problem: with swap_ab, wgmma's N (blk_n) is the
    problem's M, so it becomes the narrowest of `widths` that holds M; without, a blk_n wider
    than the problem's N shrinks to the narrowest width that holds N. Other configs unchanged."""
    extent = problem.m if config.swap_ab else problem.gemm_n
    if not config.swap_ab and config.blk_n <= extent:
        return config
    fits = sorted(w for w in widths if w >= extent)
    return config.replace(blk_n=fits[0] if fits else max(widths))


# Fills within this share of the best count as equal: the wider tile is taken (more reuse per byte).
WAVE_FILL_TIE = 0.005


def wave_fill(config: Config, problem: Problem, sms: int = SMS) -> float:
    """The share of the SMs' tile work that is the problem's own: M x N over SMs x rounds x the
    tile's area, where rounds = ceil(tiles / SMs) (one tile an SM at a time, as a persistent CTA
    or a one-wave grid has). It counts both losses of a ragged problem: the tiles' padding past M
    and N, and a last round that leaves SMs idle. On the kernel's axes (swap_ab: the problem's N
    along blk_m)."""
    m, n = (problem.gemm_n, problem.m) if config.swap_ab else (problem.m, problem.gemm_n)
    tiles = math.ceil(m / config.blk_m) * math.ceil(n / config.blk_n)
    rounds = math.ceil(tiles / sms)
    return float(m * n / (sms * rounds * config.blk_m * config.blk_n))


def wave_fitted(
    config: Config,
    problem: Problem,
    widths: Sequence[int],
    valid: Callable[[Config], bool] | None = None,
    sms: int = SMS,
) -> Config:
    """`config` with the blk_n of `widths` (at least its own blk_n, the narrowest it may take:
    narrow tiles fill any rounds but reuse each byte less; among those `valid` accepts) whose
    tiles best fill the SMs (`wave_fill`); fills within WAVE_FILL_TIE of the best go to the
    widest. 3000x5000
    with 128-row tiles: blk_n 152 fills 97.3% (792 tiles, 6 rounds) where 192 fills 92.5% (648
    tiles: 5 rounds, padding 3000 -> 3072 and 5000 -> 5056). `config` itself if no width is valid."""
    ok = [config.replace(blk_n=w) for w in widths if w >= config.blk_n]
    ok = [c for c in ok if valid is None or valid(c)]
    if not ok:
        return config
    fills = {c: wave_fill(c, problem, sms) for c in ok}
    best = max(fills.values())
    return max((c for c in ok if fills[c] >= best - WAVE_FILL_TIE), key=lambda c: c.blk_n)
