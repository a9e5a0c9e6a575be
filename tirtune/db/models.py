"""ORM models. Every table is prefixed `tirtune_`: Optuna's RDB storage shares the database and
owns unprefixed names (studies, trials, version_info, alembic_version, ...).

The schema is created by the Alembic migrations in `migrations/`, never by `create_all`; the
migration tests check that these models and the migrated schema agree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "JOB_STATES",
    "OUTCOMES",
    "SOURCES",
    "Base",
    "Job",
    "Measurement",
    "Remeasurement",
    "UtcDateTime",
    "metadata",
    "utcnow",
]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

# Kept as plain strings here (the CHECK constraints need the literal values); records.py maps
# them onto JobState and core.Outcome.
JOB_STATES = ("QUEUED", "RUNNING", "DONE", "FAILED", "CANCELLED")
OUTCOMES = ("OK", "INVALID", "COMPILE_ERROR", "LAUNCH_ERROR", "TIMEOUT", "WRONG_RESULT")
# Where a row's figures come from (core.Source): this service's GPU runner or a replayed recording.
SOURCES = ("gpu", "replay")


def utcnow() -> datetime:
    return datetime.now(UTC)


def _one_of(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class UtcDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    PostgreSQL stores `timestamptz`; SQLite has no time zones, so values are normalized to UTC
    on the way in and marked UTC on the way out. Naive datetimes are refused: they are bugs.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: tirtune stores timezone-aware UTC timestamps")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = metadata
    type_annotation_map: dict[Any, Any] = {datetime: UtcDateTime(), float: sa.Double()}


class Job(Base):
    """One tuning request: a problem, an architecture and a trial budget, with its progress."""

    __tablename__ = "tirtune_jobs"
    __table_args__ = (sa.CheckConstraint(_one_of("state", JOB_STATES), name="state"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    m: Mapped[int]
    n: Mapped[int]
    k: Mapped[int]
    dtype: Mapped[str] = mapped_column(sa.String(16))
    # The fused epilogue's canonical text ("none", "bias+residual"; core/epilogue.py): with M, N, K
    # and dtype, the problem's key (migration 0006).
    epilogue: Mapped[str] = mapped_column(sa.String(64), default="none", server_default="none")
    arch: Mapped[str] = mapped_column(sa.String(16))
    state: Mapped[str] = mapped_column(sa.String(16), index=True, default="QUEUED")
    max_trials: Mapped[int]
    time_budget_s: Mapped[float | None]
    study_name: Mapped[str] = mapped_column(sa.String(128), unique=True)
    gpu_name: Mapped[str | None] = mapped_column(sa.String(128))
    trials_done: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))
    # use_alter: jobs and measurements reference each other; the migration adds this one last.
    best_measurement_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("tirtune_measurements.id", ondelete="SET NULL", use_alter=True)
    )
    message: Mapped[str] = mapped_column(sa.Text, default="", server_default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    # Every UPDATE of the row adds one, in the statement itself (ORM flushes and Core updates
    # alike): the sum over the table moves whenever any job changes, whatever order writers commit
    # in (repo.jobs_version; migration 0005).
    revision: Mapped[int] = mapped_column(
        default=0, server_default=sa.text("0"), onupdate=sa.literal_column("revision + 1")
    )


class Measurement(Base):
    """One candidate's fate: the outcome, its timings when OK, and the stack that measured it.

    `ratio` is cuBLAS median / kernel median over the run's repetitions; `ratio_p10`/`ratio_p90`
    the spread of its per-round ratios (None for rows measured before 0003 stored them).
    `source` says whether a GPU measured it here or a recording (`recording`) was replayed;
    `measured_at` is when the figures were measured (a replay's: the recording's time, None
    when unknown), `created_at` when the row was stored."""

    __tablename__ = "tirtune_measurements"
    __table_args__ = (
        sa.CheckConstraint(_one_of("outcome", OUTCOMES), name="outcome"),
        sa.CheckConstraint(_one_of("source", SOURCES), name="source"),
        # Serves best_of and the problem filter of list_measurements (the epilogue keys the problem: 0006).
        sa.Index(None, "m", "n", "k", "dtype", "epilogue", "gpu_name", "outcome"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int | None] = mapped_column(sa.ForeignKey("tirtune_jobs.id", ondelete="SET NULL"), index=True)
    trial_number: Mapped[int | None]
    key: Mapped[str] = mapped_column(sa.String(64), index=True)
    config: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    config_digest: Mapped[str] = mapped_column(sa.String(64))
    m: Mapped[int]
    n: Mapped[int]
    k: Mapped[int]
    dtype: Mapped[str] = mapped_column(sa.String(16))
    epilogue: Mapped[str] = mapped_column(sa.String(64), default="none", server_default="none")
    template_version: Mapped[str] = mapped_column(sa.String(64))
    outcome: Mapped[str] = mapped_column(sa.String(16))
    message: Mapped[str] = mapped_column(sa.Text, default="", server_default="")
    time_ms: Mapped[float | None]
    time_p10_ms: Mapped[float | None]
    time_p90_ms: Mapped[float | None]
    repetitions: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))
    tflops: Mapped[float | None]
    cublas_ms: Mapped[float | None]
    cublas_tflops: Mapped[float | None]
    ratio: Mapped[float | None]
    ratio_p10: Mapped[float | None]
    ratio_p90: Mapped[float | None]
    rel_error: Mapped[float | None]
    gpu_name: Mapped[str] = mapped_column(sa.String(128), default="", server_default="")
    driver: Mapped[str] = mapped_column(sa.String(64), default="", server_default="")
    cuda: Mapped[str] = mapped_column(sa.String(64), default="", server_default="")
    tvm_version: Mapped[str] = mapped_column(sa.String(64), default="", server_default="")
    torch_version: Mapped[str] = mapped_column(sa.String(64), default="", server_default="")
    compute_capability: Mapped[str] = mapped_column(sa.String(16), default="", server_default="")
    sm_clock_mhz: Mapped[float | None]
    power_w: Mapped[float | None]
    build_seconds: Mapped[float | None]
    stale: Mapped[bool] = mapped_column(default=False, server_default=sa.false())
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    source: Mapped[str] = mapped_column(sa.String(16), default="gpu", server_default="gpu")
    recording: Mapped[str | None] = mapped_column(sa.String(256))
    measured_at: Mapped[datetime | None]
    # The roofline (core/roofline.py): bytes the GEMM must move, the bandwidth this time reached on
    # them, and the measuring process's ceilings (copy bandwidth, MMA rate at the measured clock).
    bytes_moved: Mapped[int | None] = mapped_column(sa.BigInteger)
    bandwidth_gbs: Mapped[float | None]
    copy_gbs: Mapped[float | None]
    peak_tflops: Mapped[float | None]


class Remeasurement(Base):
    """A top trial measured again before the job calls one best (docs/design.md, "One best, by the
    same-run ratio").

    The candidates of one `session` were timed in the same measuring process, interleaved round
    by round with cuBLAS, so their figures compare with each other better than the trials' do.
    A separate table: trial counts, reuse and the best-of-problem queries see only trials.
    """

    __tablename__ = "tirtune_remeasurements"
    __table_args__ = (
        sa.CheckConstraint(_one_of("outcome", OUTCOMES), name="outcome"),
        sa.CheckConstraint(_one_of("source", SOURCES), name="source"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int | None] = mapped_column(sa.ForeignKey("tirtune_jobs.id", ondelete="SET NULL"), index=True)
    # The trial this re-measures (its config, problem and provenance live there).
    measurement_id: Mapped[int] = mapped_column(
        sa.ForeignKey("tirtune_measurements.id", ondelete="CASCADE"), index=True
    )
    key: Mapped[str] = mapped_column(sa.String(64), index=True)
    session: Mapped[str] = mapped_column(sa.String(32))
    rounds: Mapped[int]
    outcome: Mapped[str] = mapped_column(sa.String(16))
    message: Mapped[str] = mapped_column(sa.Text, default="", server_default="")
    time_ms: Mapped[float | None]
    time_p10_ms: Mapped[float | None]
    time_p90_ms: Mapped[float | None]
    repetitions: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))
    tflops: Mapped[float | None]
    cublas_ms: Mapped[float | None]
    ratio: Mapped[float | None]
    sm_clock_mhz: Mapped[float | None]
    power_w: Mapped[float | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    ratio_p10: Mapped[float | None]
    ratio_p90: Mapped[float | None]
    # Measuring processes whose rounds it pools (one before 0003).
    processes: Mapped[int] = mapped_column(default=1, server_default=sa.text("1"))
    source: Mapped[str] = mapped_column(sa.String(16), default="gpu", server_default="gpu")
    recording: Mapped[str | None] = mapped_column(sa.String(256))
    bandwidth_gbs: Mapped[float | None]
    copy_gbs: Mapped[float | None]
    peak_tflops: Mapped[float | None]
