"""Which configuration is the best of a problem: the one rule behind every surface that names one.

`GET /best`, `tirtune best`, the job's best (`tirtune tune`'s table, progress bar and summary),
`GET /jobs` and the dashboard all rank with `order` (through `repo.ranked` / `repo.best_of`), so
they name the same config with the same figures:

- The figure is the **same-run ratio** (cuBLAS median / kernel median, timed interleaved in one
  process), never TFLOP/s: a trial measured while the card ran slower has fewer TFLOP/s and a
  cuBLAS that ran slower too, so its ratio is still fair; TFLOP/s of trials minutes apart is not.
- A config's figures are those of its newest **re-measurement** when that is OK (`confirmed`),
  else its trial's. Confirmed configs rank above unconfirmed ones: the top trial is picked out of
  many by, among other things, its own noise (re-measurement moved trial ratios by up to 0.03),
  so a trial figure is not set against a checked one. A config whose newest re-measurement
  failed (it did not verify again, or hung) is not ranked at all.
- One entry per config (template version + config digest): its best-ranked row. Ties go to the
  older row.
- The answer carries the runner-up and says whether the two p10-p90 intervals overlap, i.e.
  whether the winner is within noise of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tirtune.core import Outcome
from tirtune.db.records import MeasurementRecord, RemeasurementRecord

__all__ = ["BestChoice", "Figures", "Ranked", "Row", "choose", "order"]


class Row(Protocol):
    """What ranking needs of a stored trial (a MeasurementRecord, or just these columns)."""

    @property
    def id(self) -> int: ...

    @property
    def key(self) -> str: ...

    @property
    def config_digest(self) -> str: ...

    @property
    def template_version(self) -> str: ...

    @property
    def ratio(self) -> float | None: ...


R = TypeVar("R", bound=Row)


def order(
    rows: Iterable[R], remeasured: Mapping[str, RemeasurementRecord]
) -> list[tuple[R, RemeasurementRecord | None]]:
    """Rows (OK trials with a ratio) best first, one per config, each with the re-measurement
    that confirms it (None: unconfirmed); `remeasured` maps a key to its newest re-measurement."""
    scored: list[tuple[tuple[int, float, int], R, RemeasurementRecord | None]] = []
    for row in rows:
        again = remeasured.get(row.key)
        if again is not None and (again.outcome is not Outcome.OK or again.ratio is None):
            continue  # refuted by its re-measurement
        ratio = again.ratio if again is not None else row.ratio
        if ratio is None:
            continue
        scored.append(((0 if again is not None else 1, -ratio, row.id), row, again))
    seen: set[tuple[str, str]] = set()
    ordered = []
    for _, row, again in sorted(scored, key=lambda item: item[0]):
        config = (row.template_version, row.config_digest)
        if config not in seen:
            seen.add(config)
            ordered.append((row, again))
    return ordered


@dataclass(frozen=True, slots=True)
class Figures:
    """The figures a config is ranked and served by: a re-measurement's (confirmed) or its trial's."""

    ratio: float
    ratio_p10: float | None
    ratio_p90: float | None
    tflops: float | None
    cublas_tflops: float | None
    time_ms: float | None
    confirmed: bool
    remeasurement: RemeasurementRecord | None = None

    @classmethod
    def of(cls, trial: MeasurementRecord, again: RemeasurementRecord | None) -> Figures:
        if again is None:
            return cls(
                trial.ratio or 0.0,
                trial.ratio_p10,
                trial.ratio_p90,
                trial.tflops,
                trial.cublas_tflops,
                trial.time_ms,
                confirmed=False,
            )
        cublas = None if again.cublas_ms is None else trial.problem.tflops(again.cublas_ms)
        return cls(
            again.ratio or 0.0,
            again.ratio_p10,
            again.ratio_p90,
            again.tflops,
            cublas,
            again.time_ms,
            confirmed=True,
            remeasurement=again,
        )

    def overlaps(self, other: Figures) -> bool | None:
        """Whether the two p10-p90 intervals overlap; None when either spread is unknown."""
        if None in (self.ratio_p10, self.ratio_p90, other.ratio_p10, other.ratio_p90):
            return None
        return max(self.ratio_p10 or 0.0, other.ratio_p10 or 0.0) <= min(self.ratio_p90 or 0.0, other.ratio_p90 or 0.0)


@dataclass(frozen=True, slots=True)
class Ranked:
    trial: MeasurementRecord
    figures: Figures


@dataclass(frozen=True, slots=True)
class BestChoice:
    """The best of a problem (or of a job), the runner-up, and how far apart they are."""

    best: Ranked
    runner_up: Ranked | None

    @property
    def within_noise_of_runner_up(self) -> bool | None:
        """True: the p10-p90 intervals overlap, either may be the faster. None: no runner-up, or a spread unknown."""
        return None if self.runner_up is None else self.best.figures.overlaps(self.runner_up.figures)

    @property
    def note(self) -> str:
        """One line for people: how sure the answer is."""
        f = self.best.figures
        head = (
            f"re-measured: {f.ratio:.3f}x cuBLAS{_interval(f)}"
            if f.confirmed
            else f"not re-measured: {f.ratio:.3f}x cuBLAS{_interval(f)} is its trial's figure (a re-measurement "
            "can move it by a few hundredths)"
        )
        if self.runner_up is None:
            return f"{head}; no other verified config to compare with"
        r = self.runner_up.figures
        other = f"the runner-up {self.runner_up.trial.config.label()} ({r.ratio:.3f}x{_interval(r)})"
        overlap = self.within_noise_of_runner_up
        if overlap is None:
            return f"{head}; {other}: spread unknown, so whether they differ beyond noise is unknown"
        if overlap:
            return f"{head}; within noise of {other}: the intervals overlap, either may be faster"
        return f"{head}; ahead of {other} beyond the p10-p90 spread"


def choose(ranked: Sequence[Ranked]) -> BestChoice | None:
    """The first of a ranking and the runner-up (the second), if any."""
    if not ranked:
        return None
    return BestChoice(ranked[0], ranked[1] if len(ranked) > 1 else None)


def _interval(f: Figures) -> str:
    if f.ratio_p10 is None or f.ratio_p90 is None:
        return ""
    return f", p10-p90 {f.ratio_p10:.3f}-{f.ratio_p90:.3f}"
