"""One branch of the GEMM template: a target architecture and everything that depends on it.

Each branch's package builds its own (`tirtune.space.hopper.BRANCH`,
`tirtune.space.blackwell.BRANCH`): its knob table, its search space, the template it binds
("module:function"), the nvcc target, its status and its start configs. The registry (`tirtune.space.branches`)
composes them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from tirtune.core import Config, KnobTable, Problem
from tirtune.core.problem import FP8
from tirtune.space.shapes import ShapeClass, fitted, shape_class, wave_fitted
from tirtune.space.space import SearchSpace

__all__ = ["FP8_RATE", "Branch", "Status"]

Status = Literal["run", "compile-checked"]
# Dense e4m3 MMA runs at twice the 16-bit rate on Hopper and Blackwell alike (H200: 1,979 against
# 989 TFLOP/s at 1.83 GHz).
FP8_RATE = 2


def _never(config: Config) -> bool:
    return False


def _same(config: Config, problem: Problem) -> Config:
    return config


@dataclass(frozen=True, slots=True)
class Branch:
    """One architecture's branch of the GEMM template and everything that depends on it."""

    arch: str  # the nvcc target and the name jobs and the API use: "sm_90a"
    name: str  # the GPU family in words: "Hopper"
    # Compute capabilities its code runs on: "9.x" (any minor) or "10.0" (exactly).
    compute_capabilities: tuple[str, ...]
    gpu_models: tuple[str, ...]  # for people: "H100", "H200"
    described: str  # how refusals name it: "Hopper, 9.x"
    knobs: KnobTable  # each knob's type, default, values and meaning on this branch
    space: SearchSpace  # the current search space (its template version names the kernels)
    template: str  # "package.module:function", what compile_one builds and builders key caches by
    gencode: str  # nvcc's -gencode flag for the target
    version_prefix: str  # template versions of this branch start so ("blackwell-")
    status: Status  # "run": trials verified and timed on such a GPU; "compile-checked": built only
    status_text: str  # the status in the words the API, the CLI and the docs show
    start_with: Mapping[ShapeClass, tuple[Config, ...]]  # a job's first trials, per shape class
    # Dense 16-bit MMA flops one SM does per clock: the roofline's compute ceiling is SMs x this x
    # the SM clock (core/roofline.py). Hopper: 989.4 TFLOP/s = 132 SMs x 4096 x 1.83 GHz. FP8
    # operands run at FP8_RATE times this (`peak_tflops`).
    mma_flops_per_sm_clock: int
    gpu_name_pattern: str | None = None  # NVML names of its GPUs, where a note must name the branch
    # Whether a start config's blk_n is chosen per problem to fill the SMs' rounds (shapes.wave_fitted).
    wave_fit: Callable[[Config], bool] = _never
    # The branch's own change to a start config before its tile is fitted (as it is: `_same`).
    fit_start: Callable[[Config, Problem], Config] = _same
    # The branch's own change to a start config once its tile is fitted (as it is: `_same`).
    fit_tiled: Callable[[Config, Problem], Config] = _same

    @property
    def measured(self) -> bool:
        """Whether its results have been verified and timed on its own GPUs."""
        return self.status == "run"

    def runs_on(self, major: int, minor: int) -> bool:
        return any(_cc_matches(cc, major, minor) for cc in self.compute_capabilities)

    def start_configs(self, problem: Problem) -> tuple[Config, ...]:
        """Where a job on `problem` starts: the configs of its shape class, changed as the branch
        says (`fit_start`: on Hopper, a peeled last k-tile kept only where K leaves k16 steps to
        skip), their tiles fitted to the problem (`shapes.fitted`: swap-AB's wgmma N to a small M,
        a tile wider than N; those `wave_fit` names get the valid blk_n that best fills the SMs,
        `shapes.wave_fitted`), then changed as the branch says once the tile is fitted
        (`fit_tiled`: on Hopper, a block-scaled swapped tile the block rules refuse unswapped, and
        the K split no deeper than adds no round of CTAs), each once."""
        widths = tuple(self.space.knobs.get("blk_n", ()))
        configs = self.start_with[shape_class(problem)]
        if not widths:
            return tuple(dict.fromkeys(configs))

        def fit(c: Config) -> Config:
            c = self.fit_start(c, problem)
            if self.wave_fit(c):
                c = wave_fitted(c, problem, widths, lambda w: self.space.is_valid(w, problem))
            else:
                c = fitted(c, problem, widths)
            return self.fit_tiled(c, problem)

        return tuple(dict.fromkeys(fit(c) for c in configs))

    def peak_tflops(self, sm_count: int | None, sm_clock_mhz: float | None, dtype: str = "float16") -> float | None:
        """The MMA ceiling of a GPU of `sm_count` SMs at `sm_clock_mhz` for operands of `dtype`
        (None if either is unknown): e4m3 operands at FP8_RATE times the 16-bit rate."""
        if not sm_count or not sm_clock_mhz:
            return None
        rate = self.mma_flops_per_sm_clock * (FP8_RATE if dtype == FP8 else 1)
        return sm_count * rate * sm_clock_mhz * 1e6 / 1e12

    def names_gpu(self, gpu_name: str) -> bool:
        return self.gpu_name_pattern is not None and re.search(self.gpu_name_pattern, gpu_name, re.I) is not None


def _cc_matches(cc: str, major: int, minor: int) -> bool:
    want_major, _, want_minor = cc.partition(".")
    return int(want_major) == major and (want_minor == "x" or int(want_minor) == minor)
