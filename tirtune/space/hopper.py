"""The Hopper (sm_90a) search spaces of the GEMM template, one per template version.

What the knobs mean on Hopper (`tirtune.kernels.hopper`; a space of an older version
holds the knobs it lacks at their defaults):

- blk_m/blk_n/blk_k: the CTA tile. consumers: consumer warpgroups, splitting blk_m evenly (each
  owns blk_m/consumers rows, 64 or 128). stages: depth of the shared-memory ring.
  warp_specialized: a separate producer warpgroup issues the TMA loads; otherwise one consumer
  thread issues them ahead of the MMAs.
- persistent: one CTA per SM (at most), each looping over output tiles; raster_group: tile rows
  (along M) visited together by consecutive tile indices (1 = row-major, 0 = all of them:
  column-major), persistent only.
- epilogue: "register" (fragments stored straight to global memory) or "tma" (stmatrix into a
  shared-memory staging tile, then a TMA store); "tma_chunked": the same, staged one 64x64 box
  at a time through two small buffers per consumer, so one box's stmatrix overlaps the previous
  box's TMA store.
- cluster: CTAs per thread-block cluster (1 = no cluster); cluster_dim: the axis ("m" or "n")
  along which the cluster's CTAs lie.
- schedule: the consumers' warp roles: "cooperative" (they split blk_m of one tile) or
  "pingpong" (each computes whole blk_m x blk_n tiles, alternating, so one's epilogue overlaps
  the other's MMAs). reg_split: "consumer/producer" registers a thread after setmaxnreg.
  loader: "tma" (the copy engine fills the ring) or "threads" (every consumer thread copies
  16-byte chunks into the swizzled stage; one stage, no producer: the seed journey's first
  steps).
- epilogue_warpgroup (hopper-gemm/4): a separate epilogue warpgroup issues the TMA stores. The
  consumers still stage their register fragments in shared memory (stmatrix), then hand each
  staged buffer over through an mbarrier and go on; the epilogue warpgroup stores it and hands it
  back once the store has read it.
- swap_ab (hopper-gemm/5): the kernel computes D^T = B A^T, so the problem's N runs along wgmma's
  64-row M and the problem's M becomes wgmma's N (8..256 in steps of 8): a small M (decode, small
  batches) fits a narrow wgmma instead of a 64-row block that is mostly padding. D stays
  row-major (M, N); the fragment is stored transposed. blk_m, blk_n, consumers and cluster_dim
  always name the kernel's own (post-swap) axes: with swap_ab, blk_m is the tile's extent along
  the problem's N and blk_n its extent along the problem's M (so every tile, register and
  shared-memory rule reads the same with and without the swap).
- split_k (hopper-gemm/5): the CTAs of a thread-block cluster of split_k CTAs compute the same
  output tile, each over 1/split_k of the k-tiles; split_k_reduce names how their fp32 partial
  tiles are summed: "dsmem" (each CTA parks its fragment in its own shared memory, a cluster
  barrier, then CTA r sums its share of the tile over every peer, in rank order, through
  distributed shared memory and stores it) or "serial" (added in turn through a global
  workspace).
- l2_hint (hopper-gemm/5, later additions): the L2 eviction priority the TMA loads of the
  kernel's A and B operands carry, "<A>/<B>" with each "none" (no hint: the default policy),
  "first" (evict_first: a streamed operand, read once) or "last" (evict_last: an operand re-read
  by many CTAs). A and B are the kernel's operands (with swap_ab, A is the problem's B).
  l2_promotion: the L2 promotion of the load tensor maps ("128B", TVM's default, or "256B": an
  L2 miss fetches 256 bytes, so a box row's neighbouring 128-byte atom arrives with it).
  prefetch_tensormap: warp 0 prefetches every tensor map's descriptor when the kernel starts
  (prefetch.tensormap), before the first TMA needs it.
- trim (hopper-gemm/5): the MMAs of a ragged problem's edge tiles skip what lies past
  the problem: an m64 block whose rows all lie past M issues no wgmma, the last tile column
  multiplies with a narrower wgmma (its valid columns rounded up to 8), the last k-tile stops
  after its last k16 step that starts before K. The loads, barriers and stores are unchanged.
- peel_k (hopper-gemm/5): only trim's last cut, without its branches: the consumers'
  k loop runs one k-tile short and the last k-tile follows as straight-line code issuing only
  its k16 steps that start before K (K = 2000 in 64-deep k-tiles: 1 of 4), so the K tail's
  zero padding costs no MMA and the loop's body is the unpeeled one.
- k_rotate (hopper-gemm/5): each tile loads its k-tiles starting at its own one (its
  linear index modulo the k-tiles, wrapping), so the CTAs streaming a weight matrix at the same
  time read different column blocks of their rows; only where one operand is streamed once.
"""

from __future__ import annotations

from dataclasses import replace

from tirtune.core import Config
from tirtune.space.errors import SpaceError
from tirtune.space.rules import (
    CONFIG_RULES,
    L2_HINTS,
    L2_PROMOTIONS,
    PROBLEM_RULES,
    RAGGED_BLK_N,
    REG_SPLITS,
    SPLIT_K_REDUCES,
    SPLIT_KS,
    V2_CONFIG_RULES,
    V3_CONFIG_RULES,
    V3_REG_SPLITS,
    V4_CONFIG_RULES,
)
from tirtune.space.space import SearchSpace

__all__ = ["HOPPER", "HOPPER_V1", "HOPPER_V2", "HOPPER_V3", "HOPPER_V4", "SPACES", "TEMPLATE_VERSION", "space_for"]

# Bump whenever the generated kernel for a given config can change: it is part of every
# measurement's identity, so old measurements become stale rather than wrong.
TEMPLATE_VERSION = "hopper-gemm/5"

_V1_KNOBS = {
    "blk_m": (64, 128, 256),
    "blk_n": (64, 128, 192, 256),
    "blk_k": (64, 128),
    "stages": (2, 3, 4, 5, 6),
    "consumers": (1, 2),
    "warp_specialized": (False, True),
}

_V2_KNOBS = {
    **_V1_KNOBS,
    "persistent": (False, True),
    "raster_group": (1, 8),
    "epilogue": ("register", "tma"),
}

# hopper-gemm/3 (its space replays the datasets under bench/data/): ping-pong consumers, the
# chunked TMA-store epilogue, the setmaxnreg split and 2/4-CTA clusters with TMA multicast along
# M or N. At their defaults the new knobs generate the hopper-gemm/2 kernel (the template version
# still changes: it names the code that generated it).
_V3_KNOBS = {
    **_V2_KNOBS,
    "blk_m": (64, 128, 192, 256),
    "stages": (1, 2, 3, 4, 5, 6),
    "consumers": (1, 2, 3),
    # Groups of 16 tile rows measured best for ping-pong 128x128 (1.035 vs 1.031 for 8: noise).
    "raster_group": (1, 8, 16),
    "epilogue": ("register", "tma", "tma_chunked"),
    "schedule": ("cooperative", "pingpong"),
    "reg_split": V3_REG_SPLITS,
    "cluster": (1, 2, 4),
    "cluster_dim": ("m", "n"),
    "loader": ("tma", "threads"),
}

HOPPER_V3 = SearchSpace(
    arch="sm_90a",
    template_version="hopper-gemm/3",
    knobs=_V3_KNOBS,
    problem_rules=PROBLEM_RULES,
    config_rules=V3_CONFIG_RULES,
)

# hopper-gemm/4: a fourth consumer warpgroup (256-row tiles, 64 rows each), a separate epilogue
# warpgroup that issues the TMA stores, the register splits those layouts need, and column-major
# rasterization. A hopper-gemm/3 config generates the same kernel as before
# (tests/test_template_fold.py).
_V4_KNOBS = {
    **_V3_KNOBS,
    "consumers": (1, 2, 3, 4),
    # 0: column-major (one group of every tile row), beside row-major (1) and grouped.
    "raster_group": (0, 1, 8, 16),
    "reg_split": REG_SPLITS,
    "epilogue_warpgroup": (False, True),
}
HOPPER_V4 = SearchSpace(
    arch="sm_90a",
    template_version="hopper-gemm/4",
    knobs=_V4_KNOBS,
    problem_rules=PROBLEM_RULES,
    config_rules=V4_CONFIG_RULES,
)


def same_kernel(config: Config) -> Config:
    """`config` with the knobs the template ignores at its values put back at their defaults:
    cluster_dim without a cluster (no cluster to lay along M or N) and split_k_reduce without a
    split (nothing to reduce). Checked by lowering both (tests/test_local_search.py)."""
    if config.cluster == 1 and config.cluster_dim != "m":
        config = replace(config, cluster_dim="m")
    if config.split_k == 1 and config.split_k_reduce != "dsmem":
        config = replace(config, split_k_reduce="dsmem")
    return config


# hopper-gemm/5 (small, skinny, ragged and decode GEMMs): swap_ab (D^T = B A^T, the
# problem's M on wgmma's N), narrow tiles (blk_n 8-48 and 96: small problems fill the 132 SMs and
# a swapped small M fits wgmma's N), 8-stage rings, split-K clusters reducing through distributed
# shared memory, and one-row operands (M or N = 1). Every hopper-gemm/4 config generates the same kernel as
# before (tests/test_template_fold.py). Added later under the same version (every earlier /5 kernel
# byte-identical): four swizzle atoms a stage (blk_k 256), the TMA loads' L2 eviction priorities
# (l2_hint), the tensor maps' L2 promotion and the descriptor prefetch, the ragged widths
# (blk_n 136..248), the trimmed edge-tile MMAs (trim) and the peeled last k-tile (peel_k).
HOPPER = SearchSpace(
    arch="sm_90a",
    template_version=TEMPLATE_VERSION,
    knobs={
        # MMAs trimmed to a ragged problem's valid part (the edge tiles' dead rows, columns, k):
        # measured slower in every pair (bench/results/kits/2026-11-30-trim.md: 3000x5000x2000
        # 128x192 0.967x -> 0.881x, 4000^3 bf16 128x256 0.967x -> 0.936x; the per-k-tile branches
        # around the wgmma runs cost more than the skipped MMAs save), so the search no longer
        # draws it: the template keeps the knob (trim=True is valid, built by the kits), the grid
        # holds only its default.
        "trim": (False,),
        **_V4_KNOBS,
        # 136..248 (off the 64-wide box, above 128): ragged problems' tiles can fill the SMs'
        # rounds (shapes.wave_fitted); tma_chunked stores their last box narrower.
        "blk_n": (8, 16, 24, 32, 40, 48, 64, 96, 128, 192, 256, *RAGGED_BLK_N),
        # 256: four 128-byte atoms a stage (a memory-bound tile's rows arrive 512 B at a time).
        "blk_k": (64, 128, 256),
        # A deep ring keeps a memory-bound decode tile's loads in flight. The template builds up to
        # MAX_STAGES (20) where shared memory fits, but deeper decode rings measured slower under
        # the suite's flush (bench/results/kits/2026-12-01-decode-deep.md: 64x16x128 s8 1.267x, s10
        # 1.228x, s11 1.191x; 64x16x64 s20 1.064x), so the grid stops at 8.
        "stages": (1, 2, 3, 4, 5, 6, 8),
        "swap_ab": (False, True),
        "split_k": SPLIT_KS,
        "split_k_reduce": SPLIT_K_REDUCES,
        "l2_hint": L2_HINTS,
        "l2_promotion": L2_PROMOTIONS,
        "prefetch_tensormap": (False, True),
        # The last k-tile's padded k16 steps skipped after the loop (a K that is not a multiple
        # of blk_k; the rule refuses it elsewhere).
        "peel_k": (False, True),
        # Each tile's k loop from its own k-tile on (a streamed operand read in staggered columns).
        "k_rotate": (False, True),
    },
    problem_rules=PROBLEM_RULES,
    config_rules=CONFIG_RULES,
    normal_form=same_kernel,
)

# hopper-gemm/2: persistent CTAs, grouped rasterization, the whole-tile TMA-store epilogue.
HOPPER_V2 = SearchSpace(
    arch="sm_90a",
    template_version="hopper-gemm/2",
    knobs=_V2_KNOBS,
    problem_rules=PROBLEM_RULES,
    config_rules=V2_CONFIG_RULES,
)

# hopper-gemm/1: one CTA per tile and the register epilogue (the new knobs at their defaults,
# which generate the hopper-gemm/1 kernel unchanged). The recorded measurements under
# bench/data/ are of this version; replaying them needs its space.
HOPPER_V1 = SearchSpace(
    arch="sm_90a",
    template_version="hopper-gemm/1",
    knobs=_V1_KNOBS,
    problem_rules=PROBLEM_RULES,
    config_rules=V2_CONFIG_RULES,
)

SPACES = {space.template_version: space for space in (HOPPER, HOPPER_V4, HOPPER_V3, HOPPER_V2, HOPPER_V1)}


def space_for(template_version: str) -> SearchSpace:
    """The space whose kernels `template_version` names."""
    try:
        return SPACES[template_version]
    except KeyError:
        known = ", ".join(sorted(SPACES))
        raise SpaceError(f"unknown template version {template_version!r}; known: {known}") from None
