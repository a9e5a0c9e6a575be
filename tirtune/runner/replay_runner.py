"""Replay runner: answers from measurements recorded on a real GPU (bench/data/*.jsonl).

It lets the tuner, the job loop and the API be tested and studied without a GPU. The format is
one JSON object per line, written by `to_record` (see bench/data/README.md):
{"template_version", "problem": {m,n,k,dtype}, "config": {...}, "outcome", "message",
 "time_ms", "time_p10_ms", "time_p90_ms", "repetitions", "cublas_ms", "rel_error",
 "stack": {gpu_name, driver, cuda, tvm, compute_capability}, "torch", "sm_clock_mhz", "power_w"}
and, in recordings made since they were added, "measured_at" (ISO 8601) and "ratio_p10",
"ratio_p90" (the spread of the per-round ratios).

Every result says it is a replay (`Provenance.source` REPLAY) and which recording it came from
(file name and the first 16 hex digits of its content's SHA-256). `measured_at` is the
recording's own time when it has one, else None: unknown, never the time of the replay. A
recording without per-round figures gives a spread derived from what it has: the kernel's own
p10 and p90 times against the recorded cuBLAS median (`cublas_ms / time_p90_ms` ..
`cublas_ms / time_p10_ms`), which covers the kernel's repetition noise but not cuBLAS's or the
drift between rounds and processes that a GPU re-measurement's spread covers.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tirtune.core import BuildResult, Config, Outcome, Problem, Provenance, RunResult, Source, SpaceError, Stack
from tirtune.runner.errors import WorkerError
from tirtune.space.branches import branch_for_version
from tirtune.space.hopper import TEMPLATE_VERSION
from tirtune.space.space import SearchSpace

__all__ = ["ReplayBuilder", "ReplayRunner", "from_record", "to_record"]

NOT_RECORDED = "not in the recorded dataset"
_RECORDING = "_recording"  # where a loaded record came from (added on load, never written)
MAX_LISTED = 8  # recorded problems named when a problem is not among them


def to_record(result: RunResult) -> dict[str, Any]:
    c = result.candidate
    prov = result.provenance
    measured_at = prov.measured_at if prov and prov.measured_at else datetime.now(UTC)
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
        "measured_at": measured_at.isoformat(timespec="seconds"),
        "ratio_p10": result.ratio_p10,
        "ratio_p90": result.ratio_p90,
    }


def from_record(data: dict[str, Any]) -> tuple[tuple[str, Problem, Config], dict[str, Any]]:
    problem = Problem(**data["problem"])
    config = Config.from_json(data["config"], branch_for_version(data["template_version"]).knobs)
    return (data["template_version"], problem, config), data


class ReplayRunner:
    """Runner over recorded measurements; a candidate nobody recorded is a LAUNCH_ERROR result.

    `delay_s` is spent per measured candidate, as a GPU would (demos, resume tests)."""

    source = Source.REPLAY

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
            raise WorkerError(
                f"replay data {path}: no such file or folder (give a .jsonl recording or a folder "
                "of them, e.g. bench/data)"
            )
        files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
        if not files:
            raise WorkerError(f"replay data {path}: the folder holds no .jsonl recording")
        for file in files:
            self._load_file(file)

    def _load_file(self, file: Path) -> None:
        try:
            content = file.read_bytes()
            lines = content.decode().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise WorkerError(f"replay data {file}: cannot be read ({e})") from e
        recording = f"{file.name} sha256:{hashlib.sha256(content).hexdigest()[:16]}"
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    key, data = from_record(json.loads(line))
                except (ValueError, TypeError, KeyError, SpaceError) as e:
                    raise WorkerError(
                        f"replay data {file}:{number}: not a recorded measurement ({type(e).__name__}: {str(e)[:200]})"
                    ) from e
                self._records[key] = {**data, _RECORDING: recording}

    def recordings(self) -> list[str]:
        """The recordings replayed (file name and content hash), in name order."""
        return sorted({data[_RECORDING] for data in self._records.values()})

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
        return f"nothing is recorded for {problem} in this replay ({self.template_version}); recorded: {shown}{more}"

    def stack(self) -> Stack:
        return self._stack

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        return [self._one(build) for build in batch]

    def remeasure(self, batch: Sequence[BuildResult], rounds: int = 5, processes: int = 1) -> list[RunResult]:
        """The recorded figures again: a replay has nothing new to say about them (one recorded
        process, whatever `processes` asks)."""
        results = [self._replay(build) for build in batch]
        self.remeasured += sum(1 for b in batch if b.ok)
        return [replace(r, extra={**r.extra, "remeasure": True, "rounds": rounds, "processes": 1}) for r in results]

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
            source=Source.REPLAY,
            recording=data[_RECORDING],
            measured_at=_recorded_time(data.get("measured_at")),
        )
        low, high = _recorded_spread(data)
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
            ratio_p10=low,
            ratio_p90=high,
        )


def _recorded_time(value: Any) -> datetime | None:
    """The recording's own time of measurement, if it has one (a naive time is taken as UTC)."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _recorded_spread(data: dict[str, Any]) -> tuple[float | None, float | None]:
    """The ratio's p10-p90 as recorded, else derived from the kernel's p10/p90 times against the
    cuBLAS median (see the module docstring for what that covers); (None, None) without them."""
    if data.get("ratio_p10") is not None and data.get("ratio_p90") is not None:
        return float(data["ratio_p10"]), float(data["ratio_p90"])
    cublas, fast, slow = data.get("cublas_ms"), data.get("time_p10_ms"), data.get("time_p90_ms")
    if not cublas or not fast or not slow:
        return None, None
    return cublas / slow, cublas / fast


class ReplayBuilder:
    """The builder that goes with ReplayRunner: nothing to compile, every candidate is 'built'."""

    def build(self, batch: Sequence[Any]) -> list[BuildResult]:
        return [
            BuildResult(candidate, Outcome.OK, artifact=None, message="replay: not compiled") for candidate in batch
        ]
