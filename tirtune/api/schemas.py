"""Request and response bodies: the only Pydantic models in tirtune (records stay dataclasses)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tirtune.db import JobRecord, JobState, MeasurementRecord
from tirtune.space import Problem, SpaceError, normalize_dtype
from tirtune.workers.results import Outcome

__all__ = [
    "BestOut",
    "ErrorBody",
    "ErrorOut",
    "HealthOut",
    "JobOut",
    "MeasurementOut",
    "Page",
    "ProblemOut",
    "ProvenanceOut",
    "TuneRequest",
]

T = TypeVar("T")
Dim = Annotated[int, Field(strict=True, gt=0, description="A GEMM dimension; D(M,N) = A(M,K) @ B(N,K).T")]


class TuneRequest(BaseModel):
    """POST /tune. Unknown fields are refused so that a typo is not silently ignored."""

    model_config = ConfigDict(extra="forbid")

    m: Dim
    n: Dim
    k: Dim
    dtype: Literal["float16", "bfloat16"] = Field("float16", description="Aliases fp16, half, bf16 accepted.")
    max_trials: Annotated[int, Field(strict=True, ge=1, le=10_000)] = 64
    time_budget_s: Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)] | None = None

    @field_validator("dtype", mode="before")
    @classmethod
    def _canonical_dtype(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return normalize_dtype(value)
        except SpaceError as e:
            raise ValueError(str(e)) from None

    def problem(self) -> Problem:
        """The problem asked for; SpaceError when a dimension is out of range."""
        return Problem(self.m, self.n, self.k, self.dtype)


class ProblemOut(BaseModel):
    m: int
    n: int
    k: int
    dtype: str

    @classmethod
    def of(cls, problem: Problem) -> ProblemOut:
        return cls(m=problem.m, n=problem.n, k=problem.k, dtype=problem.dtype)


class ProvenanceOut(BaseModel):
    gpu_name: str
    driver: str
    cuda: str
    tvm_version: str
    torch_version: str
    template_version: str
    sm_clock_mhz: float | None
    power_w: float | None

    @classmethod
    def of(cls, r: MeasurementRecord) -> ProvenanceOut:
        return cls(
            gpu_name=r.gpu_name, driver=r.driver, cuda=r.cuda, tvm_version=r.tvm_version,
            torch_version=r.torch_version, template_version=r.template_version,
            sm_clock_mhz=r.sm_clock_mhz, power_w=r.power_w,
        )


class MeasurementOut(BaseModel):
    id: int
    job_id: int | None
    trial_number: int | None
    config: dict[str, Any]
    config_label: str
    outcome: Outcome
    message: str
    time_ms: float | None
    tflops: float | None
    cublas_tflops: float | None
    ratio: float | None = Field(description="cuBLAS time / kernel time: above 1 is faster than cuBLAS")
    rel_error: float | None
    provenance: ProvenanceOut
    stale: bool
    created_at: datetime

    @classmethod
    def of(cls, r: MeasurementRecord) -> MeasurementOut:
        return cls(
            id=r.id, job_id=r.job_id, trial_number=r.trial_number, config=r.config.to_json(),
            config_label=r.config.label(), outcome=r.outcome, message=r.message, time_ms=r.time_ms,
            tflops=r.tflops, cublas_tflops=r.cublas_tflops, ratio=r.ratio, rel_error=r.rel_error,
            provenance=ProvenanceOut.of(r), stale=r.stale, created_at=r.created_at,
        )


class JobOut(BaseModel):
    id: int
    state: JobState
    problem: ProblemOut
    shape: str
    arch: str
    max_trials: int
    trials_done: int
    progress: float = Field(ge=0, le=1, description="trials done / max trials; 1 once DONE")
    best: MeasurementOut | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    message: str

    @classmethod
    def of(cls, job: JobRecord, best: MeasurementRecord | None) -> JobOut:
        progress = 1.0 if job.state is JobState.DONE else min(1.0, job.trials_done / job.max_trials)
        return cls(
            id=job.id, state=job.state, problem=ProblemOut.of(job.problem), shape=job.problem.shape,
            arch=job.arch, max_trials=job.max_trials, trials_done=job.trials_done, progress=progress,
            best=None if best is None else MeasurementOut.of(best), created_at=job.created_at,
            started_at=job.started_at, finished_at=job.finished_at, message=job.message,
        )


class BestOut(BaseModel):
    problem: ProblemOut
    shape: str
    dtype: str
    config: dict[str, Any]
    config_label: str
    tflops: float | None
    cublas_tflops: float | None
    ratio: float | None
    time_ms: float | None
    provenance: ProvenanceOut
    measured_at: datetime
    job_id: int | None

    @classmethod
    def of(cls, r: MeasurementRecord) -> BestOut:
        return cls(
            problem=ProblemOut.of(r.problem), shape=r.problem.shape, dtype=r.dtype,
            config=r.config.to_json(), config_label=r.config.label(), tflops=r.tflops,
            cublas_tflops=r.cublas_tflops, ratio=r.ratio, time_ms=r.time_ms,
            provenance=ProvenanceOut.of(r), measured_at=r.created_at, job_id=r.job_id,
        )


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int


class HealthOut(BaseModel):
    status: Literal["ok"] = "ok"
    database: Literal["ok"] = "ok"


class ErrorBody(BaseModel):
    code: str = Field(description="Stable machine-readable name, e.g. validation_error, not_found")
    message: str = Field(description="What went wrong and, where possible, what to do")
    detail: Any = None


class ErrorOut(BaseModel):
    """The one shape of every error response."""

    error: ErrorBody
