"""Which search space serves a GPU: Hopper (sm_90a) for compute capability 9.x, Blackwell
(sm_100a) for 10.0; anything else is refused with a reason, never silently given the wrong branch.

An architecture-specific target ("a") runs only on its own compute capability: sm_100a code does
not load on a 10.3 GPU (B300), which would need an sm_103a (or family sm_100f) build.
"""

from __future__ import annotations

import re

from tirtune.space.blackwell import BLACKWELL
from tirtune.space.errors import SpaceError
from tirtune.space.hopper import HOPPER
from tirtune.space.space import SearchSpace

__all__ = [
    "BRANCH_STATUS",
    "arch_for_gpu",
    "branch_of",
    "is_blackwell_gpu_name",
    "parse_compute_capability",
    "space_for_gpu",
]

BLACKWELL_FAMILY = "blackwell-"  # template versions of the sm_100a branch start so
# What each branch's results have been through; shown by the API, the CLI and the docs.
BRANCH_STATUS = {
    "sm_90a": "run on an H200: every trial verified, then timed",
    "sm_100a": "compile-checked, not yet run on a B200",
}


def parse_compute_capability(value: str | tuple[int, int]) -> tuple[int, int]:
    """ "10.0", "9.0", (10, 0) or "sm_100a" -> (major, minor)."""
    if isinstance(value, tuple):
        return value
    text = str(value).strip().lower()
    if text.startswith("sm_"):
        digits = text[3:].rstrip("af")
        if digits.isdigit() and len(digits) >= 2:
            return int(digits[:-1]), int(digits[-1])
    major, _, minor = text.partition(".")
    if major.isdigit() and (minor.isdigit() or not minor):
        return int(major), int(minor or 0)
    raise SpaceError(f"bad compute capability {value!r}: expected e.g. '9.0' or '10.0'")


def arch_for_gpu(compute_capability: str | tuple[int, int]) -> str:
    return space_for_gpu(compute_capability).arch


def space_for_gpu(compute_capability: str | tuple[int, int]) -> SearchSpace:
    """The space whose kernels run on a GPU of this compute capability."""
    major, minor = parse_compute_capability(compute_capability)
    if major == 9:
        return HOPPER
    if (major, minor) == (10, 0):
        return BLACKWELL
    if major == 10:
        raise SpaceError(
            f"compute capability 10.{minor}: the Blackwell branch builds sm_100a, which runs on 10.0 "
            f"(B200/GB200) only; this GPU would need an sm_10{minor}a build, which tirtune does not make yet"
        )
    raise SpaceError(
        f"compute capability {major}.{minor} has no GEMM template branch: tirtune builds sm_90a "
        "(Hopper, 9.x) and sm_100a (Blackwell B200/GB200, 10.0) kernels only"
    )


def branch_of(template_version: str) -> str:
    """The target arch of the template branch that produced a measurement ("blackwell-gemm/1" -> sm_100a)."""
    return "sm_100a" if template_version.startswith(BLACKWELL_FAMILY) else "sm_90a"


_BLACKWELL_NAME = re.compile(r"blackwell|\bG?B(?:100|200|300)\b|\bRTX PRO 6000\b", re.IGNORECASE)


def is_blackwell_gpu_name(name: str) -> bool:
    """Whether a GPU name (as NVML reports it, e.g. "NVIDIA B200") names a Blackwell GPU."""
    return bool(_BLACKWELL_NAME.search(name))
