"""The branch lookups under their old names, as views of the registry (`tirtune.space.branches`)."""

from __future__ import annotations

# moved to tirtune.space.branches; shim kept until the parallel branches are merged
from tirtune.space.branches import BRANCHES, branch_for_gpu, branch_for_version, parse_compute_capability
from tirtune.space.space import SearchSpace

__all__ = [
    "BLACKWELL_FAMILY",
    "BRANCH_STATUS",
    "branch_of",
    "is_blackwell_gpu_name",
    "parse_compute_capability",
    "space_for_gpu",
]

BLACKWELL_FAMILY = BRANCHES["sm_100a"].version_prefix
BRANCH_STATUS = {arch: b.status_text for arch, b in BRANCHES.items()}


def space_for_gpu(compute_capability: str | tuple[int, int]) -> SearchSpace:
    return branch_for_gpu(compute_capability).space


def branch_of(template_version: str) -> str:
    return branch_for_version(template_version).arch


def is_blackwell_gpu_name(name: str) -> bool:
    return BRANCHES["sm_100a"].names_gpu(name)
