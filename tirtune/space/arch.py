"""Which search space serves a GPU: Hopper (sm_90a) for compute capability 9.x, Blackwell
(sm_100a) for 10.x; anything else is refused with a reason, never silently given the wrong branch."""

from __future__ import annotations

from tirtune.space.blackwell import BLACKWELL
from tirtune.space.errors import SpaceError
from tirtune.space.hopper import HOPPER
from tirtune.space.space import SearchSpace

__all__ = ["BRANCH_STATUS", "arch_for_gpu", "parse_compute_capability", "space_for_gpu"]

# What each branch's results have been through; shown by the API, the CLI and the docs.
BRANCH_STATUS = {
    "sm_90a": "verified and timed on an H200",
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
    if major == 10:
        return BLACKWELL
    raise SpaceError(
        f"compute capability {major}.{minor} has no GEMM template branch: tirtune builds sm_90a "
        "(Hopper, 9.x) and sm_100a (Blackwell B200/GB200, 10.x) kernels only"
    )
