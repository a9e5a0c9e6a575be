"""The sweep that lifted two FP8 refusals: the Hopper kernel planned without them, for its set only.

Until 2026-12-06 the Hopper rules refused two paths for e4m3 operands that built but had not run on
a GPU: split-K's reductions and the staged epilogues with the epilogue warpgroup (`SWEPT` below
holds the two rules as they read then). The sweep `fp8-paths-fuzz` (bench/prebuild.py) drew 200
configs that each break one of them, and built them with `build` below, the kernel package as it
is, planned against every other rule: 200 of 200 correct on the H200
(bench/results/sweeps/2026-12-06-fp8-paths-fuzz.md), so the product's rules now take both paths
(stream-K stays refused: `rules.fp8_no_stream_k`). The set is kept so that its draw and its kernels
can be made again. Nothing in the product reaches this module; it is selected by its template
name, `bench.fp8_paths:build`, part of every build's cache key, so these kernels never mix with the
product's.
"""

from __future__ import annotations

from typing import Any

from tirtune.core import Config, Problem
from tirtune.space.hopper import rules

TEMPLATE = "bench.fp8_paths:build"


def register_epilogue(config: Config, problem: Problem) -> str | None:
    """As refused before the sweep: FP8 problems stored D from registers only."""
    if problem.is_fp8 and (config.epilogue != "register" or config.epilogue_warpgroup):
        return f"dtype={problem.dtype}: FP8 problems stored D from registers only before the sweep"
    return None


def whole_sums(config: Config, problem: Problem) -> str | None:
    """As refused before the sweep: FP8 problems ran unsplit (and without stream-K)."""
    if problem.is_fp8 and (config.split_k > 1 or config.stream_k):
        return f"dtype={problem.dtype}: FP8 problems ran unsplit before the sweep"
    return None


# The two refusals the sweep decided: each drawn config breaks one of them.
SWEPT: tuple[Any, ...] = (register_epilogue, whole_sums)


def config_rules() -> tuple[Any, ...]:
    """The Hopper space's config rules: since the sweep, they take both paths (stream-K refused)."""
    return tuple(rules.CONFIG_RULES)


def build(config: Config, problem: Problem) -> Any:
    """The Hopper kernel's PrimFunc, planned against `config_rules()`."""
    from tirtune.kernels.hopper import build as hopper_build

    return hopper_build(config, problem, config_rules())
