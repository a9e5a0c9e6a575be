"""Frozen records the repository returns: plain values, safe to use after the session is gone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from tirtune.core import Config, EpilogueSpec, Outcome, Problem, Roofline, Source, Stack
from tirtune.db.models import Job, Measurement, Remeasurement
from tirtune.space.branches import branch_for_version

__all__ = ["TERMINAL_STATES", "JobRecord", "JobState", "MeasurementRecord", "RemeasurementRecord"]


class JobState(StrEnum):
    """A job's life: QUEUED -> RUNNING -> DONE | FAILED | CANCELLED."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def finished(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED})


@dataclass(frozen=True, slots=True)
class JobRecord:
    id: int
    m: int
    n: int
    k: int
    dtype: str
    epilogue: str  # canonical text: "none", "bias+residual" (core/epilogue.py)
    arch: str
    state: JobState
    max_trials: int
    time_budget_s: float | None
    study_name: str
    gpu_name: str | None
    trials_done: int
    best_measurement_id: int | None
    message: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime

    @property
    def problem(self) -> Problem:
        return Problem(self.m, self.n, self.k, self.dtype, EpilogueSpec.parse(self.epilogue))

    @classmethod
    def from_row(cls, row: Job) -> JobRecord:
        values = {name: getattr(row, name) for name in cls.__dataclass_fields__}
        return cls(**{**values, "state": JobState(row.state)})


@dataclass(frozen=True, slots=True)
class MeasurementRecord:
    id: int
    job_id: int | None
    trial_number: int | None
    key: str
    config: Config
    config_digest: str
    m: int
    n: int
    k: int
    dtype: str
    epilogue: str  # canonical text: "none", "bias+residual" (core/epilogue.py)
    template_version: str
    outcome: Outcome
    message: str
    time_ms: float | None
    time_p10_ms: float | None
    time_p90_ms: float | None
    repetitions: int
    tflops: float | None
    cublas_ms: float | None
    cublas_tflops: float | None
    ratio: float | None
    ratio_p10: float | None
    ratio_p90: float | None
    rel_error: float | None
    gpu_name: str
    driver: str
    cuda: str
    tvm_version: str
    torch_version: str
    compute_capability: str
    sm_clock_mhz: float | None
    power_w: float | None
    build_seconds: float | None
    stale: bool
    created_at: datetime  # when the row was stored
    source: Source  # GPU: measured by this service; REPLAY: read back from `recording`
    recording: str | None
    measured_at: datetime | None  # when the figures were measured; None: unknown (a replay's recording did not say)
    bytes_moved: int | None  # the least the GEMM must move (A, B read once, D written once)
    bandwidth_gbs: float | None  # bytes_moved over time_ms
    copy_gbs: float | None  # the measuring process's device-to-device copy bandwidth
    peak_tflops: float | None  # the MMA rate at the measured SM clock

    @property
    def problem(self) -> Problem:
        return Problem(self.m, self.n, self.k, self.dtype, EpilogueSpec.parse(self.epilogue))

    @property
    def roofline(self) -> Roofline:
        return Roofline.of(self.problem, self.peak_tflops, self.copy_gbs)

    @property
    def stack(self) -> Stack:
        return Stack(self.gpu_name, self.driver, self.cuda, self.tvm_version, self.compute_capability)

    @classmethod
    def from_row(cls, row: Measurement) -> MeasurementRecord:
        values = {name: getattr(row, name) for name in cls.__dataclass_fields__}
        return cls(
            **{
                **values,
                "config": Config.from_json(row.config, branch_for_version(row.template_version).knobs),
                "outcome": Outcome(row.outcome),
                "source": Source(row.source),
            }
        )

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any]) -> MeasurementRecord:
        """From a plain row of the table, as column name -> value (a page read without the ORM)."""
        values = {name: columns[name] for name in cls.__dataclass_fields__}
        return cls(
            **{
                **values,
                "config": Config.from_json(values["config"], branch_for_version(values["template_version"]).knobs),
                "outcome": Outcome(values["outcome"]),
                "source": Source(values["source"]),
            }
        )


@dataclass(frozen=True, slots=True)
class RemeasurementRecord:
    """A trial measured again, interleaved with the job's other top trials (one `session`)."""

    id: int
    job_id: int | None
    measurement_id: int
    key: str
    session: str
    rounds: int
    outcome: Outcome
    message: str
    time_ms: float | None
    time_p10_ms: float | None
    time_p90_ms: float | None
    repetitions: int
    tflops: float | None
    cublas_ms: float | None
    ratio: float | None
    sm_clock_mhz: float | None
    power_w: float | None
    created_at: datetime
    ratio_p10: float | None
    ratio_p90: float | None
    processes: int  # measuring processes whose rounds the figures pool
    source: Source
    recording: str | None
    bandwidth_gbs: float | None
    copy_gbs: float | None
    peak_tflops: float | None

    @classmethod
    def from_row(cls, row: Remeasurement) -> RemeasurementRecord:
        values = {name: getattr(row, name) for name in cls.__dataclass_fields__}
        return cls(**{**values, "outcome": Outcome(row.outcome), "source": Source(row.source)})
