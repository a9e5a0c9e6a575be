"""Hypothesis strategies for the domain: problems and configurations (valid or not)."""

from __future__ import annotations

from hypothesis import strategies as st

from tirtune.space import HOPPER, Config, Problem
from tirtune.space.hopper.knobs import config as hopper_config

__all__ = ["configs", "grid_configs", "problems", "tma_problems"]


def problems(max_dim: int = 20_000) -> st.SearchStrategy[Problem]:
    dim = st.integers(min_value=1, max_value=max_dim)
    return st.builds(Problem, dim, dim, dim, st.sampled_from(["float16", "bfloat16"]))


def tma_problems(max_dim: int = 20_000) -> st.SearchStrategy[Problem]:
    """Problems TMA can address: K a multiple of 8."""
    dim = st.integers(min_value=1, max_value=max_dim)
    k = st.integers(min_value=1, max_value=max_dim // 8).map(lambda v: 8 * v)
    return st.builds(Problem, dim, dim, k, st.sampled_from(["float16", "bfloat16"]))


def grid_configs() -> st.SearchStrategy[Config]:
    """Points of the Hopper knob grid."""
    return st.builds(hopper_config, **{name: st.sampled_from(list(values)) for name, values in HOPPER.knobs.items()})


def configs() -> st.SearchStrategy[Config]:
    """Arbitrary configs, well outside the grid too."""
    small = st.integers(min_value=-64, max_value=1024)
    return st.builds(hopper_config, blk_m=small, blk_n=small, blk_k=small, stages=st.integers(-2, 12),
                     consumers=st.integers(-1, 5), warp_specialized=st.booleans(), persistent=st.booleans(),
                     raster_group=st.integers(-2, 20), epilogue=st.sampled_from(["register", "tma", "smem"]),
                     swap_ab=st.booleans(), split_k=st.integers(-1, 9),
                     split_k_reduce=st.sampled_from(["dsmem", "atomic"]),
                     loader=st.sampled_from(["tma", "threads", "cp.async"]),
                     l2_hint=st.sampled_from(["none/none", "first/last", "last/none", "first", "none/evict"]),
                     l2_promotion=st.sampled_from(["128B", "256B", "64B"]), prefetch_tensormap=st.booleans(),
                     trim=st.booleans())
