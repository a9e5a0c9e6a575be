"""One entry for the GEMM template: `build(config, problem, arch)` picks the architecture's branch.

DESIGN.md decision 6 wants one template function with an architecture switch; today the two
branches live in `hopper_gemm` (sm_90a) and `blackwell_gemm` (sm_100a) and share the same knob
names and problem contract, and this module is the switch. Folding the shared pieces (shared
memory pool, swizzled layouts, barrier ring, TMA producer, tile mapping) into one body is a
later refactor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tirtune.space.config import Config
from tirtune.space.errors import SpaceError
from tirtune.space.problem import Problem

__all__ = ["TEMPLATES", "build", "template_for"]

# arch -> "module:function", the form compile_one and TirxBuilder take.
TEMPLATES = {
    "sm_90a": "tirtune.space.templates.hopper_gemm:build",
    "sm_100a": "tirtune.space.templates.blackwell_gemm:build",
}


def template_for(arch: str) -> str:
    try:
        return TEMPLATES[arch]
    except KeyError:
        raise SpaceError(f"no GEMM template branch for {arch!r}; known: {', '.join(sorted(TEMPLATES))}") from None


def _load(arch: str) -> Callable[[Config, Problem], Any]:
    import importlib

    module, _, name = template_for(arch).partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def build(config: Config, problem: Problem, arch: str = "sm_90a") -> Any:
    """The PrimFunc of (config, problem) for `arch`; SpaceError if the branch refuses the pair."""
    return _load(arch)(config, problem)
