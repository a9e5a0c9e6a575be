"""The root exception, the error of the value types (bad input about a problem or a configuration)
and the fault both halves of the workers raise (a builder or a runner that cannot work at all).

`TirtuneError` lives here, at the bottom of the import graph, so that every package's `errors.py`
can derive from it without importing the root module (`tirtune/__init__.py` re-exports it, and
lazily resolves `tirtune.gemm` and `tirtune.nn`, which stand above everything).
"""

from __future__ import annotations

__all__ = ["SpaceError", "TirtuneError", "WorkerError"]


class TirtuneError(Exception):
    """Root of every error tirtune raises on purpose; each package derives its own from it."""


class SpaceError(TirtuneError, ValueError):
    """Bad user input about a problem or a configuration: the message says what and why.

    Defined here, beside `Problem` and `Config`, which raise it; `tirtune.space` raises the same
    class for configs its rules refuse (its name is the search space's, where most such input ends)."""


class WorkerError(TirtuneError):
    """A builder or runner could not do its job at all (no GPU, no nvcc, Ray gone): an infrastructure
    fault, not a candidate's failure (those are results).

    Defined here because both `tirtune.builder` and `tirtune.runner` raise it (each re-exports it from
    its `errors.py`) and the tuner treats a fault of either the same way."""
