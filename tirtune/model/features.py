"""What the cost model sees of a (config, problem) pair: the knobs, and figures a GEMM engineer
would work out on paper before measuring anything.

The knobs alone say nothing about a problem the model has not seen; the analytic figures carry
what transfers between problems (docs/design.md, "The cost model"): how many tiles the problem
cuts into and how they fill the SMs' rounds (the last round's idle SMs), how much of each tile is
padding past M, N and K, the bytes each tile moves per flop, the k-loop each CTA runs against its
ring's depth, split-K's reduction traffic, CTAs an SM holds at once, and a roofline estimate of
the time (MMA peak over the useful share of the SMs against the operands' bytes over memory
bandwidth). Everything is on the kernel's own axes: with swap_ab the problem's N runs along blk_m.

The figures are the H100/H200's (132 SMs, 227 KiB of shared memory an SM); they are features, not
predictions: the learner weighs them against measurements.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from tirtune.core import Config, Problem
from tirtune.space.hopper import rules
from tirtune.space.shapes import SMS

__all__ = ["FEATURES", "features", "matrix"]

MMA_PEAK = 989.4e12  # dense 16-bit flop/s of an H100/H200 SXM at its boost clock
DRAM_BYTES_S = 4.0e12  # about the H200's device-copy bandwidth (bench/results: 4.15 TB/s at 256 MiB)
L2_BYTES_S = 10.0e12  # about what the SMs pull from L2 together
ROUND_S = 2.0e-6  # a round's fixed cost: the ring's fill and the epilogue's drain, roughly

_EPILOGUES = {"register": 0.0, "tma": 1.0, "tma_chunked": 2.0}
_HINTS = {"none": 0.0, "first": 1.0, "last": 2.0}

FEATURES: tuple[str, ...] = (
    # the problem
    "log_m",
    "log_n",
    "log_k",
    "bf16",
    "m_aligned",
    "n_aligned",
    "k_aligned",
    "log_intensity",
    # the knobs
    "blk_m",
    "blk_n",
    "blk_k",
    "stages",
    "consumers",
    "warp_specialized",
    "persistent",
    "raster_group",
    "epilogue",
    "cluster",
    "cluster_n",
    "pingpong",
    "reg_consumer",
    "thread_loader",
    "epilogue_warpgroup",
    "swap_ab",
    "split_k",
    "serial_reduce",
    "l2_a",
    "l2_b",
    "promotion_256",
    "prefetch_tensormap",
    "trim",
    "peel_k",
    "k_rotate",
    "split_tail",
    "stream_k",
    "stream_k_tail",
    # analytic figures
    "kernel_log_m",
    "kernel_log_n",
    "tiles_m",
    "tiles_n",
    "log_tiles",
    "log_ctas",
    "ctas_per_sm",
    "rounds",
    "wave_fill",
    "busy_share",
    "mn_padding",
    "k_padding",
    "cta_k_tiles",
    "k_tiles_per_stage",
    "tile_bytes_per_flop",
    "log_l2_over_min_bytes",
    "reduce_share",
    "accumulators",
    "smem_kib",
    "warpgroups",
    "k_tail_steps",
    "log_t_mma",
    "log_t_mem",
    "log_t_est",
    "memory_bound",
)


def features(config: Config, problem: Problem) -> tuple[float, ...]:
    """The FEATURES of `config` on `problem`, in that order."""
    m, n = rules.kernel_shape(config, problem)
    k, gemm_n = problem.k, problem.gemm_n  # the GEMM's width: B's rows (2N with swiglu)
    c = config
    bm, bn, bk = max(c.blk_m, 1), max(c.blk_n, 1), max(c.blk_k, 1)
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    tiles = tiles_m * tiles_n
    k_tiles = -(-k // bk)
    split = max(c.split_k, 1)
    ctas = tiles * split
    per_sm = rules.ctas_per_sm(c, problem)
    # split_k_scope "tail": the whole waves' tiles run one CTA each over the whole K, the last
    # wave's split (rules.split_tail_tiles); its rounds count the tail's as 1/split of one.
    tail = split > 1 and c.split_k_scope == "tail"
    whole, split_tiles = rules.split_tail_tiles(c, problem) if tail else (0, tiles if split > 1 else 0)
    # stream_k: one persistent CTA an SM over an equal share of every tile's k-tiles (rules.
    # stream_k_supported: at least one round of tiles): the rounds are full, each CTA's share spans
    # its tiles' worth plus the one it starts inside, and about one tile a CTA is handed over as an
    # fp32 partial (written once, read once).
    # With stream_k_scope "tail" the whole rounds but the last run first, data-parallel, and only
    # the rest is shared out (its k-tiles in `share`, its rounds after the data-parallel ones).
    stream = c.stream_k and not tail and tiles >= SMS
    stream_tail = stream and c.stream_k_scope == "tail"
    dp_rounds = max(tiles // SMS - 1, 0) if stream_tail else 0
    share = -(-(tiles - dp_rounds * SMS) * k_tiles // SMS)  # k-tiles a stream-K CTA shares
    if stream:
        ctas = SMS
        rounds = dp_rounds + -(-share // k_tiles) + 1
        fill = tiles * k_tiles / (SMS * (share + dp_rounds * k_tiles))
        busy = 1.0
        split_tiles, split = SMS, 2
    elif tail:
        ctas = whole + split_tiles * split
        rounds = whole // SMS + 1
        fill = tiles / ((whole / SMS + 1 / split) * SMS)
        busy = min(ctas, SMS) / SMS
    elif c.persistent:
        grid = min(tiles, SMS)
        rounds = -(-tiles // grid)
        fill = tiles / (rounds * SMS)
        busy = grid / SMS
    else:
        slots = SMS * per_sm
        rounds = -(-ctas // slots)
        fill = ctas / (rounds * slots)
        busy = min(ctas, SMS) / SMS
    mn_padding = m * n / (tiles_m * bm * tiles_n * bn)
    live_k = -(-k // rules.WGMMA_K) * rules.WGMMA_K if c.peel_k else k_tiles * bk
    k_padding = k / live_k
    size = problem.element_bytes
    min_bytes = (m * k + n * k + m * n) * size
    l2_bytes = tiles * (bm + bn) * k * size
    serial = (c.split_k > 1 and c.split_k_reduce == "serial") or stream
    reduce_bytes = split_tiles * bm * bn * 4 * (split - 1) * (2 if serial else 0)
    flops = 2 * m * n * k
    t_mma = flops / (mn_padding * k_padding) / (MMA_PEAK * max(fill, 1e-3))
    t_mem = max(min_bytes / DRAM_BYTES_S, (l2_bytes + reduce_bytes) / L2_BYTES_S)
    t_est = max(t_mma, t_mem) + rounds * ROUND_S
    hint_a, _, hint_b = c.l2_hint.partition("/")
    # A tail split's whole waves run the whole K; a stream-K CTA its share.
    cta_k = k_tiles if tail else share + dp_rounds * k_tiles if stream else k_tiles / split
    return (
        math.log2(problem.m),
        math.log2(gemm_n),
        math.log2(k),
        float(problem.dtype == "bfloat16"),
        float(problem.m % 128 == 0),
        float(gemm_n % 128 == 0),
        float(k % 64 == 0),
        math.log2(2 * problem.m * gemm_n * k / ((problem.m * k + gemm_n * k + problem.m * gemm_n) * size)),
        float(c.blk_m),
        float(c.blk_n),
        float(c.blk_k),
        float(c.stages),
        float(c.consumers),
        float(c.warp_specialized),
        float(c.persistent),
        float(c.raster_group),
        _EPILOGUES.get(c.epilogue, -1.0),
        float(c.cluster),
        float(c.cluster_dim == "n"),
        float(c.schedule == "pingpong"),
        float(c.reg_split.partition("/")[0] or 0),
        float(c.loader == "threads"),
        float(c.epilogue_warpgroup),
        float(c.swap_ab),
        float(max(c.split_k, 1)),
        float(serial),
        _HINTS.get(hint_a, -1.0),
        _HINTS.get(hint_b, -1.0),
        float(c.l2_promotion == "256B"),
        float(c.prefetch_tensormap),
        float(c.trim),
        float(c.peel_k),
        float(c.k_rotate),
        float(tail),
        float(stream),
        float(stream_tail),
        math.log2(m),
        math.log2(n),
        float(tiles_m),
        float(tiles_n),
        math.log2(tiles),
        math.log2(ctas),
        float(per_sm),
        float(rounds),
        fill,
        busy,
        mn_padding,
        k_padding,
        cta_k,
        cta_k / max(c.stages, 1),
        (bm + bn) / (bm * bn),
        math.log2(l2_bytes / min_bytes),
        reduce_bytes / min_bytes,
        float(rules.accumulators(c)),
        rules.smem_bytes(c) / 1024,
        float(rules.warpgroups(c)),
        float(rules.k_tail_steps(c, problem)),
        math.log(t_mma),
        math.log(t_mem),
        math.log(t_est),
        float(t_mem > t_mma),
    )


def matrix(pairs: Iterable[tuple[Config, Problem]]) -> np.ndarray:
    """One row of FEATURES per (config, problem) pair."""
    rows: Sequence[tuple[float, ...]] = [features(c, p) for c, p in pairs]
    if not rows:
        return np.zeros((0, len(FEATURES)))
    return np.asarray(rows, dtype=np.float64)
