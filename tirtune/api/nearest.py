"""The nearest tuned shape, for GET /best?fallback=nearest.

Distance is `space.shapes.log_distance` (Euclidean in log space over M, N, K), the same measure
a new job's transfer uses to pick the tuned problems it starts from. Only problems of the same
dtype are candidates (the caller filters them).
"""

from __future__ import annotations

from collections.abc import Iterable

from tirtune.space import Problem
from tirtune.space.shapes import log_distance

__all__ = ["log_distance", "nearest"]


def nearest(problem: Problem, candidates: Iterable[Problem]) -> Problem | None:
    """The candidate closest to `problem`; ties go to the smaller shape (then M, N, K order)."""
    ranked = sorted(candidates, key=lambda c: (log_distance(problem, c), c.m * c.n * c.k, c.m, c.n, c.k))
    return ranked[0] if ranked else None
