"""Problems, configurations, search spaces with named validity rules, and the branch registry."""

from __future__ import annotations

from tirtune.core import DTYPES, Config, Problem, normalize_dtype
from tirtune.space.errors import SpaceError
from tirtune.space.hopper import HOPPER, HOPPER_V1, HOPPER_V2, HOPPER_V3, HOPPER_V4, TEMPLATE_VERSION, space_for
from tirtune.space.space import SearchSpace
from tirtune.space.validity import Violation

__all__ = [
    "DTYPES",
    "HOPPER",
    "HOPPER_V1",
    "HOPPER_V2",
    "HOPPER_V3",
    "HOPPER_V4",
    "TEMPLATE_VERSION",
    "Config",
    "Problem",
    "SearchSpace",
    "SpaceError",
    "Violation",
    "normalize_dtype",
    "space_for",
]
