"""The GEMM template's one entry: `build(config, problem, arch)` picks the architecture's branch.

DESIGN.md decision 6: one template, an architecture switch resolved at trace time. The switch is
here; the shared skeleton is `skeleton.py` (the plan's common part and tile schedule, the
swizzled ring tiles in the shared-memory pool, the mbarrier ring's bookkeeping, barrier
publication, raster mapping and persistent tile loops, the TMA producer's loop, the thread
loader's guarded copy); each branch, `hopper_gemm` (sm_90a: wgmma, register accumulators) and
`blackwell_gemm` (sm_100a: tcgen05, TMEM accumulators, CTA pairs), is that skeleton plus its
barriers, loads, MMA issue, warp roles and epilogue. The branches' kernel bodies stay two
functions: beyond the skeleton, most of their statements differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tirtune.space.config import Config
from tirtune.space.errors import SpaceError
from tirtune.space.problem import Problem
from tirtune.space.templates import blackwell_gemm, hopper_gemm

__all__ = ["TEMPLATES", "build", "template_for"]

# arch -> "module:function", the form compile_one and TirxBuilder take (and key their caches by).
TEMPLATES = {
    "sm_90a": "tirtune.space.templates.hopper_gemm:build",
    "sm_100a": "tirtune.space.templates.blackwell_gemm:build",
}
_BRANCHES: dict[str, Callable[[Config, Problem], Any]] = {
    "sm_90a": hopper_gemm.build,
    "sm_100a": blackwell_gemm.build,
}


def template_for(arch: str) -> str:
    try:
        return TEMPLATES[arch]
    except KeyError:
        raise SpaceError(f"no GEMM template branch for {arch!r}; known: {', '.join(sorted(TEMPLATES))}") from None


def build(config: Config, problem: Problem, arch: str = "sm_90a") -> Any:
    """The PrimFunc of (config, problem) for `arch`; SpaceError if the branch refuses the pair."""
    template_for(arch)  # an unknown arch is refused with the known ones named
    return _BRANCHES[arch](config, problem)
