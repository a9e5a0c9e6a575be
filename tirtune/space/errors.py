"""The space package's root exception (defined with the value types in `tirtune.core`)."""

from __future__ import annotations

from tirtune.core.errors import SpaceError

__all__ = ["SpaceError"]
