"""The nearest tuned shape, for GET /best?fallback=nearest.

Distance is Euclidean in log space, sqrt(sum over M, N, K of ln(a/b)^2): doubling one dimension
costs the same at any scale, and 4096x4096x4096 is as far from 2048x4096x4096 as from
8192x4096x4096. Only problems of the same dtype are candidates (the caller filters them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from tirtune.space import Problem

__all__ = ["log_distance", "nearest"]


def log_distance(a: Problem, b: Problem) -> float:
    return math.sqrt(sum(math.log(x / y) ** 2 for x, y in ((a.m, b.m), (a.n, b.n), (a.k, b.k))))


def nearest(problem: Problem, candidates: Iterable[Problem]) -> Problem | None:
    """The candidate closest to `problem`; ties go to the smaller shape (then M, N, K order)."""
    ranked = sorted(candidates, key=lambda c: (log_distance(problem, c), c.m * c.n * c.k, c.m, c.n, c.k))
    return ranked[0] if ranked else None
