"""The tuner package's root exception."""

from __future__ import annotations

from tirtune.core.errors import TirtuneError

__all__ = ["TunerError"]


class TunerError(TirtuneError):
    """A tuning job cannot proceed (bad job, lost storage); candidate failures are results instead."""
