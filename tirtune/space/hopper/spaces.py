"""The Hopper (sm_90a) search spaces of the GEMM template, one per template version.

What each knob means, and the values the current space (hopper-gemm/5) draws: the knob table,
`tirtune.space.hopper.knobs`. The older versions' spaces (their recorded data replays need them)
hold their own, narrower ranges, below, and every knob they lack at its default.
"""

from __future__ import annotations

from tirtune.core import Config, Problem
from tirtune.space.errors import SpaceError
from tirtune.space.hopper.knobs import KNOBS, REG_SPLITS
from tirtune.space.hopper.rules import (
    CONFIG_RULES,
    PROBLEM_RULES,
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
    table=KNOBS,
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
    table=KNOBS,
    problem_rules=PROBLEM_RULES,
    config_rules=V4_CONFIG_RULES,
)


def same_kernel(config: Config) -> Config:
    """`config` with the knobs the template ignores at its values put back at their defaults:
    cluster_dim without a cluster (no cluster to lay along M or N) and split_k_reduce without a
    split (nothing to reduce). Checked by lowering both (tests/test_local_search.py)."""
    if config.cluster == 1 and config.cluster_dim != "m":
        config = config.replace(cluster_dim="m")
    if config.split_k == 1 and config.split_k_reduce != "dsmem":
        config = config.replace(split_k_reduce="dsmem")
    return config


# hopper-gemm/5 (small, skinny, ragged and decode GEMMs): swap_ab (D^T = B A^T, the
# problem's M on wgmma's N), narrow tiles (blk_n 8-48 and 96: small problems fill the 132 SMs and
# a swapped small M fits wgmma's N), 8-stage rings, split-K clusters reducing through distributed
# shared memory, and one-row operands (M or N = 1). Every hopper-gemm/4 config generates the same kernel as
# before (tests/test_template_fold.py). Added later under the same version (every earlier /5 kernel
# byte-identical): four swizzle atoms a stage (blk_k 256), the TMA loads' L2 eviction priorities
# (l2_hint), the tensor maps' L2 promotion and the descriptor prefetch, the ragged widths
# (blk_n 136..248), the trimmed edge-tile MMAs (trim), the peeled last k-tile (peel_k), the
# rotated k loop (k_rotate) and the split of the last wave's tiles alone (split_k_scope). Its
# values are the knob table's; `_WALK` is the order its searches walk the grid in (and so which
# configs they draw), trim first.
_WALK = (
    "trim",
    "blk_m",
    "blk_n",
    "blk_k",
    "stages",
    "consumers",
    "warp_specialized",
    "persistent",
    "raster_group",
    "epilogue",
    "schedule",
    "reg_split",
    "cluster",
    "cluster_dim",
    "loader",
    "epilogue_warpgroup",
    "swap_ab",
    "split_k",
    "split_k_reduce",
    "l2_hint",
    "l2_promotion",
    "prefetch_tensormap",
    "peel_k",
    "k_rotate",
    "split_k_scope",
    "stream_k",
    "stream_k_scope",
    "block_stagger",
)


def tail_twins(config: Config, problem: Problem) -> list[Config]:  # noqa: ARG001 (a jump's signature)
    """`config`'s tile with only its last, partial wave split (split_k_scope "tail"), at every
    split of the knob table: one CTA a tile (not persistent, no cluster, cooperative consumers),
    the register epilogue, the serial reduction, a producer. Five knobs or more from `config`, so
    no one-knob neighbour reaches it; the space keeps the valid ones (`SearchSpace.jumps_from`)."""
    base = config.replace(
        persistent=False,
        raster_group=1,
        cluster=1,
        cluster_dim="m",
        schedule="cooperative",
        epilogue="register",
        epilogue_warpgroup=False,
        warp_specialized=True,
        k_rotate=False,
        split_k_reduce="serial",
        split_k_scope="tail",
    )
    return [base.replace(split_k=s) for s in KNOBS["split_k"].values if isinstance(s, int) and s > 1]


def ring_twins(config: Config, problem: Problem) -> list[Config]:  # noqa: ARG001 (a move's signature)
    """`config`'s ring cut the other way, at the same shared-memory bytes: k-tiles half as deep
    in twice the stages, or twice as deep in half the stages (64x128x128 s4 <-> 64x128x64 s8).
    A ring that fills shared memory has no one-knob move to its twin (more stages alone do not
    fit; a shallower k-tile alone halves the ring), and the twins differ: of 49 measured pairs
    on file, about 60% by more than 2% (docs/perf-notes.md, "Ring twins")."""
    twins = []
    if config.blk_k % 2 == 0:
        twins.append(config.replace(blk_k=config.blk_k // 2, stages=config.stages * 2))
    if config.stages % 2 == 0:
        twins.append(config.replace(blk_k=config.blk_k * 2, stages=config.stages // 2))
    return twins


HOPPER = SearchSpace(
    arch="sm_90a",
    template_version=TEMPLATE_VERSION,
    knobs=KNOBS.grid(_WALK),
    table=KNOBS,
    problem_rules=PROBLEM_RULES,
    config_rules=CONFIG_RULES,
    normal_form=same_kernel,
    jumps=(tail_twins,),
    coupled=(ring_twins,),
)

# hopper-gemm/2: persistent CTAs, grouped rasterization, the whole-tile TMA-store epilogue.
HOPPER_V2 = SearchSpace(
    arch="sm_90a",
    template_version="hopper-gemm/2",
    knobs=_V2_KNOBS,
    table=KNOBS,
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
    table=KNOBS,
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
