"""Re-exports for the old import path (see the comment below)."""

from __future__ import annotations

# moved to tirtune.core.results; shim kept until the parallel branches are merged
from tirtune.core.results import BuildResult, Candidate, Outcome, Provenance, RunResult, Source, Stack

__all__ = ["BuildResult", "Candidate", "Outcome", "Provenance", "RunResult", "Source", "Stack"]
