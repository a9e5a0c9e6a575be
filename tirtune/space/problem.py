"""Re-exports for the old import path (see the comment below)."""

from __future__ import annotations

# moved to tirtune.core.problem; shim kept until the parallel branches are merged
from tirtune.core.problem import DTYPES, MAX_DIM, Problem, normalize_dtype

__all__ = ["DTYPES", "MAX_DIM", "Problem", "normalize_dtype"]
