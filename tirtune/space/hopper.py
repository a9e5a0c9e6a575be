"""The Hopper (sm_90a) search space of the GEMM template."""

from __future__ import annotations

from tirtune.space.rules import CONFIG_RULES, PROBLEM_RULES
from tirtune.space.space import SearchSpace

__all__ = ["HOPPER", "TEMPLATE_VERSION"]

# Bump whenever the generated kernel for a given config can change: it is part of every
# measurement's identity, so old measurements become stale rather than wrong.
TEMPLATE_VERSION = "hopper-gemm/1"

HOPPER = SearchSpace(
    arch="sm_90a",
    template_version=TEMPLATE_VERSION,
    knobs={
        "blk_m": (64, 128, 256),
        "blk_n": (64, 128, 192, 256),
        "blk_k": (64, 128),
        "stages": (2, 3, 4, 5, 6),
        "consumers": (1, 2),
        "warp_specialized": (False, True),
    },
    problem_rules=PROBLEM_RULES,
    config_rules=CONFIG_RULES,
)
