"""What the cost model learns from: one correct measurement reduced to its problem, config and ratio."""

from __future__ import annotations

from dataclasses import dataclass

from tirtune.core.config import Config
from tirtune.core.problem import Problem

__all__ = ["Sample"]


@dataclass(frozen=True, slots=True)
class Sample:
    """A config measured correct on a problem, with its same-run ratio to cuBLAS (cuBLAS time over
    the kernel's: above 1 is faster). `origin` says where the figure came from (a database's row,
    a results file of the shipped prior), for people and digests."""

    problem: Problem
    config: Config
    ratio: float
    origin: str = ""

    def __post_init__(self) -> None:
        if not self.ratio > 0:
            raise ValueError(f"a sample's ratio must be positive, got {self.ratio!r}")
