"""The Runner interface: built modules in, verified timings (or the reason there are none) out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from tirtune.core import BuildResult, RunResult, Source, Stack

__all__ = ["Runner"]


@runtime_checkable
class Runner(Protocol):
    source: Source  # GPU: measured here; REPLAY: figures read back from a recording

    def stack(self) -> Stack:
        """The GPU and toolchain this runner measures on (part of every measurement's identity)."""
        ...

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        """One RunResult per build, in order; only OK builds are measured."""
        ...

    def remeasure(self, batch: Sequence[BuildResult], rounds: int = 5, processes: int = 1) -> list[RunResult]:
        """Measure OK builds again, interleaved in `rounds` within each of `processes` measuring
        processes so that their figures compare and their spread covers rounds and processes
        (the job's best is chosen from these); one RunResult per build, in order."""
        ...
