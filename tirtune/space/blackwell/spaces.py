"""The Blackwell (sm_100a) search space of the GEMM template.

Compile-checked, not yet run on a B200: every kernel of this space lowers and passes ptxas for
sm_100a (see bench/results/blackwell/2026-11-29-static-gate.md), but none has been verified or
timed on a Blackwell GPU. `STATUS` says so wherever results for this space are shown.

What each knob means on Blackwell, and the values the space draws: the knob table,
`tirtune.space.blackwell.knobs`.
"""

from __future__ import annotations

from tirtune.space.blackwell.knobs import KNOBS
from tirtune.space.blackwell.rules import BLACKWELL_CONFIG_RULES, BLACKWELL_PROBLEM_RULES
from tirtune.space.space import SearchSpace

__all__ = ["ARCH", "BLACKWELL", "STATUS", "TEMPLATE_VERSION"]

# Bump whenever the generated kernel for a given config can change (part of every measurement's
# identity, as on Hopper).
TEMPLATE_VERSION = "blackwell-gemm/1"
ARCH = "sm_100a"
STATUS = "compile-checked, not yet run on a B200"

# The space's knobs in the order its searches walk them: the table's, but cluster_dim (always "m").
_WALK = (
    "blk_m",
    "blk_n",
    "blk_k",
    "stages",
    "consumers",
    "warp_specialized",
    "persistent",
    "raster_group",
    "epilogue",
    "cluster",
    "loader",
)
BLACKWELL = SearchSpace(
    arch=ARCH,
    template_version=TEMPLATE_VERSION,
    knobs=KNOBS.grid(_WALK),
    table=KNOBS,
    problem_rules=BLACKWELL_PROBLEM_RULES,
    config_rules=BLACKWELL_CONFIG_RULES,
)
