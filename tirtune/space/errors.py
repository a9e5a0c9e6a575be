"""The space package's root exception."""

from __future__ import annotations

from tirtune import TirtuneError

__all__ = ["SpaceError"]


class SpaceError(TirtuneError, ValueError):
    """Bad user input about a problem or a configuration: the message says what and why."""
