"""Request and response bodies: the only Pydantic models in tirtune (records stay dataclasses)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal, TypeVar, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, field_validator

from tirtune.api.summary import KNOBS, StudySummary, Trial
from tirtune.core import EpilogueSpec, Outcome, Roofline, Source, epilogue
from tirtune.core.epilogue import BLOCK_OPS, GATE_GROUP, OPS, OUT_FLOAT16, scaling_of, with_scaling
from tirtune.core.problem import FP8, MAX_DIM
from tirtune.db import JobRecord, JobState, MeasurementRecord
from tirtune.db.best import BestChoice, Figures, Ranked
from tirtune.db.records import RemeasurementRecord
from tirtune.db.repo import ProblemStats
from tirtune.space import Problem, SpaceError, normalize_dtype
from tirtune.space.branches import ARCHS, BRANCHES, DEFAULT_ARCH, branch_for_version
from tirtune.space.hopper.rules import K_MULTIPLE

__all__ = [
    "EPILOGUE_DOC",
    "EPILOGUE_TEXTS",
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
    "RemeasuredOut",
    "RunnerUpOut",
    "StudyOut",
    "StudySummaryOut",
    "TopConfigOut",
    "TrialFiguresOut",
    "TrialPointOut",
    "TuneRequest",
    "parse_epilogue",
    "status_of",
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
Dim = Annotated[
    int,
    Field(
        strict=True,
        gt=0,
        json_schema_extra={"maximum": MAX_DIM},
        description=f"A GEMM dimension, 1..{MAX_DIM}; D(M,N) = A(M,K) @ B(N,K).T",
    ),
    Integral,
]
KDim = Annotated[
    int,
    Field(
        strict=True,
        gt=0,
        json_schema_extra={"maximum": MAX_DIM, "multipleOf": K_MULTIPLE},
        description=f"The reduction dimension, 1..{MAX_DIM}: a multiple of {K_MULTIPLE}, as TMA needs every row of "
        "A (M,K) and B (N,K) to be a multiple of 16 bytes",
    ),
    Integral,
]


# The epilogues' canonical texts (core/epilogue.py): what the schema lists. The server also takes
# the ops in any order and case ("Residual+bias"), and answers with the canonical text.
EPILOGUE_TEXTS: tuple[str, ...] = epilogue.EPILOGUE_TEXTS
_EPILOGUE_TEXT = (
    f"the fused epilogue: 'none' (default), 'swiglu' (alone: D = silu(A @ gate.T) * (A @ up.T), B the "
    f"gate and up weights interleaved in groups of 8 rows, 2N x K; N a multiple of 8), or ops joined by "
    f"'+', each once, of {', '.join(OPS)} (e.g. 'bias+residual'; any order and case), and with FP8 "
    f"operands '{OUT_FLOAT16}' for a float16 D (bf16 otherwise)"
)
EPILOGUE_DOC = f"{_EPILOGUE_TEXT}; in a query string write '+' as %2B"
_EPILOGUE_MAX = 200  # EpilogueSpec.parse refuses longer text without echoing it


def parse_epilogue(text: str) -> EpilogueSpec:
    """`EpilogueSpec.parse`, and in a query string, where an unencoded '+' arrives as a space, a
    refusal that says how to write it."""
    try:
        return EpilogueSpec.parse(text)
    except SpaceError as e:
        if " " in text.strip() and "+" not in text:
            raise SpaceError(f"{e} (in a query string, write '+' as %2B: an unencoded '+' reads as a space)") from None
        raise


def _refused_epilogues() -> list[JsonValue]:
    """JSON Schema `if`/`then` per branch whose problem rules refuse every fused epilogue (the
    Blackwell template writes A @ B.T alone: `fused_epilogue_supported`) or FP8 operands, so that
    the schema states the rules POST /tune applies."""
    fused = Problem(64, 64, 64, "float16", EpilogueSpec(("bias",)))
    fp8 = Problem(64, 64, 64, FP8)
    rules: list[JsonValue] = []
    for b in BRANCHES.values():
        then: dict[str, JsonValue] = {}
        if any(v.rule == "fused_epilogue_supported" for v in b.space.problem_violations(fused)):
            then["epilogue"] = {"const": str(EpilogueSpec())}
            then["scaling"] = {"const": "none"}  # a scaling is epilogue ops too
        if b.space.problem_violations(fp8):
            then["dtype"] = {"not": {"const": FP8}}
        if then:
            rules.append(
                {"if": {"properties": {"arch": {"const": b.arch}}, "required": ["arch"]}, "then": {"properties": then}}
            )
    return rules


# swiglu's N (rules.swiglu_n_aligned): B interleaves its gate and up weights by 8 rows.
_SWIGLU_N: JsonValue = {
    "if": {"properties": {"epilogue": {"const": "swiglu"}}, "required": ["epilogue"]},
    "then": {"properties": {"n": {"multipleOf": GATE_GROUP}}},
}
# swiglu takes no scaling (core.epilogue.with_scaling: its ops do not combine with it).
_SWIGLU_UNSCALED: JsonValue = {
    "if": {"properties": {"epilogue": {"const": "swiglu"}}, "required": ["epilogue"]},
    "then": {"properties": {"scaling": {"const": "none"}}},
}


# FP8's problem rules: an e4m3 row of K bytes is a multiple of 16 bytes for TMA
# (rules.tma_row_stride_aligned); no one-row operand (fp8_one_row_operand); no swiglu
# (fp8_epilogue_supported).
_FP8_RULES: JsonValue = {
    "if": {"properties": {"dtype": {"const": "float8_e4m3fn"}}, "required": ["dtype"]},
    "then": {
        "properties": {
            "k": {"multipleOf": 16},
            "m": {"minimum": 2},
            "n": {"minimum": 2},
            "epilogue": {"not": {"const": "swiglu"}},
        }
    },
}


# The block scales (core/epilogue.py BLOCK_OPS, problem rule block_scales_fp8): FP8 only, beside bias
# and residual only; a scaling "block" is those ops added to the epilogue, which must then hold no
# other scale.
_BLOCK_TEXTS: list[JsonValue] = [t for t in EPILOGUE_TEXTS if BLOCK_OPS[0] in t]
_BLOCK_PARTNERS: list[JsonValue] = [
    t for t in EPILOGUE_TEXTS if set(t.split("+")) <= {"none", "bias", "residual", OUT_FLOAT16} or t in _BLOCK_TEXTS
]
_BLOCK_RULES: list[JsonValue] = [
    {
        "if": {"properties": {"scaling": {"const": "block"}}, "required": ["scaling"]},
        "then": {
            "properties": {"dtype": {"const": FP8}, "epilogue": {"enum": _BLOCK_PARTNERS}},
            "required": ["dtype"],
        },
    },
    {
        "if": {"properties": {"epilogue": {"enum": _BLOCK_TEXTS}}, "required": ["epilogue"]},
        "then": {
            "properties": {"dtype": {"const": FP8}, "scaling": {"enum": ["none", "block"]}},
            "required": ["dtype"],
        },
    },
]


# out_float16 (core/epilogue.py, problem rule out_float16_fp8) picks FP8's D dtype: FP8 only.
_OUT_FLOAT16_TEXTS: list[JsonValue] = [t for t in EPILOGUE_TEXTS if OUT_FLOAT16 in t.split("+")]
_OUT_FLOAT16_RULE: JsonValue = {
    "if": {"properties": {"epilogue": {"enum": _OUT_FLOAT16_TEXTS}}, "required": ["epilogue"]},
    "then": {"properties": {"dtype": {"const": FP8}}, "required": ["dtype"]},
}


# The archs POST /tune takes: the registry's branches (tirtune.space.branches), as a Literal so
# that the schema lists them.
if TYPE_CHECKING:
    Arch = str
else:
    Arch = Literal[ARCHS]


class TuneRequest(BaseModel):
    """POST /tune. Unknown fields are refused so that a typo is not silently ignored."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "allOf": [
                *_refused_epilogues(),
                _SWIGLU_N,
                _SWIGLU_UNSCALED,
                _FP8_RULES,
                *_BLOCK_RULES,
                _OUT_FLOAT16_RULE,
            ]
        },
    )

    m: Dim
    n: Dim
    k: KDim
    dtype: Literal["float16", "bfloat16", "float8_e4m3fn"] = Field(
        "float16",
        description="Aliases fp16, half, f16, bf16, fp8, e4m3 accepted. float8_e4m3fn: e4m3 A and B, a bf16 D "
        "(fp16 with the epilogue op out_float16; K a multiple of 16 then, for TMA's 16-byte rows).",
    )
    scaling: Literal["none", "tensor", "rowcol", "block"] = Field(
        "none",
        description="How a quantized (FP8) product is dequantized, added to the epilogue: tensor (scale_a+scale_b, "
        "one fp32 value each), rowcol (scale_row+scale_col, a scale per token and per channel), block "
        "(scale_a_block+scale_b_block: DeepSeek-V3's 1x128 scales of A and 128x128 of B, each 128-deep k "
        "block's product scaled; FP8 only, with bias and residual at most), none.",
    )
    epilogue: str = Field(
        "none",
        max_length=_EPILOGUE_MAX,
        description=f"{_EPILOGUE_TEXT}. The answer carries the canonical text. A fused epilogue is part of "
        "the problem: its trials and best are never the plain GEMM's. sm_100a takes none (its template "
        "writes A @ B.T alone: 422 `invalid_problem`).",
        json_schema_extra={"enum": list(EPILOGUE_TEXTS)},
    )
    max_trials: Annotated[int, Field(strict=True, ge=1, le=10_000), Integral] = 64
    time_budget_s: Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)] | None = None
    arch: Arch = Field(
        DEFAULT_ARCH,
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

    @field_validator("scaling", mode="before")
    @classmethod
    def _built_scaling(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            with_scaling(EpilogueSpec(), value)
        except SpaceError as e:
            raise ValueError(str(e)) from None
        return value.strip().lower()

    @field_validator("epilogue", mode="before")
    @classmethod
    def _canonical_epilogue(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return str(EpilogueSpec.parse(value))
        except SpaceError as e:
            raise ValueError(str(e)) from None

    def problem(self) -> Problem:
        """The problem asked for, its scaling in its epilogue; SpaceError when a dimension is out of
        range or the scaling is not built."""
        epilogue = with_scaling(EpilogueSpec.parse(self.epilogue), self.scaling)
        return Problem(self.m, self.n, self.k, self.dtype, epilogue)


class ProblemOut(BaseModel):
    m: int
    n: int
    k: int
    dtype: str
    epilogue: str = Field(description="the fused epilogue's canonical text: 'none' or e.g. 'bias+residual'")
    scaling: str = Field(
        description="the scaling its epilogue's scales make: none, tensor (scale_a+scale_b), rowcol "
        "(scale_row+scale_col), block (scale_a_block+scale_b_block), or custom (any other set of them)"
    )

    @classmethod
    def of(cls, problem: Problem) -> ProblemOut:
        return cls(
            m=problem.m,
            n=problem.n,
            k=problem.k,
            dtype=problem.dtype,
            epilogue=str(problem.epilogue),
            scaling=scaling_of(problem.epilogue),
        )


class ProvenanceOut(BaseModel):
    gpu_name: str
    driver: str
    cuda: str
    tvm_version: str
    torch_version: str
    template_version: str
    sm_clock_mhz: float | None
    power_w: float | None
    source: Source = Field(
        description="gpu: measured by this service's GPU runner; replay: figures read back "
        "from a recording, not measured here"
    )
    recording: str | None = Field(description="for replays: the recording's file name and content hash")
    measured_at: datetime | None = Field(
        description="when the figures were measured; null: unknown (a recording that does not say)"
    )

    @classmethod
    def of(cls, r: MeasurementRecord) -> ProvenanceOut:
        return cls(
            gpu_name=r.gpu_name,
            driver=r.driver,
            cuda=r.cuda,
            tvm_version=r.tvm_version,
            torch_version=r.torch_version,
            template_version=r.template_version,
            sm_clock_mhz=r.sm_clock_mhz,
            power_w=r.power_w,
            source=r.source,
            recording=r.recording,
            measured_at=r.measured_at,
        )


class RemeasuredOut(BaseModel):
    """A re-measurement of a trial: interleaved with the job's other top trials and cuBLAS."""

    outcome: Outcome
    ratio: float | None = Field(description="cuBLAS median / kernel median over all rounds and processes")
    ratio_p10: float | None = Field(description="10th percentile of the per-round ratios (all processes)")
    ratio_p90: float | None
    tflops: float | None
    cublas_tflops: float | None
    time_ms: float | None
    rounds: int = Field(description="interleaved rounds per process")
    processes: int = Field(description="measuring processes, one after another, each with fresh inputs")
    session: str
    remeasured_at: datetime
    source: Source

    @classmethod
    def of(cls, r: RemeasurementRecord, problem: Problem) -> RemeasuredOut:
        return cls(
            outcome=r.outcome,
            ratio=r.ratio,
            ratio_p10=r.ratio_p10,
            ratio_p90=r.ratio_p90,
            tflops=r.tflops,
            cublas_tflops=None if r.cublas_ms is None else problem.tflops(r.cublas_ms),
            time_ms=r.time_ms,
            rounds=r.rounds,
            processes=r.processes,
            session=r.session,
            remeasured_at=r.created_at,
            source=r.source,
        )


class MeasurementOut(BaseModel):
    id: int
    job_id: int | None
    trial_number: int | None
    epilogue: str = Field(description="its problem's fused epilogue: 'none' or e.g. 'bias+residual'")
    config: dict[str, Any]
    config_label: str
    outcome: Outcome
    message: str
    time_ms: float | None
    tflops: float | None
    cublas_tflops: float | None
    ratio: float | None = Field(description="cuBLAS time / kernel time: above 1 is faster than cuBLAS")
    ratio_p10: float | None = Field(description="10th percentile of the per-round ratios; null when not stored")
    ratio_p90: float | None
    rel_error: float | None
    provenance: ProvenanceOut
    stale: bool
    created_at: datetime = Field(description="when the row was stored (provenance.measured_at: when measured)")
    remeasured: RemeasuredOut | None = Field(
        None,
        description="the newest re-measurement of this config on this stack, if any: the figures the best "
        "is ranked by (tirtune.db.best)",
    )

    @classmethod
    def of(cls, r: MeasurementRecord, again: RemeasurementRecord | None = None) -> MeasurementOut:
        return cls(
            id=r.id,
            job_id=r.job_id,
            trial_number=r.trial_number,
            epilogue=r.epilogue,
            config=r.config.to_json(),
            config_label=r.config.label(),
            outcome=r.outcome,
            message=r.message,
            time_ms=r.time_ms,
            tflops=r.tflops,
            cublas_tflops=r.cublas_tflops,
            ratio=r.ratio,
            ratio_p10=r.ratio_p10,
            ratio_p90=r.ratio_p90,
            rel_error=r.rel_error,
            provenance=ProvenanceOut.of(r),
            stale=r.stale,
            created_at=r.created_at,
            remeasured=None if again is None else RemeasuredOut.of(again, r.problem),
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
    best: MeasurementOut | None = Field(
        description="the trial with the highest same-run ratio so far; once the "
        "job is done, the best after re-measurement (its `remeasured` "
        "figures decided)"
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    message: str

    @classmethod
    def of(cls, job: JobRecord, best: MeasurementRecord | None, again: RemeasurementRecord | None = None) -> JobOut:
        progress = 1.0 if job.state is JobState.DONE else min(1.0, job.trials_done / job.max_trials)
        return cls(
            id=job.id,
            state=job.state,
            problem=ProblemOut.of(job.problem),
            shape=job.problem.shape,
            arch=job.arch,
            max_trials=job.max_trials,
            trials_done=job.trials_done,
            progress=progress,
            best=None if best is None else MeasurementOut.of(best, again),
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            message=job.message,
        )


class FallbackOut(BaseModel):
    """Present when `fallback=nearest` was asked for: whether another shape's best was served."""

    used: bool = Field(description="true when the shape had no tuned config and a nearby one is served")
    requested: str = Field(description="the shape asked for, MxNxK")
    served: str = Field(description="the shape whose best config this is")
    distance: float = Field(description="sqrt(sum of ln(requested/served)^2 over M, N, K); 0 when exact")


Bound = Literal["memory", "compute"]


class RooflineOut(BaseModel):
    """The physical limit beside cuBLAS (tirtune.core.roofline): the least bytes the GEMM must move,
    the bandwidth the served time reached on them, the measuring process's two ceilings and the
    floor they set; `fraction` = floor / the served time (1.0: at the physical limit)."""

    bytes_moved: int = Field(description="A and B read once, D written once")
    bandwidth_gbs: float | None = Field(description="bytes_moved over the served time, GB/s")
    copy_gbs: float | None = Field(
        description="a device-to-device copy's bandwidth in the measuring process "
        "(read + write), GB/s; null: not measured (older rows, replays)"
    )
    peak_tflops: float | None = Field(description="the MMA rate at the SM clock the measurement ran")
    floor_ms: float | None = Field(description="max(flops / peak, bytes / copy bandwidth)")
    bound: Bound | None
    fraction: float | None = Field(description="floor_ms / the served time")

    @classmethod
    def of(cls, trial: MeasurementRecord, f: Figures) -> RooflineOut:
        """From the figures served: a re-measurement's time and process ceilings when confirmed."""
        again = f.remeasurement
        copy, peak = (again.copy_gbs, again.peak_tflops) if again is not None else (trial.copy_gbs, trial.peak_tflops)
        roof = Roofline.of(trial.problem, peak, copy)
        bound = roof.bound
        return cls(
            bytes_moved=trial.problem.min_bytes,
            bandwidth_gbs=roof.bandwidth_gbs(f.time_ms),
            copy_gbs=copy,
            peak_tflops=peak,
            floor_ms=roof.floor_ms,
            bound=None if bound is None else cast(Bound, bound),
            fraction=roof.fraction(f.time_ms),
        )


class TrialFiguresOut(BaseModel):
    """A config's figures from its own trial (one measuring process, against its own cuBLAS)."""

    measurement_id: int
    ratio: float | None
    ratio_p10: float | None
    ratio_p90: float | None
    tflops: float | None
    cublas_tflops: float | None
    time_ms: float | None

    @classmethod
    def of(cls, r: MeasurementRecord) -> TrialFiguresOut:
        return cls(
            measurement_id=r.id,
            ratio=r.ratio,
            ratio_p10=r.ratio_p10,
            ratio_p90=r.ratio_p90,
            tflops=r.tflops,
            cublas_tflops=r.cublas_tflops,
            time_ms=r.time_ms,
        )


class RunnerUpOut(BaseModel):
    """The second config of the same ranking, with the figures it was ranked by."""

    config: dict[str, Any]
    config_label: str
    measurement_id: int
    job_id: int | None
    confirmed: bool
    ratio: float
    ratio_p10: float | None
    ratio_p90: float | None
    tflops: float | None
    cublas_tflops: float | None

    @classmethod
    def of(cls, r: Ranked) -> RunnerUpOut:
        f = r.figures
        return cls(
            config=r.trial.config.to_json(),
            config_label=r.trial.config.label(),
            measurement_id=r.trial.id,
            job_id=r.trial.job_id,
            confirmed=f.confirmed,
            ratio=f.ratio,
            ratio_p10=f.ratio_p10,
            ratio_p90=f.ratio_p90,
            tflops=f.tflops,
            cublas_tflops=f.cublas_tflops,
        )


class BestOut(BaseModel):
    """The best config of a problem (tirtune.db.best): ranked by the same-run ratio, re-measured
    figures first. GET /best and `tirtune best` print exactly this (tirtune.api.best)."""

    kind: Annotated[
        Literal["measured"],
        Field(description="measured: a measurement's figures (a problem nobody tuned gets a PredictedBestOut instead)"),
    ] = "measured"
    problem: ProblemOut
    shape: str
    dtype: str
    epilogue: str = Field(description="the fused epilogue, as in `problem`: its figures are that problem's alone")
    config: dict[str, Any]
    config_label: str
    key: str = Field(
        description="the measurement's identity key (template version, config, problem, stack): "
        "GET /kernels/{key} serves its built module"
    )
    tflops: float | None = Field(description="the figures it is named by: its re-measurement's when confirmed")
    cublas_tflops: float | None
    ratio: float | None = Field(description="cuBLAS time / kernel time in the same process: above 1 beats cuBLAS")
    ratio_p10: float | None = Field(
        description="10th percentile of the per-round ratios (over rounds and, when "
        "re-measured, processes); null when unknown"
    )
    ratio_p90: float | None
    time_ms: float | None
    confirmed: bool = Field(
        description="true: the figures are a re-measurement's (interleaved with the other top "
        "trials); false: no re-measurement exists, they are the trial's"
    )
    remeasurement: RemeasuredOut | None = Field(description="the re-measurement behind the figures, when confirmed")
    trial: TrialFiguresOut = Field(description="the same config's figures in its trial")
    runner_up: RunnerUpOut | None = Field(description="the second config of the same ranking")
    roofline: RooflineOut = Field(description="the physical limit beside cuBLAS, for the served figures")
    within_noise_of_runner_up: bool | None = Field(
        description="true when the p10-p90 intervals of the best and the runner-up overlap (either may be faster); "
        "null without a runner-up or when a spread is unknown"
    )
    note: str = Field(description="one line: how sure this answer is")
    source: Source = Field(
        description="gpu: measured by this service; replay: read back from a recording (served only with source=replay)"
    )
    recording: str | None = Field(description="for replays: the recording's file name and content hash")
    provenance: ProvenanceOut
    measured_at: datetime | None = Field(
        description="when its trial was measured; null: unknown (a replayed recording that does not say)"
    )
    job_id: int | None
    fallback: FallbackOut | None = Field(None, description="only with fallback=nearest")
    branch: str = Field(description="target arch of the template branch that built it: sm_90a or sm_100a")
    branch_status: str = Field(
        description="how far that branch has been checked, e.g. "
        "'compile-checked, not yet run on a B200' for sm_100a; for replayed "
        "figures, that they were replayed"
    )

    @classmethod
    def of(cls, choice: BestChoice, fallback: FallbackOut | None = None) -> BestOut:
        r, f = choice.best.trial, choice.best.figures
        note = (
            choice.note
            if r.source is Source.GPU
            else (
                f"replayed figures from {r.recording}, not measured by this service (a replay's re-measurement "
                f"repeats the recording): {choice.note}"
            )
        )
        return cls(
            problem=ProblemOut.of(r.problem),
            shape=r.problem.shape,
            dtype=r.dtype,
            epilogue=r.epilogue,
            config=r.config.to_json(),
            config_label=r.config.label(),
            key=r.key,
            **_figures(f),
            confirmed=f.confirmed,
            remeasurement=None if f.remeasurement is None else RemeasuredOut.of(f.remeasurement, r.problem),
            trial=TrialFiguresOut.of(r),
            runner_up=None if choice.runner_up is None else RunnerUpOut.of(choice.runner_up),
            roofline=RooflineOut.of(r, f),
            within_noise_of_runner_up=choice.within_noise_of_runner_up,
            note=note,
            source=r.source,
            recording=r.recording,
            provenance=ProvenanceOut.of(r),
            measured_at=r.measured_at,
            job_id=r.job_id,
            fallback=fallback,
            branch=branch_for_version(r.template_version).arch,
            branch_status=status_of(r),
        )


def status_of(r: MeasurementRecord) -> str:
    """The branch's status for a GPU measurement; for a replayed one, that it was replayed (a
    replay must not read as a run on the GPU its recording names)."""
    if r.source is Source.REPLAY:
        return f"replayed: figures read back from the recording {r.recording}, not measured by this service"
    return branch_for_version(r.template_version).status_text


def _figures(f: Figures) -> dict[str, Any]:
    return {
        "tflops": f.tflops,
        "cublas_tflops": f.cublas_tflops,
        "ratio": f.ratio,
        "ratio_p10": f.ratio_p10,
        "ratio_p90": f.ratio_p90,
        "time_ms": f.time_ms,
    }


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
    epilogue: str
    measurements: int
    ok: int
    best_tflops: float | None = Field(
        description="the most TFLOP/s of any servable measurement; not necessarily "
        "the best's (GET /best ranks by the same-run ratio)"
    )

    @classmethod
    def of(cls, stats: ProblemStats) -> StudyOut:
        p = stats.problem
        return cls(
            problem=ProblemOut.of(p),
            shape=p.shape,
            dtype=p.dtype,
            epilogue=str(p.epilogue),
            measurements=stats.measurements,
            ok=stats.ok,
            best_tflops=stats.best_tflops,
        )


class TrialPointOut(BaseModel):
    trial: int = Field(description="1-based trial number in recording order (INVALID configs cost no trial)")
    measurement_id: int
    job_id: int | None
    outcome: Outcome
    tflops: float | None
    ratio: float | None
    best_so_far_ratio: float | None = Field(description="the highest same-run ratio of the OK trials up to this one")
    best_so_far_tflops: float | None = Field(description="the TFLOP/s of that trial (not the most TFLOP/s so far)")
    config: dict[str, Any]
    config_label: str
    message: str
    source: Source

    @classmethod
    def of(cls, trial: Trial, best_so_far: MeasurementRecord | None) -> TrialPointOut:
        r = trial.record
        return cls(
            trial=trial.number,
            measurement_id=r.id,
            job_id=r.job_id,
            outcome=r.outcome,
            tflops=r.tflops,
            ratio=r.ratio,
            best_so_far_ratio=None if best_so_far is None else best_so_far.ratio,
            best_so_far_tflops=None if best_so_far is None else best_so_far.tflops,
            config=r.config.to_json(),
            config_label=r.config.label(),
            message=r.message,
            source=r.source,
        )


class TopConfigOut(BaseModel):
    """One config of the ranking GET /best uses (tirtune.db.best), with the figures it is ranked by."""

    rank: int
    measurement_id: int
    job_id: int | None
    config: dict[str, Any]
    config_label: str
    tflops: float | None
    cublas_tflops: float | None
    ratio: float | None = Field(
        description="cuBLAS time / kernel time, same run: above 1 beats cuBLAS; the re-measured ratio when confirmed"
    )
    ratio_p10: float | None
    ratio_p90: float | None
    time_ms: float | None
    confirmed: bool = Field(description="figures from a re-measurement (true) or the trial (false)")
    trial_ratio: float | None = Field(description="the ratio its trial measured")
    source: Source

    @classmethod
    def of(cls, rank: int, r: Ranked) -> TopConfigOut:
        t, f = r.trial, r.figures
        return cls(
            rank=rank,
            measurement_id=t.id,
            job_id=t.job_id,
            config=t.config.to_json(),
            config_label=t.config.label(),
            **_figures(f),
            confirmed=f.confirmed,
            trial_ratio=t.ratio,
            source=t.source,
        )


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
    epilogue: str
    job_id: int | None
    trials: list[TrialPointOut]
    cublas_tflops: float | None = Field(
        description="the median of the OK trials' same-run cuBLAS TFLOP/s (each "
        "from its own trial's run); the best's own run's is "
        "`best.cublas_tflops`"
    )
    importance: list[ImportanceOut] = Field(description="eta^2 per knob over OK trials (tirtune.api.summary)")
    top: list[TopConfigOut] = Field(description="the ranking GET /best uses: same-run ratio, re-measured first")
    best: BestOut | None = Field(description="what GET /best (of this job, with job_id) answers for these rows")
    ranked_source: Source | None = Field(
        description="the rows `top` and `best` rank: the GPU's when there are any, else the replayed ones"
    )
    failures: list[FailureOut]
    invalid: int = Field(description="configs refused by validity rules: counted in failures, never trials")
    knobs: list[str]
    truncated: bool = Field(description="true when only the oldest measurements fitted the limit")

    @classmethod
    def of(
        cls, problem: Problem, job_id: int | None, s: StudySummary, truncated: bool, best: BestOut | None = None
    ) -> StudySummaryOut:
        return cls(
            problem=ProblemOut.of(problem),
            shape=problem.shape,
            dtype=problem.dtype,
            epilogue=str(problem.epilogue),
            job_id=job_id,
            trials=[TrialPointOut.of(t, b) for t, b in zip(s.trials, s.best_so_far, strict=True)],
            cublas_tflops=s.cublas_tflops,
            importance=[ImportanceOut(knob=i.knob, eta_squared=min(1.0, i.eta_squared)) for i in s.importance],
            top=[TopConfigOut.of(rank, r) for rank, r in enumerate(s.top, 1)],
            best=best,
            ranked_source=s.top[0].trial.source if s.top else None,
            failures=[FailureOut(outcome=f.outcome, reason=f.reason, count=f.count) for f in s.failures],
            invalid=s.invalid,
            knobs=list(KNOBS),
            truncated=truncated,
        )


class ModelOut(BaseModel):
    """The cost model a prediction came from: what it learned from."""

    samples: int = Field(description="correct measurements it was trained on (the shipped prior and this database's)")
    problems: int
    digest: str = Field(description="content hash of its training samples: the same samples give the same model")
    prior_gpu: str = Field(
        default="",
        description="the GPU models its shipped measurements were made on: the asked GPU's own, or, where too "
        "few are shipped for it, its own (if any) and another GPU model's of the same branch, as 'OWN + OTHER' "
        "(an H100's model learns beside the H200's); empty: no shipped prior",
    )


class PredictedConfigOut(BaseModel):
    config: dict[str, Any]
    config_label: str
    predicted_ratio: float


class PredictedBestOut(BaseModel):
    """GET /best for a problem nobody tuned: the cost model's pick, never measured (no key, no
    figures). tirtune.api.predicted makes it; POST /tune starts from the same ranking."""

    kind: Annotated[Literal["predicted"], Field(description="predicted: the cost model's, never measured")] = (
        "predicted"
    )
    problem: ProblemOut
    shape: str
    dtype: str
    epilogue: str
    config: dict[str, Any]
    config_label: str
    predicted_ratio: float = Field(description="the model's prediction of cuBLAS time / kernel time")
    gpu: str = Field(description="the GPU model the prediction is for")
    branch: str
    alternatives: list[PredictedConfigOut] = Field(description="the next picks, each on another tile")
    model: ModelOut
    note: str
