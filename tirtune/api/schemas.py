"""Request and response bodies: the only Pydantic models in tirtune (records stay dataclasses)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from tirtune.api.summary import KNOBS, StudySummary, Trial
from tirtune.db import JobRecord, JobState, MeasurementRecord
from tirtune.db.repo import ProblemStats
from tirtune.space import Problem, SpaceError, normalize_dtype
from tirtune.space.arch import BRANCH_STATUS, branch_of
from tirtune.space.problem import MAX_DIM
from tirtune.space.rules import K_MULTIPLE
from tirtune.workers.results import Outcome

__all__ = [
    "BestOut",
    "ErrorBody",
    "ErrorOut",
    "FailureOut",
    "FallbackOut",
    "HealthOut",
    "ImportanceOut",
    "JobOut",
    "MeasurementOut",
    "Page",
    "ProblemOut",
    "ProvenanceOut",
    "StudyOut",
    "StudySummaryOut",
    "TopConfigOut",
    "TrialPointOut",
    "TuneRequest",
]

T = TypeVar("T")
# The schema states the problem's real rules (the dimension cap, TMA's K alignment) so clients and
# generated tests can send valid problems. They are enforced by `Problem` and the space's named
# rules, which refuse with the reason (422 `invalid_problem`), not here.


def _integral(value: Any) -> Any:
    """JSON Schema's `integer` includes 4096.0 (generated clients and fuzzers send it): take it as
    4096. Strings, booleans and 4096.5 stay refused."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Integral = BeforeValidator(_integral)
# (The validator after the Field: before it, pydantic would publish gt/le under their own names.)
Dim = Annotated[int, Field(strict=True, gt=0, json_schema_extra={"maximum": MAX_DIM},
                           description=f"A GEMM dimension, 1..{MAX_DIM}; D(M,N) = A(M,K) @ B(N,K).T"), Integral]
KDim = Annotated[int, Field(
    strict=True, gt=0, json_schema_extra={"maximum": MAX_DIM, "multipleOf": K_MULTIPLE},
    description=f"The reduction dimension, 1..{MAX_DIM}: a multiple of {K_MULTIPLE}, as TMA needs every row of "
    "A (M,K) and B (N,K) to be a multiple of 16 bytes",
), Integral]


class TuneRequest(BaseModel):
    """POST /tune. Unknown fields are refused so that a typo is not silently ignored."""

    model_config = ConfigDict(extra="forbid")

    m: Dim
    n: Dim
    k: KDim
    dtype: Literal["float16", "bfloat16"] = Field("float16", description="Aliases fp16, half, f16, bf16 accepted.")
    max_trials: Annotated[int, Field(strict=True, ge=1, le=10_000), Integral] = 64
    time_budget_s: Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)] | None = None
    arch: Literal["sm_90a", "sm_100a"] = Field(
        "sm_90a",
        description="Template branch: sm_90a (Hopper, run on an H200) or sm_100a (Blackwell B200: compile-checked, "
        "not yet run on a B200); a job runs only on a worker whose GPUs take that arch.",
    )

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


class FallbackOut(BaseModel):
    """Present when `fallback=nearest` was asked for: whether another shape's best was served."""

    used: bool = Field(description="true when the shape had no tuned config and a nearby one is served")
    requested: str = Field(description="the shape asked for, MxNxK")
    served: str = Field(description="the shape whose best config this is")
    distance: float = Field(description="sqrt(sum of ln(requested/served)^2 over M, N, K); 0 when exact")


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
    fallback: FallbackOut | None = Field(None, description="only with fallback=nearest")
    branch: str = Field(description="target arch of the template branch that built it: sm_90a or sm_100a")
    branch_status: str = Field(description="how far that branch has been checked, e.g. "
                                           "'compile-checked, not yet run on a B200' for sm_100a")

    @classmethod
    def of(cls, r: MeasurementRecord, fallback: FallbackOut | None = None) -> BestOut:
        branch = branch_of(r.template_version)
        return cls(
            problem=ProblemOut.of(r.problem), shape=r.problem.shape, dtype=r.dtype,
            config=r.config.to_json(), config_label=r.config.label(), tflops=r.tflops,
            cublas_tflops=r.cublas_tflops, ratio=r.ratio, time_ms=r.time_ms,
            provenance=ProvenanceOut.of(r), measured_at=r.created_at, job_id=r.job_id, fallback=fallback,
            branch=branch, branch_status=BRANCH_STATUS[branch],
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


# --- the dashboard's study views (computed in tirtune.api.summary) ----------------------------------


class StudyOut(BaseModel):
    """A problem with measurements."""

    problem: ProblemOut
    shape: str
    dtype: str
    measurements: int
    ok: int
    best_tflops: float | None

    @classmethod
    def of(cls, stats: ProblemStats) -> StudyOut:
        p = stats.problem
        return cls(problem=ProblemOut.of(p), shape=p.shape, dtype=p.dtype, measurements=stats.measurements,
                   ok=stats.ok, best_tflops=stats.best_tflops)


class TrialPointOut(BaseModel):
    trial: int = Field(description="1-based trial number in recording order (INVALID configs cost no trial)")
    measurement_id: int
    job_id: int | None
    outcome: Outcome
    tflops: float | None
    ratio: float | None
    best_so_far_tflops: float | None
    config: dict[str, Any]
    config_label: str
    message: str

    @classmethod
    def of(cls, trial: Trial, best_so_far: float | None) -> TrialPointOut:
        r = trial.record
        return cls(
            trial=trial.number, measurement_id=r.id, job_id=r.job_id, outcome=r.outcome, tflops=r.tflops,
            ratio=r.ratio, best_so_far_tflops=best_so_far, config=r.config.to_json(),
            config_label=r.config.label(), message=r.message,
        )


class TopConfigOut(BaseModel):
    rank: int
    measurement_id: int
    job_id: int | None
    config: dict[str, Any]
    config_label: str
    tflops: float | None
    cublas_tflops: float | None
    ratio: float | None = Field(description="cuBLAS time / kernel time, same run: above 1 beats cuBLAS")
    time_ms: float | None

    @classmethod
    def of(cls, rank: int, r: MeasurementRecord) -> TopConfigOut:
        return cls(rank=rank, measurement_id=r.id, job_id=r.job_id, config=r.config.to_json(),
                   config_label=r.config.label(), tflops=r.tflops, cublas_tflops=r.cublas_tflops,
                   ratio=r.ratio, time_ms=r.time_ms)


class ImportanceOut(BaseModel):
    knob: str
    eta_squared: float = Field(ge=0, le=1, description="share of TFLOP/s variance this knob alone explains")


class FailureOut(BaseModel):
    outcome: Outcome
    reason: str = Field(description="the validity rule's name, or the first line of the error message")
    count: int


class StudySummaryOut(BaseModel):
    """Everything the dashboard draws for one problem (of one job with `job_id`)."""

    problem: ProblemOut
    shape: str
    dtype: str
    job_id: int | None
    trials: list[TrialPointOut]
    cublas_tflops: float | None = Field(description="median same-run cuBLAS TFLOP/s of the OK trials")
    importance: list[ImportanceOut] = Field(description="eta^2 per knob over OK trials (tirtune.api.summary)")
    top: list[TopConfigOut]
    failures: list[FailureOut]
    invalid: int = Field(description="configs refused by validity rules: counted in failures, never trials")
    knobs: list[str]
    truncated: bool = Field(description="true when only the oldest measurements fitted the limit")

    @classmethod
    def of(cls, problem: Problem, job_id: int | None, s: StudySummary, truncated: bool) -> StudySummaryOut:
        return cls(
            problem=ProblemOut.of(problem), shape=problem.shape, dtype=problem.dtype, job_id=job_id,
            trials=[TrialPointOut.of(t, b) for t, b in zip(s.trials, s.best_so_far, strict=True)],
            cublas_tflops=s.cublas_tflops,
            importance=[ImportanceOut(knob=i.knob, eta_squared=min(1.0, i.eta_squared))
                        for i in s.importance],
            top=[TopConfigOut.of(rank, r) for rank, r in enumerate(s.top, 1)],
            failures=[FailureOut(outcome=f.outcome, reason=f.reason, count=f.count) for f in s.failures],
            invalid=s.invalid, knobs=list(KNOBS), truncated=truncated,
        )
