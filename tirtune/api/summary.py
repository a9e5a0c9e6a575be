"""What the dashboard shows for one problem, computed from its measurements (pure functions).

Trials are the measurements that cost one (every outcome but INVALID: a config refused by a
validity rule is recorded, never built or run), numbered 1.. in the order they were recorded.
The best so far after each trial is the OK trial with the highest same-run ratio up to it (the
rule of tirtune.db.best, on trial figures); the top configs and the best are the repository's
ranking (`repo.ranked`), passed in, so the dashboard names what GET /best names.

Parameter importance is a documented, dependency-free main-effect analysis ("fANOVA-lite"): for
each knob, the correlation ratio eta^2 = between-group variance / total variance of TFLOP/s over
the OK trials, grouping trials by the knob's value. It is the share of the variance that the knob
alone explains; knobs that vary together share credit, so the values need not sum to 1.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from tirtune.core import Outcome
from tirtune.db import MeasurementRecord
from tirtune.db.best import Ranked
from tirtune.space.branches import DEFAULT_ARCH, branch

__all__ = ["Failure", "Importance", "StudySummary", "Trial", "failure_reasons", "importance", "summarize"]

# The knobs the dashboard lists, in the default branch's table order (every branch's table holds
# the same knobs: Blackwell's carries Hopper's at their defaults).
KNOBS = branch(DEFAULT_ARCH).knobs.names
TOP = 10
_RULE = re.compile(r"^\s*([a-z][a-z0-9_]*):")  # "smem_fits: 6 stages ..." -> smem_fits
REASON_CHARS = 80


@dataclass(frozen=True, slots=True)
class Trial:
    number: int  # 1-based position among the trials shown
    record: MeasurementRecord


@dataclass(frozen=True, slots=True)
class Importance:
    knob: str
    eta_squared: float


@dataclass(frozen=True, slots=True)
class Failure:
    outcome: Outcome
    reason: str
    count: int


@dataclass(frozen=True, slots=True)
class StudySummary:
    trials: tuple[Trial, ...]
    best_so_far: tuple[MeasurementRecord | None, ...]  # one per trial: the highest-ratio OK trial up to it
    cublas_tflops: float | None  # median of the same-run cuBLAS measurements
    importance: tuple[Importance, ...]
    top: tuple[Ranked, ...]
    failures: tuple[Failure, ...]
    invalid: int  # configs refused by rules: in `failures`, not trials


def summarize(records: Sequence[MeasurementRecord], top: Sequence[Ranked] = ()) -> StudySummary:
    """Records must be in recording order (repo.problem_measurements returns them so); `top` is
    the ranking of the same problem (repo.ranked), best first."""
    trials = tuple(Trial(i, r) for i, r in enumerate((r for r in records if r.outcome != Outcome.INVALID), 1))
    ok = [t.record for t in trials if _ok(t.record)]
    cublas = [r.cublas_tflops for r in ok if r.cublas_tflops]
    return StudySummary(
        trials=trials,
        best_so_far=_best_so_far(trials),
        cublas_tflops=statistics.median(cublas) if cublas else None,
        importance=importance(ok),
        top=tuple(top[:TOP]),
        failures=failure_reasons(records),
        invalid=sum(r.outcome == Outcome.INVALID for r in records),
    )


def importance(ok: Sequence[MeasurementRecord]) -> tuple[Importance, ...]:
    """eta^2 of each knob that takes two or more values, most important first; () when there are
    fewer than 3 OK trials or their TFLOP/s do not vary."""
    ys = [r.tflops or 0.0 for r in ok]
    if len(ys) < 3:
        return ()
    mean = statistics.fmean(ys)
    total = sum((y - mean) ** 2 for y in ys)
    if total <= 0:
        return ()
    scores = []
    for knob in KNOBS:
        groups: dict[object, list[float]] = {}
        for r, y in zip(ok, ys, strict=True):
            groups.setdefault(getattr(r.config, knob), []).append(y)
        if len(groups) > 1:
            between = sum(len(g) * (statistics.fmean(g) - mean) ** 2 for g in groups.values())
            scores.append(Importance(knob, between / total))
    return tuple(sorted(scores, key=lambda i: (-i.eta_squared, i.knob)))


def failure_reasons(records: Sequence[MeasurementRecord]) -> tuple[Failure, ...]:
    """Failed measurements counted by outcome and reason, most frequent first. A message naming
    several validity rules ('smem_fits: ...; tiles_divide: ...') counts once for each rule."""
    counts: Counter[tuple[Outcome, str]] = Counter()
    for r in records:
        if r.outcome != Outcome.OK:
            counts.update((r.outcome, reason) for reason in _reasons(r.message))
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0][0].value, item[0][1]))
    return tuple(Failure(outcome, reason, n) for (outcome, reason), n in ranked)


def _reasons(message: str) -> set[str]:
    rules = {m.group(1) for part in message.split(";") if (m := _RULE.match(part))}
    if rules:
        return rules
    first = message.strip().splitlines()[0] if message.strip() else "no message"
    return {first[:REASON_CHARS] + ("…" if len(first) > REASON_CHARS else "")}


def _ok(r: MeasurementRecord) -> bool:
    return r.outcome == Outcome.OK and r.tflops is not None


def _best_so_far(trials: Sequence[Trial]) -> tuple[MeasurementRecord | None, ...]:
    best: MeasurementRecord | None = None
    series = []
    for t in trials:
        r = t.record
        if _ok(r) and r.ratio is not None and (best is None or r.ratio > (best.ratio or 0.0)):
            best = r
        series.append(best)
    return tuple(series)
