"""The Hopper kernel planned without the FP8 rules that refuse unchecked paths, for their sweep only.

`tirtune/space/hopper/rules.py` refuses two paths for e4m3 operands until they have run on a GPU
(`FP8_UNCHECKED_PATHS`): split-K's reductions (`fp8_whole_sums`) and the staged epilogues with
the epilogue warpgroup (`fp8_register_epilogue`). Both lower and compile; whether they are right
is the question of the sweep `fp8-paths-fuzz` (bench/prebuild.py), which builds its kernels with
`build` below: the kernel package as it is, its plan checked against every other rule. Nothing in
the product reaches it; it is selected by its template name, `bench.fp8_paths:build`, which is
part of every build's cache key, so these kernels never mix with the product's. Stream-K stays
refused here too (the sweep never draws it).
"""

from __future__ import annotations

from typing import Any

from tirtune.core import Config, Problem
from tirtune.space.hopper import rules

TEMPLATE = "bench.fp8_paths:build"


def _stream_k_only(config: Config, problem: Problem) -> str | None:
    """`fp8_whole_sums` without its split-K half: stream-K with FP8 operands is still refused."""
    if problem.is_fp8 and config.stream_k:
        return f"dtype={problem.dtype}: stream_k: not built for FP8 operands (bench/fp8_paths.py lifts split-K only)"
    return None


def config_rules() -> tuple[Any, ...]:
    """The Hopper space's config rules less the unchecked FP8 paths (stream-K still refused)."""
    kept = tuple(r for r in rules.CONFIG_RULES if r not in rules.FP8_UNCHECKED_PATHS)
    return (*kept, _stream_k_only)


def build(config: Config, problem: Problem) -> Any:
    """The Hopper kernel's PrimFunc, planned against `config_rules()`."""
    from tirtune.kernels.hopper import build as hopper_build

    return hopper_build(config, problem, config_rules())
