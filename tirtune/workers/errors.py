"""The workers package's root exception: infrastructure faults, not candidate failures."""

from __future__ import annotations

from tirtune.core.errors import TirtuneError

__all__ = ["WorkerError"]


class WorkerError(TirtuneError):
    """A builder or runner could not do its job at all (no GPU, no nvcc, Ray gone)."""
