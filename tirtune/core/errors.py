"""The error of the value types: bad input about a problem or a configuration."""

from __future__ import annotations

from tirtune import TirtuneError

__all__ = ["SpaceError"]


class SpaceError(TirtuneError, ValueError):
    """Bad user input about a problem or a configuration: the message says what and why.

    Defined here, beside `Problem` and `Config`, which raise it; `tirtune.space` raises the same
    class for configs its rules refuse (its name is the search space's, where most such input ends)."""
