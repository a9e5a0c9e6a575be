"""What the job loop reads from and writes to the database, in one place.

Each method of `JobStore` is one transaction (`tirtune.db.transaction`) over the repository's
functions (`tirtune.db.repo`); the loop (`tirtune.tuner.job`) holds a store and never opens a
transaction itself. A trial costs the loop at most two: the look-up of an earlier measurement of
its key (`measured_before`) and the row that records it (`record` or `reuse`), which reads back the
job's progress in the same transaction. The rest are per job: `job`, `start_job` and `recall` when it
starts, `measurements`, `remeasured`/`record_remeasurements` and `finish` when its budget is spent.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from tirtune.core import Candidate, Outcome, Problem, RunResult, Source, Stack
from tirtune.db import repo, transaction
from tirtune.db.best import BestChoice
from tirtune.db.records import JobRecord, MeasurementRecord, RemeasurementRecord

__all__ = ["Finished", "JobStore", "Recalled", "Recorded"]

ALL_ROWS = 1_000_000  # a job's rows are read whole


@dataclass(frozen=True, slots=True)
class Recorded:
    """A stored trial, and the job's progress read back in the same transaction (the repository
    counts trials and moves the best so far: `repo.job_progress`)."""

    record: MeasurementRecord
    trials_done: int
    best: MeasurementRecord | None


@dataclass(frozen=True, slots=True)
class Recalled:
    """What a job recorded before it (re)started: its rows, newest first, and its progress."""

    rows: list[MeasurementRecord]
    trials_done: int
    best: MeasurementRecord | None


@dataclass(frozen=True, slots=True)
class Finished:
    """The job's named best (`repo.best_of`; None when nothing qualifies) and all its rows."""

    choice: BestChoice | None
    rows: list[MeasurementRecord]


class JobStore:
    """The job loop's database: rows of the measurements from `source` (gpu or replay)."""

    def __init__(self, sessions: sessionmaker[Session], source: Source) -> None:
        self.sessions = sessions
        self.source = source

    def job(self, job_id: int) -> JobRecord:
        with transaction(self.sessions) as s:
            return repo.get_job(s, job_id)

    def start_job(self, job_id: int, stack: Stack) -> JobRecord:
        """The job runs on `stack`'s GPU: named on its row, and this source's measurements taken
        on that GPU with another driver, CUDA or TVM marked stale (never reused)."""
        with transaction(self.sessions) as s:
            job = repo.set_job_gpu(s, job_id, stack.gpu_name)
            repo.mark_stale(s, keep_stack=stack, source=self.source)
            return job

    def recall(self, job_id: int) -> Recalled:
        with transaction(self.sessions) as s:
            rows = repo.list_measurements(s, job_id=job_id, limit=ALL_ROWS)
            done, best = repo.job_progress(s, job_id)
        return Recalled(rows, done, best)

    def measured_before(self, key: str) -> MeasurementRecord | None:
        """A usable measurement of `key` (the config on this stack) from this source, if any."""
        with transaction(self.sessions) as s:
            return repo.find_measurement(s, key, self.source)

    def refuse(self, job_id: int, trial: int, candidate: Candidate, key: str, message: str) -> MeasurementRecord:
        """A config a rule refused, stored as INVALID with the rules it broke: no trial spent."""
        with transaction(self.sessions) as s:
            return repo.record_measurement(
                s,
                job_id=job_id,
                trial_number=trial,
                key=key,
                candidate=candidate,
                outcome=Outcome.INVALID,
                message=message,
                result=None,
                build_seconds=None,
                source=self.source,
            )

    def record(
        self,
        job_id: int,
        trial: int,
        candidate: Candidate,
        key: str,
        outcome: Outcome,
        message: str,
        result: RunResult | None,
        build_seconds: float | None,
    ) -> Recorded:
        """Store one candidate's fate as a trial of the job."""
        with transaction(self.sessions) as s:
            record = repo.record_measurement(
                s,
                job_id=job_id,
                trial_number=trial,
                key=key,
                candidate=candidate,
                outcome=outcome,
                message=message,
                result=result,
                build_seconds=build_seconds,
                source=self.source,
            )
            done, best = repo.job_progress(s, job_id)
        return Recorded(record, done, best)

    def reuse(self, job_id: int, trial: int, previous: MeasurementRecord) -> Recorded:
        """Store `previous` (found by `measured_before`) again as a trial of the job, unmeasured."""
        with transaction(self.sessions) as s:
            record = repo.reuse_measurement(s, previous, job_id=job_id, trial_number=trial)
            done, best = repo.job_progress(s, job_id)
        return Recorded(record, done, best)

    def measurements(self, job_id: int, outcome: Outcome | None = None) -> list[MeasurementRecord]:
        """The job's rows (with `outcome` only, when given), newest first."""
        with transaction(self.sessions) as s:
            return repo.list_measurements(s, job_id=job_id, outcome=outcome, limit=ALL_ROWS)

    def remeasured(self, keys: Sequence[str]) -> dict[str, RemeasurementRecord]:
        """The newest re-measurement from this source of each key that has one."""
        with transaction(self.sessions) as s:
            return repo.latest_remeasurements(s, keys, self.source)

    def record_remeasurements(
        self, job_id: int, rounds: int, pairs: Sequence[tuple[MeasurementRecord, RunResult]]
    ) -> list[RemeasurementRecord]:
        """Store one interleaved re-measurement of the job's top trials, under a new id of its own."""
        with transaction(self.sessions) as s:
            return repo.record_remeasurements(
                s, job_id=job_id, session_id=uuid.uuid4().hex, rounds=rounds, pairs=list(pairs)
            )

    def finish(self, job_id: int, problem: Problem) -> Finished:
        """Name the job's best by `repo.best_of` (the rule every surface uses: the re-measured
        same-run ratio decides) on its row, and read back all its rows."""
        with transaction(self.sessions) as s:
            choice = repo.best_of(s, problem, source=self.source, job_id=job_id)
            if choice is not None:
                repo.set_job_best(s, job_id, choice.best.trial.id)
            rows = repo.list_measurements(s, job_id=job_id, limit=ALL_ROWS)
        return Finished(choice, rows)
