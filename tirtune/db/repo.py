"""Repository functions: the only way the rest of tirtune reads and writes the database.

Every function takes an open Session and never commits: the caller owns the unit of work,
normally `with transaction(factory) as s: ...` (see `tirtune.db.engine.transaction`), which
commits at the end of the block and turns database faults into DbError. Results are frozen
records, never ORM objects.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session

from tirtune.core import (
    EPILOGUE_NONE,
    Candidate,
    Config,
    EpilogueSpec,
    Outcome,
    Problem,
    Roofline,
    RunResult,
    Sample,
    Source,
    Stack,
    normalize_dtype,
)
from tirtune.core.problem import HALF_DTYPES
from tirtune.db.best import BestChoice, Figures, Ranked, choose, order
from tirtune.db.errors import DbError, NotFound
from tirtune.db.models import Job, Measurement, Remeasurement, utcnow
from tirtune.db.records import JobRecord, JobState, MeasurementRecord, RemeasurementRecord
from tirtune.space.branches import BRANCHES, branch_for_version

__all__ = [
    "ProblemStats",
    "best_of",
    "claim_job",
    "claim_next_job",
    "count_jobs",
    "count_measurements",
    "count_problems",
    "create_job",
    "find_active_job",
    "find_measurement",
    "job_remeasurements",
    "jobs_version",
    "latest_remeasurements",
    "finish_job",
    "get_job",
    "get_measurement",
    "job_progress",
    "job_with_best",
    "list_jobs",
    "list_measurements",
    "lock_problem",
    "mark_stale",
    "measurements_by_id",
    "measurements_version",
    "newest_gpu",
    "ping",
    "problem_measurements",
    "problem_stats",
    "ranked",
    "record_measurement",
    "record_remeasurements",
    "remeasurements_of",
    "requeue_running",
    "reuse_measurement",
    "set_job_best",
    "set_job_gpu",
    "training_samples",
    "tuned_gpus",
    "tuned_problems",
    "unfinished_jobs",
]

_ACTIVE = (JobState.QUEUED.value, JobState.RUNNING.value)
# What keys a problem in the tables (migration 0006 added the epilogue).
_PROBLEM_COLUMNS = (Measurement.m, Measurement.n, Measurement.k, Measurement.dtype, Measurement.epilogue)


def ping(s: Session) -> None:
    """Round-trip to the database (health checks)."""
    s.execute(sa.text("SELECT 1"))


# --- jobs -------------------------------------------------------------------------------------


def create_job(
    s: Session, problem: Problem, arch: str, max_trials: int, time_budget_s: float | None = None
) -> JobRecord:
    """Insert a QUEUED job with the Optuna study name `tirtune-{id}-{shape}-{dtype}-{arch}-{nonce}`
    (`...-{dtype}-{epilogue}-{arch}-...` for a fused problem).

    The nonce keeps names unique even when our tables are reset while Optuna's (which share the
    database) keep their old studies."""
    if max_trials < 1:
        raise DbError(f"max_trials must be at least 1, got {max_trials}")
    job = Job(
        m=problem.m,
        n=problem.n,
        k=problem.k,
        dtype=problem.dtype,
        epilogue=str(problem.epilogue),
        arch=arch,
        state=JobState.QUEUED.value,
        max_trials=max_trials,
        time_budget_s=time_budget_s,
        study_name=f"pending-{uuid.uuid4().hex}",  # the id is only known after the insert
    )
    s.add(job)
    s.flush()
    fused = "" if problem.epilogue.is_none else f"-{problem.epilogue}"
    job.study_name = f"tirtune-{job.id}-{problem.shape}-{problem.dtype}{fused}-{arch}-{uuid.uuid4().hex[:8]}"
    s.flush()
    return JobRecord.from_row(job)


def get_job(s: Session, job_id: int) -> JobRecord:
    """The job with this id; NotFound if there is none."""
    return JobRecord.from_row(_job_row(s, job_id))


def job_with_best(s: Session, job_id: int) -> tuple[JobRecord, MeasurementRecord | None]:
    """The job and its best trial so far (the row's `best_measurement_id`) in one query; NotFound
    if there is no such job."""
    stmt = (
        sa.select(Job, Measurement)
        .outerjoin(Measurement, Job.best_measurement_id == Measurement.id)
        .where(Job.id == job_id)
    )
    row = s.execute(stmt).first()
    if row is None:
        raise NotFound(f"job {job_id} not found")
    job, best = row
    return JobRecord.from_row(job), None if best is None else MeasurementRecord.from_row(best)


def list_jobs(s: Session, *, state: JobState | str | None = None, limit: int = 50, offset: int = 0) -> list[JobRecord]:
    """Jobs, newest first."""
    stmt = _job_filter(sa.select(Job), state).order_by(Job.id.desc()).limit(limit).offset(offset)
    return [JobRecord.from_row(row) for row in s.scalars(stmt)]


def count_jobs(s: Session, state: JobState | str | None = None) -> int:
    return _count(s, _job_filter(sa.select(Job.id), state))


def claim_next_job(s: Session) -> JobRecord | None:
    """Move the oldest QUEUED job to RUNNING and return it; None when the queue is empty.

    Two claimers never get the same job: PostgreSQL locks the row with FOR UPDATE SKIP LOCKED
    (a concurrent claimer takes the next one); SQLite transactions hold the write lock from
    their start (see engine.py), so claims are serialized.
    """
    stmt = (
        sa.select(Job)
        .where(Job.state == JobState.QUEUED.value)
        .order_by(Job.created_at, Job.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    )
    job = s.scalars(stmt).first()
    if job is None:
        return None
    job.state = JobState.RUNNING.value
    job.started_at = utcnow()
    s.flush()
    return JobRecord.from_row(job)


def claim_job(s: Session, job_id: int) -> JobRecord:
    """Move this QUEUED job to RUNNING (a foreground run, e.g. `tirtune tune`); DbError otherwise."""
    job = _job_row(s, job_id, lock=True)
    if job.state != JobState.QUEUED.value:
        raise DbError(f"job {job_id} is {job.state}, not QUEUED: it cannot be claimed")
    job.state, job.started_at = JobState.RUNNING.value, utcnow()
    s.flush()
    return JobRecord.from_row(job)


def requeue_running(s: Session) -> int:
    """Put every RUNNING job back in the queue; returns how many. For a service starting up: the
    jobs it finds RUNNING were left by a dead worker. Only safe while no other service runs jobs."""
    stmt = (
        sa.update(Job)
        .where(Job.state == JobState.RUNNING.value)
        .values(state=JobState.QUEUED.value, started_at=None, updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return cast(CursorResult[Any], s.execute(stmt)).rowcount


def unfinished_jobs(s: Session) -> list[JobRecord]:
    """QUEUED and RUNNING jobs, oldest first: what a restarted service resumes."""
    stmt = sa.select(Job).where(Job.state.in_(_ACTIVE)).order_by(Job.id)
    return [JobRecord.from_row(row) for row in s.scalars(stmt)]


def finish_job(s: Session, job_id: int, state: JobState | str, message: str = "") -> JobRecord:
    """Put a job in a final state (DONE, FAILED, CANCELLED) with a message for people."""
    final = JobState(state)
    if not final.finished:
        raise DbError(f"{final.value} is not a final job state")
    job = _job_row(s, job_id)
    job.state, job.message, job.finished_at = final.value, message, utcnow()
    s.flush()
    return JobRecord.from_row(job)


def set_job_gpu(s: Session, job_id: int, gpu_name: str) -> JobRecord:
    job = _job_row(s, job_id)
    job.gpu_name = gpu_name
    s.flush()
    return JobRecord.from_row(job)


def lock_problem(s: Session, problem: Problem, arch: str) -> None:
    """Serialize "find the active job, else create one" for one problem until the transaction
    ends, so two identical requests cannot both queue a job. PostgreSQL: a transaction-scoped
    advisory lock; SQLite: nothing to do, its transactions already exclude each other."""
    if s.get_bind().dialect.name != "postgresql":
        return
    # A plain GEMM's lock text is the one it had before epilogues keyed problems.
    fused = "" if problem.epilogue.is_none else f":{problem.epilogue}"
    digest = hashlib.sha256(f"tirtune-job:{problem.shape}:{problem.dtype}{fused}:{arch}".encode()).digest()
    s.execute(sa.select(sa.func.pg_advisory_xact_lock(int.from_bytes(digest[:8], "big", signed=True))))


def find_active_job(s: Session, problem: Problem, arch: str) -> JobRecord | None:
    """The oldest QUEUED or RUNNING job for the same problem and architecture, if any."""
    stmt = (
        sa.select(Job)
        .where(*_same_problem(Job, problem), Job.arch == arch, Job.state.in_(_ACTIVE))
        .order_by(Job.id)
        .limit(1)
    )
    row = s.scalars(stmt).first()
    return None if row is None else JobRecord.from_row(row)


# --- measurements -----------------------------------------------------------------------------


def record_measurement(
    s: Session,
    *,
    job_id: int | None,
    trial_number: int | None,
    key: str,
    candidate: Candidate,
    outcome: Outcome,
    message: str,
    result: RunResult | None,
    build_seconds: float | None = None,
    source: Source = Source.GPU,
) -> MeasurementRecord:
    """Store one candidate's fate; provenance (and with it the source, the recording and when
    the figures were measured) comes from `result.provenance` when present, else `source` says
    what ran the job (e.g. an INVALID config refused during a replay is a replay's row).

    With a job, its `trials_done` grows by one (not for INVALID configs) and an OK measurement
    with a higher same-run ratio than the job's current best becomes the best. The job row is
    locked first so concurrent recorders for one job neither lose increments nor race on the best.
    """
    job = None if job_id is None else _job_row(s, job_id, lock=True)
    row = Measurement(
        job_id=job_id,
        trial_number=trial_number,
        key=key,
        outcome=Outcome(outcome).value,
        message=message,
        build_seconds=build_seconds,
        **_candidate_columns(candidate),
        **_origin_columns(result, source),
        **_result_columns(candidate.problem, result),
    )
    s.add(row)
    s.flush()
    if job is not None:
        _update_job_progress(s, job, row)
    return MeasurementRecord.from_row(row)


def reuse_measurement(
    s: Session, previous: MeasurementRecord, *, job_id: int | None, trial_number: int | None
) -> MeasurementRecord:
    """Record `previous` (same identity key, found by `find_measurement`) again as a trial of
    this job, without measuring: a copy keeping its results, provenance and measuring time.
    The job's trials_done and best are updated as by `record_measurement`."""
    job = None if job_id is None else _job_row(s, job_id, lock=True)
    source = s.get(Measurement, previous.id)
    if source is None:
        raise NotFound(f"measurement {previous.id} not found")
    copied = {c.key: getattr(source, c.key) for c in sa.inspect(Measurement).column_attrs if c.key != "id"}
    row = Measurement(**{**copied, "job_id": job_id, "trial_number": trial_number})
    s.add(row)
    s.flush()
    if job is not None:
        _update_job_progress(s, job, row)
    return MeasurementRecord.from_row(row)


def get_measurement(s: Session, measurement_id: int) -> MeasurementRecord:
    row = s.get(Measurement, measurement_id)
    if row is None:
        raise NotFound(f"measurement {measurement_id} not found")
    return MeasurementRecord.from_row(row)


def measurements_by_id(s: Session, ids: Iterable[int]) -> dict[int, MeasurementRecord]:
    """Several measurements in one query (e.g. the best of each job on a page); missing ids are left out."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    rows = s.scalars(sa.select(Measurement).where(Measurement.id.in_(wanted)))
    return {row.id: MeasurementRecord.from_row(row) for row in rows}


def find_measurement(s: Session, key: str, source: Source = Source.GPU) -> MeasurementRecord | None:
    """The newest non-stale measurement with this identity key from `source`: a key is not
    measured twice, and a replayed figure never stands in for a GPU measurement (or back)."""
    stmt = (
        sa.select(Measurement)
        .where(Measurement.key == key, Measurement.stale.is_(False), Measurement.source == Source(source).value)
        .order_by(Measurement.id.desc())
        .limit(1)
    )
    row = s.scalars(stmt).first()
    return None if row is None else MeasurementRecord.from_row(row)


@dataclass(frozen=True, slots=True)
class _Light:
    """The columns ranking needs, read for every candidate row before whole rows are loaded."""

    id: int
    key: str
    config_digest: str
    template_version: str
    ratio: float | None


def ranked(
    s: Session,
    problem: Problem,
    *,
    gpu_name: str | None = None,
    source: Source = Source.GPU,
    job_id: int | None = None,
    limit: int = 10,
) -> list[Ranked]:
    """The best configs of `problem` (on `gpu_name`, of `job_id`, if given) from `source`, best
    first, at most `limit`, ranked by `tirtune.db.best.order` (same-run ratio, re-measured first)
    over the rows `best_of` may serve: OK, not stale, with a ratio."""
    where = [*_same_problem(Measurement, problem), _usable(), Measurement.source == Source(source).value]
    if gpu_name is not None:
        where.append(Measurement.gpu_name == gpu_name)
    if job_id is not None:
        where.append(Measurement.job_id == job_id)
    columns = (
        Measurement.id,
        Measurement.key,
        Measurement.config_digest,
        Measurement.template_version,
        Measurement.ratio,
    )
    light = [_Light(*row) for row in s.execute(sa.select(*columns).where(*where))]
    again = _newest_by_key(s, sa.select(Measurement.key).where(*where), source)
    top = order(light, again)[:limit]
    rows = measurements_by_id(s, [row.id for row, _ in top])
    return [Ranked(rows[row.id], Figures.of(rows[row.id], confirmed)) for row, confirmed in top]


def best_of(
    s: Session,
    problem: Problem,
    *,
    gpu_name: str | None = None,
    source: Source = Source.GPU,
    job_id: int | None = None,
) -> BestChoice | None:
    """The best config of `problem` (of one job, with `job_id`) and its runner-up: what GET /best,
    `tirtune best`, the tune command and the dashboard serve. None when nothing qualifies."""
    return choose(ranked(s, problem, gpu_name=gpu_name, source=source, job_id=job_id, limit=2))


def list_measurements(
    s: Session,
    *,
    job_id: int | None = None,
    problem: Problem | None = None,
    outcome: Outcome | str | None = None,
    dtype: str | None = None,
    epilogue: EpilogueSpec | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[MeasurementRecord]:
    """Measurements matching every given filter (`dtype`, `epilogue`: of every problem of that
    dtype, that epilogue), newest first. Plain rows, not ORM objects: a page of 100 is read-only,
    and the ORM's identity map and instances cost more than the query."""
    stmt = _measurement_filter(sa.select(*Measurement.__table__.c), job_id, problem, outcome, dtype, epilogue)
    result = s.execute(stmt.order_by(Measurement.id.desc()).limit(limit).offset(offset))
    names = tuple(result.keys())
    return [MeasurementRecord.from_columns(dict(zip(names, row, strict=True))) for row in result]


def count_measurements(
    s: Session,
    *,
    job_id: int | None = None,
    problem: Problem | None = None,
    outcome: Outcome | str | None = None,
    dtype: str | None = None,
    epilogue: EpilogueSpec | None = None,
) -> int:
    return _count(s, _measurement_filter(sa.select(Measurement.id), job_id, problem, outcome, dtype, epilogue))


def mark_stale(
    s: Session, *, keep_stack: Stack, template_version: str | None = None, source: Source = Source.GPU
) -> int:
    """Mark stale the measurements from `source` taken on `keep_stack.gpu_name` with another
    driver, CUDA or TVM (or, when given, another template version); returns how many were newly
    marked. A replay marks only replayed rows: a recording's old stack says nothing about the GPU.

    Stale rows stay visible (the dashboard shows them) but are never reused or called best.
    """
    differs = [
        Measurement.driver != keep_stack.driver,
        Measurement.cuda != keep_stack.cuda,
        Measurement.tvm_version != keep_stack.tvm,
    ]
    if template_version is not None:
        differs.append(Measurement.template_version != template_version)
    stmt = (
        sa.update(Measurement)
        .where(
            Measurement.gpu_name == keep_stack.gpu_name,
            Measurement.stale.is_(False),
            Measurement.source == Source(source).value,
            sa.or_(*differs),
        )
        .values(stale=True)
        .execution_options(synchronize_session=False)
    )
    return cast(CursorResult[Any], s.execute(stmt)).rowcount


# --- helpers ----------------------------------------------------------------------------------


def _job_row(s: Session, job_id: int, *, lock: bool = False) -> Job:
    job = s.get(Job, job_id, with_for_update=lock)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    return job


def job_progress(s: Session, job_id: int) -> tuple[int, MeasurementRecord | None]:
    """(trials spent, best so far) as the job's row keeps them: `record_measurement` and
    `reuse_measurement` are the one place that counts a trial (an INVALID config costs none) and
    moves the best so far (the highest same-run ratio); the job loop reads them back from here."""
    job = _job_row(s, job_id)
    best = None if job.best_measurement_id is None else s.get(Measurement, job.best_measurement_id)
    return job.trials_done, None if best is None else MeasurementRecord.from_row(best)


def _update_job_progress(s: Session, job: Job, measurement: Measurement) -> None:
    # An INVALID config is refused by a rule before any work: recorded, but no trial spent.
    if measurement.outcome != Outcome.INVALID.value:
        job.trials_done += 1
    # The best so far is the highest same-run ratio (tirtune.db.best), not the most TFLOP/s.
    if measurement.outcome == Outcome.OK.value and measurement.ratio is not None:
        best = None if job.best_measurement_id is None else s.get(Measurement, job.best_measurement_id)
        if best is None or best.ratio is None or measurement.ratio > best.ratio:
            job.best_measurement_id = measurement.id
    s.flush()


def _candidate_columns(candidate: Candidate) -> dict[str, Any]:
    problem = candidate.problem
    return {
        "config": candidate.config.to_json(),
        "config_digest": candidate.config.digest(),
        "m": problem.m,
        "n": problem.n,
        "k": problem.k,
        "dtype": problem.dtype,
        "epilogue": str(problem.epilogue),
        "template_version": candidate.template_version,
    }


def _origin_columns(result: RunResult | None, source: Source) -> dict[str, Any]:
    """source, recording, measured_at: from the provenance, else `source` at this moment (a
    replay's row without a recorded time says unknown, never the time of the replay)."""
    p = None if result is None else result.provenance
    origin = Source(p.source if p is not None else source)
    measured_at = p.measured_at if p is not None else None
    if measured_at is None and origin is Source.GPU:
        measured_at = utcnow()
    return {"source": origin.value, "recording": None if p is None else p.recording, "measured_at": measured_at}


def _result_columns(problem: Problem, result: RunResult | None) -> dict[str, Any]:
    if result is None:
        return {}
    has_ratio = bool(result.time_ms and result.cublas_ms)
    columns: dict[str, Any] = {
        "time_ms": result.time_ms,
        "time_p10_ms": result.time_p10_ms,
        "time_p90_ms": result.time_p90_ms,
        "repetitions": result.repetitions,
        "cublas_ms": result.cublas_ms,
        "rel_error": result.rel_error,
        "tflops": _tflops(problem, result.time_ms),
        "cublas_tflops": _tflops(problem, result.cublas_ms),
        "ratio": result.ratio if has_ratio else None,
        "ratio_p10": result.ratio_p10 if has_ratio else None,
        "ratio_p90": result.ratio_p90 if has_ratio else None,
        "bytes_moved": problem.min_bytes if result.time_ms else None,
        "bandwidth_gbs": Roofline.of(problem, None, None).bandwidth_gbs(result.time_ms),
    }
    if result.provenance is not None:
        p = result.provenance
        columns |= {
            "gpu_name": p.stack.gpu_name,
            "driver": p.stack.driver,
            "cuda": p.stack.cuda,
            "tvm_version": p.stack.tvm,
            "compute_capability": p.stack.compute_capability,
            "torch_version": p.torch,
            "sm_clock_mhz": p.sm_clock_mhz,
            "power_w": p.power_w,
            "copy_gbs": p.copy_gbs,
            "peak_tflops": p.peak_tflops,
        }
    return columns


def _tflops(problem: Problem, milliseconds: float | None) -> float | None:
    return problem.tflops(milliseconds) if milliseconds is not None and milliseconds > 0 else None


def _same_problem(model: type[Job] | type[Measurement], problem: Problem) -> Sequence[sa.ColumnElement[bool]]:
    """The rows of `problem`: its shape, dtype and epilogue (a fused problem's rows are never the
    plain GEMM's, nor the other way round)."""
    return (
        model.m == problem.m,
        model.n == problem.n,
        model.k == problem.k,
        model.dtype == problem.dtype,
        model.epilogue == str(problem.epilogue),
    )


def _job_filter(stmt: sa.Select[Any], state: JobState | str | None) -> sa.Select[Any]:
    return stmt if state is None else stmt.where(Job.state == JobState(state).value)


def _measurement_filter(
    stmt: sa.Select[Any],
    job_id: int | None,
    problem: Problem | None,
    outcome: Outcome | str | None,
    dtype: str | None = None,
    epilogue: EpilogueSpec | None = None,
) -> sa.Select[Any]:
    if job_id is not None:
        stmt = stmt.where(Measurement.job_id == job_id)
    if problem is not None:
        stmt = stmt.where(*_same_problem(Measurement, problem))
    if dtype is not None:
        stmt = stmt.where(Measurement.dtype == normalize_dtype(dtype))
    if epilogue is not None:
        stmt = stmt.where(Measurement.epilogue == str(epilogue))
    if outcome is not None:
        stmt = stmt.where(Measurement.outcome == Outcome(outcome).value)
    return stmt


def _count(s: Session, stmt: sa.Select[Any]) -> int:
    return s.scalar(sa.select(sa.func.count()).select_from(stmt.subquery())) or 0


# --- read-only queries for the dashboard and GET /best?fallback=nearest ---------------------------


@dataclass(frozen=True, slots=True)
class ProblemStats:
    """One problem that has measurements: how many, how many OK, the fastest OK TFLOP/s."""

    problem: Problem
    measurements: int
    ok: int
    best_tflops: float | None


def problem_measurements(
    s: Session, problem: Problem, *, job_id: int | None = None, limit: int = 5000
) -> list[MeasurementRecord]:
    """Measurements of one problem (of one job, if given), oldest first: the order they were
    recorded in, which is the x-axis of best-so-far curves. At most `limit` (the oldest)."""
    stmt = _measurement_filter(sa.select(Measurement), job_id, problem, None)
    return [MeasurementRecord.from_row(r) for r in s.scalars(stmt.order_by(Measurement.id).limit(limit))]


def problem_stats(s: Session, *, limit: int = 100, offset: int = 0) -> list[ProblemStats]:
    """Every problem with measurements, the most recently measured first."""
    ok = sa.case((Measurement.outcome == Outcome.OK.value, 1), else_=0)
    best = sa.case((_usable(), Measurement.tflops), else_=None)
    stmt = (
        sa.select(
            Measurement.m,
            Measurement.n,
            Measurement.k,
            Measurement.dtype,
            Measurement.epilogue,
            sa.func.count(),
            sa.func.sum(ok),
            sa.func.max(best),
        )
        .group_by(*_PROBLEM_COLUMNS)
        .order_by(sa.func.max(Measurement.id).desc())
        .limit(limit)
        .offset(offset)
    )
    return [
        ProblemStats(Problem(m, n, k, dtype, EpilogueSpec.parse(epilogue)), count, int(oks or 0), top)
        for m, n, k, dtype, epilogue, count, oks, top in s.execute(stmt)
    ]


def count_problems(s: Session) -> int:
    problems = sa.select(*_PROBLEM_COLUMNS).distinct().subquery()
    return s.scalar(sa.select(sa.func.count()).select_from(problems)) or 0


def tuned_problems(
    s: Session,
    dtype: str,
    *,
    epilogue: EpilogueSpec | None,
    gpu_name: str | None = None,
    source: Source = Source.GPU,
) -> list[Problem]:
    """The problems of `dtype` that `best_of` has an answer for (on `gpu_name` if given, from
    `source`): of `epilogue` only (what a nearest-shape lookup takes: another epilogue's figures are
    not this problem's), or of every epilogue with None (an export of everything tuned)."""
    stmt = (
        sa.select(Measurement.m, Measurement.n, Measurement.k, Measurement.epilogue)
        .distinct()
        .where(Measurement.dtype == dtype, _usable(), Measurement.source == Source(source).value)
    )
    if epilogue is not None:
        stmt = stmt.where(Measurement.epilogue == str(epilogue))
    if gpu_name is not None:
        stmt = stmt.where(Measurement.gpu_name == gpu_name)
    return [Problem(m, n, k, dtype, EpilogueSpec.parse(fused)) for m, n, k, fused in s.execute(stmt)]


def tuned_gpus(s: Session, problem: Problem, *, source: Source = Source.GPU) -> list[str]:
    """The GPU models `best_of` has an answer for `problem` on, from `source`."""
    stmt = (
        sa.select(Measurement.gpu_name)
        .distinct()
        .where(*_same_problem(Measurement, problem), _usable(), Measurement.source == Source(source).value)
    )
    return sorted(s.scalars(stmt))


def _usable() -> sa.ColumnElement[bool]:
    """What best_of may serve: OK, not stale, with a throughput and a same-run ratio, and a kernel
    of a branch that is only compile-checked (the registry's status; Blackwell's sm_100a) only if it
    ran on a GPU its code runs on (compute capability 10.0): a figure from anywhere else (a replay,
    a hand-made row) is never ranked."""
    return sa.and_(
        Measurement.outcome == Outcome.OK.value,
        Measurement.stale.is_(False),
        Measurement.tflops.is_not(None),
        Measurement.ratio.is_not(None),
        *(
            sa.or_(~Measurement.template_version.startswith(b.version_prefix), _runs_on(b.compute_capabilities))
            for b in BRANCHES.values()
            if not b.measured
        ),
    )


def _runs_on(capabilities: Sequence[str]) -> sa.ColumnElement[bool]:
    """The rows measured on one of `capabilities` ("10.0" exactly, "9.x" any minor)."""
    cc = Measurement.compute_capability
    return sa.or_(*(cc.like(c[:-1] + "%") if c.endswith(".x") else cc == c for c in capabilities))


# --- re-measurements of a job's top trials (docs/measurement.md, "Re-measurement before a best is named") ---


def record_remeasurements(
    s: Session,
    *,
    job_id: int | None,
    session_id: str,
    rounds: int,
    pairs: Sequence[tuple[MeasurementRecord, RunResult]],
) -> list[RemeasurementRecord]:
    """Store one interleaved re-measurement: each (trial, result) pair becomes a row of `session_id`.
    Its source is the result's (else the trial's); `processes` comes from the result
    (`extra["processes"]`, else 1)."""
    rows = []
    for trial, result in pairs:
        p = result.provenance
        row = Remeasurement(
            job_id=job_id,
            measurement_id=trial.id,
            key=trial.key,
            session=session_id,
            rounds=rounds,
            outcome=result.outcome.value,
            message=result.message,
            time_ms=result.time_ms,
            time_p10_ms=result.time_p10_ms,
            time_p90_ms=result.time_p90_ms,
            repetitions=result.repetitions,
            tflops=_tflops(trial.problem, result.time_ms),
            cublas_ms=result.cublas_ms,
            ratio=result.ratio,
            sm_clock_mhz=p.sm_clock_mhz if p else None,
            power_w=p.power_w if p else None,
            ratio_p10=result.ratio_p10,
            ratio_p90=result.ratio_p90,
            processes=int(result.extra.get("processes", 1)),
            source=(p.source if p else trial.source).value,
            recording=p.recording if p else trial.recording,
            bandwidth_gbs=Roofline.of(trial.problem, None, None).bandwidth_gbs(result.time_ms),
            copy_gbs=p.copy_gbs if p else None,
            peak_tflops=p.peak_tflops if p else None,
        )
        s.add(row)
        rows.append(row)
    s.flush()
    return [RemeasurementRecord.from_row(row) for row in rows]


def latest_remeasurements(
    s: Session, keys: Iterable[str], source: Source = Source.GPU
) -> dict[str, RemeasurementRecord]:
    """The newest re-measurement from `source` of each key that has one (keys carry the stack:
    never stale)."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    return _newest_by_key(s, wanted, source)


def remeasurements_of(s: Session, trials: Iterable[MeasurementRecord]) -> dict[int, RemeasurementRecord]:
    """For each trial (by id) that has one: the newest re-measurement of its key and source, the
    one that confirms (or refutes) it for `best_of`."""
    trials = list(trials)
    found: dict[int, RemeasurementRecord] = {}
    for source in {t.source for t in trials}:
        newest = _newest_by_key(s, sorted({t.key for t in trials if t.source is source}), source)
        found |= {t.id: newest[t.key] for t in trials if t.source is source and t.key in newest}
    return found


def _newest_by_key(s: Session, keys: Sequence[str] | sa.Select[Any], source: Source) -> dict[str, RemeasurementRecord]:
    stmt = (
        sa.select(Remeasurement)
        .where(Remeasurement.key.in_(keys), Remeasurement.source == Source(source).value)
        .order_by(Remeasurement.id)
    )
    return {row.key: RemeasurementRecord.from_row(row) for row in s.scalars(stmt)}


def job_remeasurements(s: Session, job_id: int) -> list[RemeasurementRecord]:
    """A job's re-measurements, oldest first."""
    stmt = sa.select(Remeasurement).where(Remeasurement.job_id == job_id).order_by(Remeasurement.id)
    return [RemeasurementRecord.from_row(row) for row in s.scalars(stmt)]


def set_job_best(s: Session, job_id: int, measurement_id: int) -> JobRecord:
    """Name the job's best trial (after re-measurement), whatever its trial figure said."""
    job = _job_row(s, job_id, lock=True)
    job.best_measurement_id = measurement_id
    s.flush()
    return JobRecord.from_row(job)


def jobs_version(s: Session) -> tuple[int, int, int]:
    """(number of jobs, newest job id, sum of the jobs' revisions): it changes whenever a job is
    created or updated (every UPDATE adds one to the row's `revision`), so caches of answers that
    show jobs can tell when to drop them. A sum, not the newest `updated_at`: a writer that
    committed after a later one still moves it. A scan of the jobs (one row per tuning job), meant
    for about one call a second."""
    count, newest, revisions = s.execute(
        sa.select(sa.func.count(), sa.func.max(Job.id), sa.func.sum(Job.revision))
    ).one()
    return count, newest or 0, int(revisions or 0)


def measurements_version(s: Session) -> tuple[int, int, int]:
    """(newest measurement id, number of stale rows, newest re-measurement id): it changes
    whenever a measurement or a re-measurement (which can change the best) is recorded or a row is
    marked stale, so caches of read answers can tell when to drop them. The ids come from the
    primary keys' indexes; the stale count is a scan, meant for about one call a second."""
    newest = s.scalar(sa.select(sa.func.max(Measurement.id))) or 0
    stale = s.scalar(sa.select(sa.func.count()).where(Measurement.stale.is_(True))) or 0
    again = s.scalar(sa.select(sa.func.max(Remeasurement.id))) or 0
    return newest, stale, again


def training_samples(
    s: Session,
    gpu_name: str,
    version_prefix: str,
    *,
    source: Source = Source.GPU,
    after_id: int = 0,
    limit: int = 100_000,
) -> tuple[list[Sample], int]:
    """What the cost model learns from (tirtune.model): the correct trials with a same-run ratio
    measured on `gpu_name` from `source`, of template versions starting with `version_prefix`,
    newer than `after_id`, in id order (at most `limit`), and the newest id read (`after_id`
    when none). Stale rows count too: a new driver or TVM rarely reorders configs, and the model
    weighs figures, it does not serve them. A reused measurement (the same key measured once,
    recorded again for another job) is one sample. Only plain GEMMs (epilogue "none"): the model's
    features do not see a fused epilogue, so a fused problem's figures would be learned as the
    plain GEMM's of its shape (docs/design.md, "Epilogues"); and only 16-bit operands
    (`HALF_DTYPES`): the features count 2-byte elements and a 16-bit MMA peak, so FP8 figures would
    be learned as a 16-bit GEMM's, and every 16-bit ranking would move with them."""
    stmt = (
        sa.select(
            Measurement.id,
            Measurement.m,
            Measurement.n,
            Measurement.k,
            Measurement.dtype,
            Measurement.config,
            Measurement.ratio,
            Measurement.key,
        )
        .where(
            Measurement.id > after_id,
            Measurement.outcome == Outcome.OK.value,
            Measurement.ratio > 0,
            Measurement.gpu_name == gpu_name,
            Measurement.source == Source(source).value,
            Measurement.template_version.startswith(version_prefix),
            Measurement.epilogue == str(EPILOGUE_NONE),
            Measurement.dtype.in_(HALF_DTYPES),
        )
        .order_by(Measurement.id)
        .limit(limit)
    )
    samples: list[Sample] = []
    newest = after_id
    seen: set[str] = set()
    table = branch_for_version(version_prefix).knobs  # every row's version starts with the prefix
    for row_id, m, n, k, dtype, config, ratio, key in s.execute(stmt):
        newest = row_id
        if key in seen:
            continue
        seen.add(key)
        samples.append(
            Sample(Problem(m, n, k, dtype), Config.from_json(config, table), float(ratio), f"measurement {row_id}")
        )
    return samples, newest


def newest_gpu(s: Session) -> str | None:
    """The GPU model of the newest measurement taken on a GPU (None: none yet)."""
    return s.scalar(
        sa.select(Measurement.gpu_name)
        .where(Measurement.source == Source.GPU.value, Measurement.gpu_name != "")
        .order_by(Measurement.id.desc())
        .limit(1)
    )
