"""The Hopper (sm_90a) branch's knobs: each knob's type, default, values and meaning, stated once.

`KNOBS` is the table: what each knob does in the Hopper template (`tirtune.kernels.hopper`), and
the values the current space (hopper-gemm/5, `tirtune.space.hopper.spaces`) draws. The rules
(`tirtune.space.hopper.rules`) read the value lists from here; the older template versions'
spaces hold narrower ranges (their own, in `spaces.py`) and every knob they lack at its default.
Where the template builds more than the search draws, the meaning says so. A Hopper `Config` is a
point of this table (`config(...)` builds one), checked against it; its knobs' order is the order
configs sort in, and `first` names the knobs every canonical text holds (`Config.canonical`).
Adding a knob: its row here, its rules, its kernel code (and a label word in `labels.py`).

docs/design.md shows the table (`KNOBS.markdown()`; tests/test_knob_tables.py keeps it current).
"""

from __future__ import annotations

from typing import Any

from tirtune.core import Config, Knob, KnobTable
from tirtune.space.hopper.labels import LABELS
from tirtune.space.tma_rules import LOADERS

__all__ = [
    "CLUSTER_DIMS",
    "CLUSTER_SIZES",
    "EPILOGUES",
    "KNOBS",
    "L2_HINTS",
    "L2_PROMOTIONS",
    "LOADERS",
    "FITTED_BLK_N",
    "RAGGED_BLK_N",
    "REG_SPLITS",
    "SCHEDULES",
    "SPLIT_KS",
    "SPLIT_K_REDUCES",
    "config",
]

# 136..248: tile widths off the 64-wide TMA-store box, above 128 (the chunked store's last box is
# narrower): ragged problems' tiles can fill the SMs' rounds (shapes.wave_fitted).
RAGGED_BLK_N = tuple(w for w in range(128 + 8, 256, 8) if w % 64)
# 56..120: the widths between the narrow and the ragged ones. With swap_ab a tile's width runs
# along the problem's M (a token count, rarely a round number): 217 rows are two tiles of 112, 286
# three of 96, where 64-row steps pad them to 256 and 320. cuBLAS's kernels at such problems run
# widths like these along M (bench/results/profiles/2026-12-03-draw-losers.md).
FITTED_BLK_N = (56, 72, 80, 88, 104, 112, 120)
EPILOGUES = ("register", "tma", "tma_chunked")
SCHEDULES = ("cooperative", "pingpong")
# setmaxnreg budgets "consumer/others" (rules.py says which layouts each one fits).
REG_SPLITS = ("232/40", "240/24", "232/24", "112/24")
CLUSTER_SIZES = (1, 2, 4)
CLUSTER_DIMS = ("m", "n")
# The CTAs one output tile's k-tiles are split over. Through distributed shared memory they are a
# cluster, at most 8 CTAs (the portable cluster size); the serial reduction has no cluster and
# takes the deeper splits: a narrow decode problem (N = 1024: 16 swapped 64-row tiles) fills the
# 132 SMs only with 8 or more CTAs a tile. Splits that are not powers of two fit the k-tile counts
# of model widths (K = 3584: 56 k-tiles of 64, 7 x 8).
SPLIT_KS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 14, 16)
SPLIT_K_REDUCES = ("dsmem", "serial")
# Which tiles split_k splits: "all" of them, or only the "tail": the tiles of the last, partial wave
# (tiles mod the SMs), each split_k ways, after the whole waves' tiles have run data-parallel.
SPLIT_K_SCOPES = ("all", "tail")
STREAM_K_SCOPES = ("all", "tail")
# "<A>/<B>": the combinations the search draws (the rule takes any pair of none, first, last).
L2_HINTS = ("none/none", "first/none", "none/first", "first/last", "last/first")
L2_PROMOTIONS = ("128B", "256B")

KNOBS = KnobTable(
    Knob(
        "blk_m",
        int,
        128,
        (64, 128, 192, 256),
        "Rows of the CTA tile (with swap_ab: its extent along the problem's N, the kernel's own M). "
        "Split evenly over the consumers (each owns blk_m/consumers rows, 64 or 128).",
    ),
    Knob(
        "blk_n",
        int,
        128,
        (8, 16, 24, 32, 40, 48, 64, 96, 128, 192, 256, *RAGGED_BLK_N, *FITTED_BLK_N),
        "Columns of the CTA tile, wgmma's N (with swap_ab: its extent along the problem's M). The template "
        "builds any multiple of 8 in 8..256; 136..248 (off the 64-wide box) let ragged problems' tiles fill "
        "the SMs' rounds, and the chunked TMA store ends them in a narrower box; 56..120 fit a swapped "
        "tile to a token count M in steps of 8.",
    ),
    Knob(
        "blk_k",
        int,
        64,
        (64, 128, 256),
        "The k-tile: one to four 128-byte swizzle atoms of K a stage, one TMA box each (256: a memory-bound "
        "tile's rows arrive 512 B at a time).",
    ),
    Knob(
        "stages",
        int,
        4,
        (1, 2, 3, 4, 5, 6, 8),
        "Depth of the shared-memory ring. The template builds up to 20 where shared memory fits, but deeper "
        "decode rings measured slower under the suite's flush (bench/results/kits/2026-12-01-decode-deep.md), "
        "so the search stops at 8.",
    ),
    Knob(
        "consumers",
        int,
        2,
        (1, 2, 3, 4),
        "Consumer warpgroups issuing the wgmma MMAs: cooperative ones split blk_m evenly (64 or 128 rows "
        "each), ping-pong ones each compute whole tiles.",
    ),
    Knob(
        "warp_specialized",
        bool,
        True,
        (False, True),
        "A separate producer warpgroup issues the TMA loads; otherwise one consumer thread issues them ahead "
        "of the MMAs.",
    ),
    Knob(
        "persistent",
        bool,
        False,
        (False, True),
        "One CTA per SM (at most), each looping over output tiles; otherwise one CTA per tile.",
    ),
    Knob(
        "raster_group",
        int,
        1,
        (0, 1, 8, 16),
        "Tile rows (along M) visited together by consecutive tile indices: 1 row-major, 0 all of them "
        "(column-major); persistent only.",
    ),
    Knob(
        "epilogue",
        str,
        "register",
        EPILOGUES,
        'How the output leaves: "register" (fragments stored straight to global memory), "tma" (stmatrix '
        'into a shared-memory staging tile, then a TMA store) or "tma_chunked" (the same, one 64x64 box at a '
        "time through two small buffers per consumer, so one box's stmatrix overlaps the previous box's "
        'store). With swap_ab: "register" or "tma_chunked", whose boxes are staged transposed (stmatrix '
        ".trans), the last one D's last rows where blk_n is off the 64-wide box "
        "(`rules.swap_ab_supported`, `store_box_divides_tile`).",
    ),
    Knob(
        "cluster",
        int,
        1,
        CLUSTER_SIZES,
        "CTAs per thread-block cluster (1: no cluster), multicasting the operand tile they share with TMA, a "
        "slice of whole 8-row swizzle atoms each (uneven where the atoms do not split evenly: 136 rows over 2 CTAs "
        "are 72 + 64).",
    ),
    Knob(
        "cluster_dim",
        str,
        "m",
        CLUSTER_DIMS,
        'The axis ("m" or "n") along which the cluster\'s CTAs lie; ignored without a cluster.',
    ),
    Knob(
        "schedule",
        str,
        "cooperative",
        SCHEDULES,
        'The consumers\' roles: "cooperative" (they split blk_m of one tile) or "pingpong" (each computes '
        "whole blk_m x blk_n tiles, alternating, so one's epilogue overlaps the other's MMAs).",
    ),
    Knob(
        "reg_split",
        str,
        "232/40",
        REG_SPLITS,
        '"consumer/others": the registers a consumer thread and a producer (or epilogue warpgroup) thread '
        "hold after setmaxnreg, where the kernel rebalances.",
    ),
    Knob(
        "loader",
        str,
        "tma",
        LOADERS,
        '"tma" (the copy engine fills the ring) or "threads" (every consumer thread copies 16-byte chunks '
        "into the swizzled stage; one stage, no producer: the seed journey's first steps).",
    ),
    Knob(
        "epilogue_warpgroup",
        bool,
        False,
        (False, True),
        "(hopper-gemm/4) A separate epilogue warpgroup issues the TMA stores: the consumers stage their "
        "fragments in shared memory (stmatrix), hand each buffer over through an mbarrier and go on; it "
        "stores the buffer and hands it back once the store has read it.",
    ),
    Knob(
        "swap_ab",
        bool,
        False,
        (False, True),
        "(hopper-gemm/5) The kernel computes D^T = B A^T: the problem's N runs along wgmma's 64-row M and its "
        "M becomes wgmma's N (8..256 in steps of 8), so a small M (decode, small batches) fits a narrow wgmma. "
        "D stays row-major (M, N), stored transposed from the fragment (from registers, or through the "
        "chunked TMA store's transposed boxes). blk_m, blk_n, consumers and "
        "cluster_dim name the kernel's own (post-swap) axes.",
    ),
    Knob(
        "split_k",
        int,
        1,
        SPLIT_KS,
        "(hopper-gemm/5) split_k CTAs compute the same output tile, each over 1/split_k of the k-tiles, and "
        "sum their fp32 partial tiles (split_k_reduce).",
    ),
    Knob(
        "split_k_reduce",
        str,
        "dsmem",
        SPLIT_K_REDUCES,
        '(hopper-gemm/5) How split-K partial tiles are summed: "dsmem" (a cluster of split_k CTAs; each parks '
        "its fragment in its own shared memory, then CTA r sums its share of the tile over every peer, in rank "
        'order, through distributed shared memory) or "serial" (added in turn through a global workspace).',
    ),
    Knob(
        "l2_hint",
        str,
        "none/none",
        L2_HINTS,
        '(hopper-gemm/5) The L2 eviction priority of the TMA loads of the kernel\'s A and B, "<A>/<B>", each '
        '"none" (the default policy), "first" (evict_first: a streamed operand, read once) or "last" '
        "(evict_last: an operand re-read by many CTAs). With swap_ab, A is the problem's B.",
    ),
    Knob(
        "l2_promotion",
        str,
        "128B",
        L2_PROMOTIONS,
        '(hopper-gemm/5) The L2 promotion of the load tensor maps: "128B" (TVM\'s default) or "256B" (an L2 '
        "miss fetches 256 bytes, so a box row's neighbouring 128-byte atom arrives with it).",
    ),
    Knob(
        "prefetch_tensormap",
        bool,
        False,
        (False, True),
        "(hopper-gemm/5) Warp 0 prefetches every tensor map's descriptor when the kernel starts "
        "(prefetch.tensormap), before the first TMA needs it.",
    ),
    Knob(
        "trim",
        bool,
        False,
        (False,),
        "(hopper-gemm/5) The MMAs of a ragged problem's edge tiles skip what lies past the problem: an m64 block "
        "wholly past M issues no wgmma, the last tile column multiplies with a narrower wgmma, the last k-tile "
        "stops after its last k16 step that starts before K. The template builds it, but it measured slower in "
        "every pair (bench/results/kits/2026-11-30-trim.md), so the search draws only the default.",
    ),
    Knob(
        "peel_k",
        bool,
        False,
        (False, True),
        "(hopper-gemm/5) trim's last cut alone, without its branches: the k loop runs one k-tile short and the "
        "last k-tile follows as straight-line code issuing only its k16 steps that start before K, so the K "
        "tail's zero padding costs no MMA.",
    ),
    Knob(
        "k_rotate",
        bool,
        False,
        (False, True),
        "(hopper-gemm/5) Each tile loads its k-tiles starting at its own one (its linear index modulo the "
        "k-tiles, wrapping), so CTAs streaming a weight matrix at once read different column blocks of their "
        "rows; only where one operand is streamed once.",
    ),
    Knob(
        "split_k_scope",
        str,
        "all",
        SPLIT_K_SCOPES,
        '(hopper-gemm/5) Which tiles split_k splits: "all", or only the "tail" (the tiles of the last, partial '
        "wave: tiles mod the 132 SMs), so that the last wave's work spreads over the SMs while the whole waves "
        "run one CTA a tile over the whole K (a split-K and data-parallel hybrid; serial reduction).",
    ),
    Knob(
        "stream_k",
        bool,
        False,
        (False,),
        "(hopper-gemm/5) Stream-K: one persistent CTA an SM, each multiplying an equal share of all the "
        "tiles' k-tiles, so every SM round is full; a tile whose k-tiles two CTAs share is finished by the "
        "one holding its first k-tile, which adds the other's fp32 partial tile from a global workspace "
        "(at least one round of tiles). Correct on the GPU (bench/results/sweeps/2026-12-03-stream-fuzz-smoke.md) "
        "but slower than the same tile data-parallel on most problems measured, so the search does not draw it "
        '(docs/perf-notes.md, "Stream-K").',
    ),
    Knob(
        "stream_k_scope",
        str,
        "all",
        ("all",),
        '(hopper-gemm/5) Which tiles stream_k shares out: "all", or only the "tail" (the last whole round '
        "of tiles and the partial one), every round before run data-parallel, one whole tile a CTA, so that "
        "neighbouring CTAs read the same operand blocks at the same k-step as the persistent kernel's do. "
        "Correct on the GPU (bench/results/sweeps/2026-12-06-stream-tail-fuzz.md, "
        "2026-12-07-swap-stream-fuzz.md) but slower than the same tile data-parallel on every problem "
        "measured (bench/results/kits/2026-12-06-stream-tail-perf.md, 2026-12-07-swap-stream.md), so "
        f"the search does not draw it (values: {', '.join(STREAM_K_SCOPES)}).",
    ),
    Knob(
        "block_stagger",
        bool,
        False,
        (False,),
        "(hopper-gemm/5) Block-scaled FP8 with two product buffers: odd consumers multiply their first "
        "k-tile alone and then pair the rest, so that a pair's end, where a consumer waits for its last "
        "wgmma and promotes it with none of its own in flight, falls while the other consumer's wgmma run. "
        "Built; the search does not draw it until its correctness sweep and its speed kit have run on the "
        "GPU (bench/prebuild.py sets fp8-stagger-fuzz and fp8-stagger).",
    ),
    home="tirtune.space.hopper.knobs:KNOBS",
    # The knobs of hopper-gemm/1, always in a config's canonical text; every knob added since is
    # written only off its default (the hopper-gemm/1 behaviour), so older configs keep their digests.
    first=("blk_m", "blk_n", "blk_k", "stages", "consumers", "warp_specialized"),
    labels=LABELS,
)


def config(*values: Any, **knobs: Any) -> Config:
    """A Hopper config: the knobs given (by name, or by position in the table's order) checked
    against the table, every other knob at its default."""
    return Config(KNOBS, *values, **knobs)
