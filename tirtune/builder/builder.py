"""The Builder interface: candidates in, loadable modules (or the reason there is none) out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from tirtune.core import BuildResult, Candidate

__all__ = ["Builder"]


@runtime_checkable
class Builder(Protocol):
    def build(self, batch: Sequence[Candidate]) -> list[BuildResult]:
        """One BuildResult per candidate, in order. Failures are results, never exceptions."""
        ...
