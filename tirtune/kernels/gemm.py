"""The GEMM template's one entry: `build(config, problem, arch)` picks the architecture's branch.

One template, an architecture switch resolved at trace time (docs/design.md, "One template, several
architectures"). The switch is here; the shared skeleton is `skeleton.py` (the plan's common part and tile schedule, the
swizzled ring tiles in the shared-memory pool, the mbarrier ring's bookkeeping, barrier
publication, raster mapping and persistent tile loops, the TMA producer's loop, the thread
loader's guarded copy); each branch, the package `hopper` (sm_90a: wgmma, register accumulators)
or `blackwell` (sm_100a: tcgen05, TMEM accumulators, CTA pairs), is that skeleton plus its
barriers, loads, MMA issue, warp roles and epilogue, a module each. The branches' kernel bodies
stay two functions: beyond the skeleton, most of their statements differ.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from tirtune.core import Config, Problem
from tirtune.space.branches import BRANCHES, DEFAULT_ARCH, branch

__all__ = ["TEMPLATES", "build", "load", "template_for"]

# arch -> "module:function", the form compile_one and TirxBuilder take (and key their caches by);
# the registry's (tirtune.space.branches).
TEMPLATES = {arch: b.template for arch, b in BRANCHES.items()}


def template_for(arch: str) -> str:
    """The "module:function" of `arch`'s branch; SpaceError naming the known archs otherwise."""
    return branch(arch).template


def load(spec: str) -> Callable[[Config, Problem], Any]:
    """Resolve "package.module:function" to a template's build function."""
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"template {spec!r} must look like 'package.module:function'")
    return getattr(importlib.import_module(module_name), attr)  # type: ignore[no-any-return]


def build(config: Config, problem: Problem, arch: str = DEFAULT_ARCH) -> Any:
    """The PrimFunc of (config, problem) for `arch`; SpaceError if the branch refuses the pair (and
    for an unknown arch, naming the known ones)."""
    return load(template_for(arch))(config, problem)
