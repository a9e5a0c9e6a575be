"""Where a Blackwell job starts.

Blackwell has no starting points of its own (nothing has run on a B200): a job starts from the
Hopper points its knobs can express (the last three of Hopper's 4096^3 list), in every shape
class.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from tirtune.core import Config
from tirtune.space.hopper.starts import HOPPER_START
from tirtune.space.shapes import ShapeClass

__all__ = ["BLACKWELL_START", "BLACKWELL_STARTS"]

BLACKWELL_START: tuple[Config, ...] = HOPPER_START[2:]
BLACKWELL_STARTS: Mapping[ShapeClass, tuple[Config, ...]] = MappingProxyType({c: BLACKWELL_START for c in ShapeClass})
