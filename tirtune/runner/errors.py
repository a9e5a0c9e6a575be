"""The runner package's root exception: infrastructure faults, not candidate failures.

`WorkerError` is shared with `tirtune.builder` (both halves of the workers raise it, and the tuner
treats either's the same way), so it is defined in `tirtune.core.errors`, below both."""

from __future__ import annotations

from tirtune.core.errors import WorkerError

__all__ = ["WorkerError"]
