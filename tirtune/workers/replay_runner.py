"""Replay runner: answers from measurements recorded on a real GPU (bench/data/*.jsonl).

It lets the tuner, the job loop and the API be tested and studied without a GPU. The format is
one JSON object per line, written by `to_record` (see bench/data/README.md):
{"template_version", "problem": {m,n,k,dtype}, "config": {...}, "outcome", "message",
 "time_ms", "time_p10_ms", "time_p90_ms", "repetitions", "cublas_ms", "rel_error",
 "stack": {gpu_name, driver, cuda, tvm, compute_capability}, "torch", "sm_clock_mhz", "power_w"}
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tirtune.space.config import Config
from tirtune.space.errors import SpaceError
from tirtune.space.hopper import TEMPLATE_VERSION
from tirtune.space.problem import Problem
from tirtune.space.space import SearchSpace
from tirtune.workers.errors import WorkerError
from tirtune.workers.results import BuildResult, Outcome, Provenance, RunResult, Stack

__all__ = ["ReplayBuilder", "ReplayRunner", "from_record", "to_record"]

NOT_RECORDED = "not in the recorded dataset"
MAX_LISTED = 8  # recorded problems named when a problem is not among them


def to_record(result: RunResult) -> dict[str, Any]:
    c = result.candidate
    prov = result.provenance
    return {
        "template_version": c.template_version,
        "problem": c.problem.to_json(),
        "config": c.config.to_json(),
        "outcome": result.outcome.value,
        "message": result.message,
        "time_ms": result.time_ms,
        "time_p10_ms": result.time_p10_ms,
        "time_p90_ms": result.time_p90_ms,
        "repetitions": result.repetitions,
        "cublas_ms": result.cublas_ms,
        "rel_error": result.rel_error,
        "stack": prov.stack.to_json() if prov else None,
        "torch": prov.torch if prov else "",
        "sm_clock_mhz": prov.sm_clock_mhz if prov else None,
        "power_w": prov.power_w if prov else None,
    }


def from_record(data: dict[str, Any]) -> tuple[tuple[str, Problem, Config], dict[str, Any]]:
    problem = Problem(**data["problem"])
    config = Config.from_json(data["config"])
    return (data["template_version"], problem, config), data


class ReplayRunner:
    """Runner over recorded measurements; a candidate nobody recorded is a LAUNCH_ERROR result.

    `delay_s` is spent per measured candidate, as a GPU would (demos, resume tests)."""

    def __init__(self, paths: Iterable[str | Path], delay_s: float = 0.0) -> None:
        paths = list(paths)
        self.delay_s = delay_s
        self._records: dict[tuple[str, Problem, Config], dict[str, Any]] = {}
        for path in paths:
            self._load(Path(path))
        if not self._records:
            raise WorkerError(f"replay data {', '.join(map(str, paths))}: no recorded measurements")
        first = next(iter(self._records.values()))
        self._stack = Stack(**first["stack"])
        versions = {key[0] for key in self._records}
        # The template version a replay stands for: the current one if it was recorded, else the
        # newest recorded (version strings of one template sort by their number).
        self.template_version = TEMPLATE_VERSION if TEMPLATE_VERSION in versions else max(versions)
        self.calls = 0  # how many candidates were "measured": tests assert reuse with it
        self.remeasured = 0  # candidates re-measured (not counted in `calls`)

    def _load(self, path: Path) -> None:
        """The records of a .jsonl file, or of every .jsonl file of a folder; WorkerError naming the
        path (and line) when there is nothing to read or a line is not a recorded measurement."""
        if not path.exists():
            raise WorkerError(f"replay data {path}: no such file or folder (give a .jsonl recording or a folder "
                              "of them, e.g. bench/data)")
        files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
        if not files:
            raise WorkerError(f"replay data {path}: the folder holds no .jsonl recording")
        for file in files:
            self._load_file(file)

    def _load_file(self, file: Path) -> None:
        try:
            lines = file.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise WorkerError(f"replay data {file}: cannot be read ({e})") from e
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    key, data = from_record(json.loads(line))
                except (ValueError, TypeError, KeyError, SpaceError) as e:
                    raise WorkerError(f"replay data {file}:{number}: not a recorded measurement "
                                      f"({type(e).__name__}: {str(e)[:200]})") from e
                self._records[key] = data

    def problems(self) -> set[Problem]:
        return {key[1] for key in self._records}

    def configs(self, problem: Problem) -> list[Config]:
        return sorted(key[2] for key in self._records if key[1] == problem)

    def recorded(self, problem: Problem, config: Config) -> dict[str, Any] | None:
        """The record of (problem, config) in this replay's template version, if measured."""
        return self._records.get((self.template_version, problem, config))

    def restrict(self, space: SearchSpace) -> SearchSpace:
        """`space` cut down to the recorded configs of each problem (rule `recorded`): a replay of
        a sample of the space proposes only what was measured. Full recordings lose nothing."""
        points: dict[Problem, set[Config]] = {}
        for version, problem, config in self._records:
            if version == self.template_version:
                points.setdefault(problem, set()).add(config)
        return space.restricted(points, "recorded", NOT_RECORDED, self._nothing_recorded)

    def _nothing_recorded(self, problem: Problem, recorded: Sequence[Problem]) -> str:
        shown = ", ".join(str(p) for p in recorded[:MAX_LISTED])
        more = f" and {len(recorded) - MAX_LISTED} more" if len(recorded) > MAX_LISTED else ""
        return (f"nothing is recorded for {problem} in this replay ({self.template_version}); "
                f"recorded: {shown}{more}")

    def stack(self) -> Stack:
        return self._stack

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        return [self._one(build) for build in batch]

    def remeasure(self, batch: Sequence[BuildResult], rounds: int = 5) -> list[RunResult]:
        """The recorded figures again: a replay has nothing new to say about them."""
        results = [self._replay(build) for build in batch]
        self.remeasured += sum(1 for b in batch if b.ok)
        return [replace(r, extra={**r.extra, "remeasure": True, "rounds": rounds}) for r in results]

    def _one(self, build: BuildResult) -> RunResult:
        if build.ok:
            self.calls += 1
            if self.delay_s:
                time.sleep(self.delay_s)
        return self._replay(build)

    def _replay(self, build: BuildResult) -> RunResult:
        c = build.candidate
        if not build.ok:
            return RunResult.failed(c, build.outcome, build.message)
        data = self._records.get((c.template_version, c.problem, c.config))
        if data is None:
            return RunResult.failed(c, Outcome.LAUNCH_ERROR, NOT_RECORDED)
        provenance = Provenance(
            Stack(**data["stack"]),
            c.template_version,
            data.get("torch", ""),
            data.get("sm_clock_mhz"),
            data.get("power_w"),
        )
        return RunResult(
            candidate=c,
            outcome=Outcome(data["outcome"]),
            message=data.get("message", ""),
            time_ms=data.get("time_ms"),
            time_p10_ms=data.get("time_p10_ms"),
            time_p90_ms=data.get("time_p90_ms"),
            repetitions=data.get("repetitions", 0),
            cublas_ms=data.get("cublas_ms"),
            rel_error=data.get("rel_error"),
            provenance=provenance,
            extra={"replayed": True},
        )


class ReplayBuilder:
    """The builder that goes with ReplayRunner: nothing to compile, every candidate is 'built'."""

    def build(self, batch: Sequence[Any]) -> list[BuildResult]:
        return [
            BuildResult(candidate, Outcome.OK, artifact=None, message="replay: not compiled") for candidate in batch
        ]
