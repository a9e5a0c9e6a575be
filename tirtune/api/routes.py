"""HTTP routes. Handlers only read and queue: tuning itself runs in the JobService workers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from tirtune.api.best import NotTuned, find_best
from tirtune.api.cache import ResponseCache
from tirtune.api.deps import Factory, require_token
from tirtune.api.errors import ApiError
from tirtune.api.kernels import KEY_PATTERN, served_kernel
from tirtune.api.limits import MAX_BODY_BYTES
from tirtune.api.predicted import predict_best, prediction_gpu, unpredictable
from tirtune.api.schemas import (
    EPILOGUE_DOC,
    EPILOGUE_TEXTS,
    BestOut,
    ErrorOut,
    HealthOut,
    JobOut,
    MeasurementOut,
    Page,
    PredictedBestOut,
    TuneRequest,
    parse_epilogue,
)
from tirtune.core import EpilogueSpec, Outcome, Problem, Source, SpaceError
from tirtune.core.epilogue import SCALINGS, with_scaling
from tirtune.core.problem import DTYPE_NAMES, MAX_DIM, SHAPE_PATTERN, normalize_dtype
from tirtune.db import JobRecord, JobState, repo, transaction
from tirtune.model.keeper import ModelKeeper
from tirtune.space import SearchSpace
from tirtune.space.branches import DEFAULT_ARCH, branch, branch_for_gpu_name

__all__ = ["router"]

# Ids and offsets are 32-bit integers in the database; larger ones are refused up front.
MAX_INT = 2**31 - 1
PRINTABLE = r"^[ -~]+$"

# Answers every route may give: a refused parameter, a database the API cannot reach.
ANY_ROUTE: dict[int | str, dict[str, Any]] = {
    422: {
        "model": ErrorOut,
        "description": "invalid request: `validation_error` (a parameter's type or range) "
        "or `invalid_problem` (a shape, dtype, epilogue or K the template cannot take)",
    },
    503: {"model": ErrorOut, "description": "the database is unreachable"},
}
router = APIRouter(responses=ANY_ROUTE)

Limit = Annotated[int, Query(ge=1, le=500)]
Offset = Annotated[int, Query(ge=0, le=MAX_INT)]
# Shapes and dtypes are checked by Problem (422 `invalid_problem` with the reason); the schema
# states the same rules so that clients and generated tests know them.
SHAPE_DOC = (
    f"MxNxK, e.g. 4096x4096x4096: ASCII digits, each dimension 1..{MAX_DIM} "
    "(spaces or tabs around the numbers are allowed)"
)
DTYPE_DOC = "float16, bfloat16 or float8_e4m3fn (aliases fp16, half, f16, bf16, fp8, e4m3; any case)"
SHAPE_SCHEMA = {"pattern": SHAPE_PATTERN}
DTYPE_SCHEMA = {"enum": list(DTYPE_NAMES)}
Shape = Annotated[str, Query(max_length=64, description=SHAPE_DOC, json_schema_extra=SHAPE_SCHEMA)]
Dtype = Annotated[str, Query(max_length=16, description=DTYPE_DOC, json_schema_extra=DTYPE_SCHEMA)]
# The schema lists the canonical texts; Problem takes any order and case (422 `invalid_problem` otherwise).
EPILOGUE_SCHEMA = {"enum": list(EPILOGUE_TEXTS)}
Epilogue = Annotated[str, Query(max_length=200, description=EPILOGUE_DOC, json_schema_extra=EPILOGUE_SCHEMA)]


SCALING_DOC = (
    "the scaling of a quantized (FP8) product, added to `epilogue`: none (default), tensor "
    "(scale_a+scale_b), rowcol (scale_row+scale_col), block (scale_a_block+scale_b_block, FP8 only)"
)
Scaling = Annotated[str, Query(max_length=16, description=SCALING_DOC, json_schema_extra={"enum": list(SCALINGS)})]


def parse_problem(shape: str, dtype: str, epilogue: str, scaling: str = "none") -> Problem:
    """The problem a query names (its scaling's ops in its epilogue); SpaceError (422
    `invalid_problem`) with the reason otherwise."""
    return Problem.parse(shape, dtype, str(with_scaling(parse_epilogue(epilogue), scaling)))


@router.post(
    "/tune",
    status_code=202,
    dependencies=[Depends(require_token)],
    responses={
        200: {"model": JobOut, "description": "the same problem is already queued or running: that job"},
        400: {"model": ErrorOut, "description": "the body is not parseable (e.g. an integer of over 4300 digits)"},
        401: {"model": ErrorOut, "description": "missing or wrong bearer token"},
        413: {"model": ErrorOut, "description": f"the body is over {MAX_BODY_BYTES} bytes"},
        422: {
            "model": ErrorOut,
            "description": "invalid body (`validation_error`: e.g. an unknown epilogue op), or a problem the "
            "template cannot take (`invalid_problem`, e.g. K not a multiple of 8, or a fused epilogue on "
            "sm_100a), or one the "
            "service's replay has no recording of (`not_recorded`)",
        },
    },
)
def tune(body: TuneRequest, request: Request, response: Response, factory: Factory) -> JobOut:
    """Queue a tuning job (202), or return the active job for the same problem (shape, dtype and
    epilogue) and arch (200)."""
    problem = body.problem()
    branch(body.arch).space.check_problem(problem)  # e.g. a K that TMA cannot address: refused before queueing
    unrecorded = _unrecorded(request.app.state.replay_space, problem)
    if unrecorded is not None:
        raise ApiError(422, "not_recorded", unrecorded)
    with transaction(factory) as s:
        repo.lock_problem(s, problem, body.arch)
        active = repo.find_active_job(s, problem, body.arch)
        job = active or repo.create_job(s, problem, body.arch, body.max_trials, body.time_budget_s)
        out = _jobs_out(s, [job])[0]
    if active is None:  # this process's stored GET /jobs pages lack it: dropped now, not at the next check
        request.app.state.best_cache.clear()
    else:
        response.status_code = 200
    response.headers["Location"] = request.url_for("get_job", job_id=job.id).path
    return out


@router.get("/jobs", response_model=Page[JobOut])
async def list_jobs(
    request: Request, factory: Factory, limit: Limit = 50, offset: Offset = 0, state: JobState | None = None
) -> Response:
    """Jobs, newest first. Pages are cached per API process like GET /jobs/{job_id} answers."""
    return await _cached(
        request, factory, ("jobs", state, limit, offset), lambda: _jobs_page(factory, state, limit, offset)
    )


def _jobs_page(factory: sessionmaker[Session], state: JobState | None, limit: int, offset: int) -> bytes:
    with transaction(factory) as s:
        jobs = repo.list_jobs(s, state=state, limit=limit, offset=offset)
        page = Page[JobOut](items=_jobs_out(s, jobs), total=repo.count_jobs(s, state), limit=limit, offset=offset)
    return page.model_dump_json().encode()


@router.get("/jobs/{job_id}", response_model=JobOut, responses={404: {"model": ErrorOut}})
async def get_job(request: Request, factory: Factory, job_id: Annotated[int, Path(ge=1, le=MAX_INT)]) -> Response:
    """A job: its state, progress and best so far (kept on the job's row). What the dashboard and
    `tirtune.gemm`'s clients poll, so answers are cached per API process like GET /best answers and
    dropped when a job, a measurement or a re-measurement changes (at most `best_cache_check_s`
    late); a miss is two queries (the job with its best trial, that trial's re-measurement)."""
    return await _cached(request, factory, ("job", job_id), lambda: _job_body(factory, job_id))


def _job_body(factory: sessionmaker[Session], job_id: int) -> bytes:
    with transaction(factory) as s:
        job, best = repo.job_with_best(s, job_id)
        again = repo.remeasurements_of(s, [] if best is None else [best])
    return JobOut.of(job, best, None if best is None else again.get(best.id)).model_dump_json().encode()


@router.get(
    "/best",
    response_model=BestOut | PredictedBestOut,
    responses={
        404: {
            "model": ErrorOut,
            "description": "nothing tuned for it yet, and nothing predicted (the message says why: e.g. the cost "
            "model does not see a fused epilogue)",
        }
    },
)
async def best(
    request: Request,
    factory: Factory,
    shape: Shape,
    dtype: Dtype = "float16",
    epilogue: Epilogue = "none",
    scaling: Scaling = "none",
    gpu: Annotated[str | None, Query(max_length=128, pattern=PRINTABLE)] = None,
    fallback: Annotated[
        Literal["none", "nearest"],
        Query(
            description="nearest: when the shape is not tuned, serve the best of the nearest tuned shape "
            "of the same dtype and epilogue (log-space distance of M, N, K) and say so in `fallback`"
        ),
    ] = "none",
    source: Annotated[
        Source,
        Query(
            description="gpu (default): only figures this service measured on a GPU; replay: only figures read "
            "back from recordings (labelled so: `source`, `recording`, `branch_status`, `note`)"
        ),
    ] = Source.GPU,
    predict: Annotated[
        bool,
        Query(
            description="true (default): for a problem nobody tuned, the cost model's pick, labelled "
            "`kind: predicted` and never a measurement (none for a fused epilogue, which the model does not "
            "see: 404 with the reason); false: 404 instead"
        ),
    ] = True,
) -> Response:
    """The best verified, non-stale configuration of a problem: the highest same-run ratio to
    cuBLAS, re-measured figures first (tirtune.db.best), with its p10-p90, whether it was
    re-measured (`confirmed`), and the runner-up with a statement when the two are within noise.
    A problem is its shape, dtype and fused epilogue: a fused problem's answer comes from its own
    measurements only, never the plain GEMM's. For a problem with no measurement, the cost model's
    prediction (`kind: predicted`; see tirtune.api.predicted) unless predict=false or
    source=replay, or the problem has a fused epilogue (404 with the reason).
    Answers are cached per API process until the measurements or re-measurements change (checked
    every `best_cache_check_s`, 1 s by default; see tirtune.api.cache): hits wait on neither the
    database nor a worker thread."""
    named = parse_epilogue(epilogue)  # a bad epilogue or scaling: 422 with the reason
    if str(scaling).strip().lower() in SCALINGS:
        try:
            combined = with_scaling(named, scaling)
        except SpaceError as e:
            # Each parameter is valid alone, and the two name no problem that can exist (block scales
            # beside a scaling of the whole sum, swiglu with any scaling): nothing can be found. (The
            # schema cannot state a rule across two query parameters.)
            raise ApiError(
                404, "not_found", f"no problem has epilogue {epilogue!r} with scaling {scaling!r}: {e}"
            ) from e
    else:
        combined = with_scaling(named, scaling)
    problem = Problem.parse(shape, dtype, str(combined))
    cache: ResponseCache = request.app.state.best_cache
    if cache.claim_check():
        _check_in_background(factory, cache)
    key = (problem, gpu, fallback, source, predict)
    body = cache.get(key)
    if body is None:
        generation = cache.generation
        models = request.app.state.models if predict and source is Source.GPU else None
        found = await run_in_threadpool(
            _find_best, factory, problem, gpu, fallback, source, request.app.state.replay_space, models
        )
        body = found.model_dump_json().encode()
        cache.put(key, body, generation)
    return Response(body, media_type="application/json")


async def _cached(
    request: Request, factory: sessionmaker[Session], key: Hashable, read: Callable[[], bytes]
) -> Response:
    """The JSON answer for `key` from the per-process cache of answers that depend only on the
    jobs and measurements (GET /jobs, /jobs/{job_id} and /trials here; GET /best keeps the same
    steps inline), or `read()` in a worker thread and kept. A refusal (an exception from `read`,
    e.g. a job not found) is not cached."""
    cache: ResponseCache = request.app.state.best_cache
    if cache.claim_check():
        _check_in_background(factory, cache)
    body = cache.get(key)
    if body is None:
        generation = cache.generation
        body = await run_in_threadpool(read)
        cache.put(key, body, generation)
    return Response(body, media_type="application/json")


_CHECKS: set[asyncio.Task[None]] = set()  # strong references until each check is done


def _check_in_background(factory: sessionmaker[Session], cache: ResponseCache) -> None:
    """The request that claimed the check does not wait for it (a thread hop and a database round
    trip: it made that one request per second per process the p99 of a paced load benchmark);
    answers stay at most `check_every_s` plus one query stale, as before."""
    task = asyncio.create_task(run_in_threadpool(_check_cache, factory, cache))
    _CHECKS.add(task)
    task.add_done_callback(_CHECKS.discard)


def _check_cache(factory: sessionmaker[Session], cache: ResponseCache) -> None:
    version = None
    try:
        with transaction(factory) as s:
            version = (repo.measurements_version(s), repo.jobs_version(s))
    finally:
        cache.checked(version)  # None (a failed read) drops everything


def _find_best(
    factory: sessionmaker[Session],
    problem: Problem,
    gpu: str | None,
    fallback: Literal["none", "nearest"],
    source: Source,
    replay: SearchSpace | None,
    models: ModelKeeper | None = None,
) -> BestOut | PredictedBestOut:
    unpredicted = None if models is None else unpredictable(problem)
    with transaction(factory) as s:
        found = find_best(s, problem, gpu=gpu, source=source, fallback=fallback)
        wanted = models is not None and unpredicted is None and isinstance(found, NotTuned)
        target = prediction_gpu(s, gpu) if wanted else None
    if models is not None and target is not None:
        predicted = predict_best(models, problem, target)
        if predicted is not None:
            return predicted
    if isinstance(found, NotTuned):
        message = found.message(start=_how_to_start(replay, problem, gpu), ask_replayed="source=replay")
        raise ApiError(404, "not_found", message + ("" if unpredicted is None else f"; no prediction: {unpredicted}"))
    return found


def _how_to_start(replay: SearchSpace | None, problem: Problem, gpu: str | None) -> str:
    """POST /tune, where this service would accept it for `problem` (on the branch of `gpu`, else
    the default one); otherwise why it would refuse it."""
    named = branch_for_gpu_name(gpu) if gpu else None
    try:
        (named or branch(DEFAULT_ARCH)).space.check_problem(problem)
    except SpaceError as exc:
        return f"POST /tune would refuse it: {exc}"
    unrecorded = _unrecorded(replay, problem)
    return "POST /tune to start" if unrecorded is None else f"POST /tune would refuse it: {unrecorded}"


KERNEL_HEADERS = {
    "X-Tirtune-Sha256": "sha256 of the body, as recorded when the module was built: check it before loading",
    "X-Tirtune-Build-Key": "the build cache entry (content hash of template version, config and problem)",
    "X-Tirtune-Template-Version": "the template version that generated the kernel",
    "X-Tirtune-Config": "the config, canonical JSON",
    "X-Tirtune-Problem": "MxNxK dtype, then epilogue=... when the epilogue is fused (its operands follow D)",
    "X-Tirtune-Gpu": "the GPU model it was verified and timed on",
    "X-Tirtune-Stack": "driver, CUDA, TVM and compute capability of that measurement (JSON)",
    "X-Tirtune-Source": "always gpu (replayed figures are refused)",
    "X-Tirtune-Measured-At": "when it was measured (ISO 8601)",
    "X-Tirtune-Ratio": "its trial's same-run ratio to cuBLAS",
}


@router.get(
    "/kernels/{key}",
    response_class=Response,
    responses={
        200: {
            "description": "the built module (a shared library loadable with tvm_ffi; `main(A, B, D)` writes "
            "D = A @ B.T), its digest and provenance in the headers",
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            "headers": {
                name: {"description": text, "schema": {"type": "string"}} for name, text in KERNEL_HEADERS.items()
            },
        },
        404: {
            "model": ErrorOut,
            "description": "`not_found`: no current measurement has this key; "
            "`not_built_here`: its module is not in this host's build cache",
        },
        409: {
            "model": ErrorOut,
            "description": "`not_verified`: the measurement was replayed, did not verify "
            "(an outcome other than OK) or its branch has not run on such a "
            "GPU; `digest_mismatch`: the cached module's bytes changed since it "
            "was built",
        },
    },
)
def kernel(
    request: Request,
    factory: Factory,
    key: Annotated[
        str, Path(pattern=KEY_PATTERN, description="a measurement's key (GET /best's `key`): 32 hex digits")
    ],
) -> Response:
    """The built module of a measured and verified config: what `tirtune.gemm` downloads."""
    with transaction(factory) as s:
        served = served_kernel(s, key, request.app.state.settings.cache_dir)
    return Response(served.module, media_type="application/octet-stream", headers=served.headers())


@router.get("/trials", response_model=Page[MeasurementOut])
async def trials(
    request: Request,
    factory: Factory,
    job_id: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None,
    shape: Annotated[
        str | None,
        Query(
            max_length=64,
            description=f"{SHAPE_DOC}; with `dtype` (default float16) narrows to one problem",
            json_schema_extra=SHAPE_SCHEMA,
        ),
    ] = None,
    dtype: Annotated[
        str | None,
        Query(
            max_length=16,
            description=f"{DTYPE_DOC}; with `shape` narrows to one problem, alone to every problem of this dtype",
            json_schema_extra=DTYPE_SCHEMA,
        ),
    ] = None,
    epilogue: Annotated[
        str | None,
        Query(
            max_length=200,
            description=f"{EPILOGUE_DOC}; with `shape` (default none) narrows to one problem, alone to every "
            "problem of this epilogue",
            json_schema_extra=EPILOGUE_SCHEMA,
        ),
    ] = None,
    outcome: Outcome | None = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> Response:
    """Measurements, newest first; `shape` (with `dtype`, default float16, and `epilogue`, default
    none) narrows to one problem, `dtype` or `epilogue` alone to one dtype or epilogue. Each item
    names its problem's epilogue. Each item carries its newest re-measurement, if any (`remeasured`).
    Pages are cached per API process like GET /best answers, and dropped when the measurements or
    re-measurements change (at most `best_cache_check_s` late)."""
    where = _trials_filter(shape, dtype, epilogue, job_id, outcome)
    key = ("trials", where, limit, offset)
    return await _cached(request, factory, key, lambda: _trials_page(factory, where, limit, offset))


@dataclass(frozen=True, slots=True)
class _TrialsFilter:
    job_id: int | None
    problem: Problem | None
    dtype: str | None  # without a problem: every problem of this dtype
    epilogue: EpilogueSpec | None  # without a problem: every problem of this epilogue
    outcome: Outcome | None


def _trials_filter(
    shape: str | None, dtype: str | None, epilogue: str | None, job_id: int | None, outcome: Outcome | None
) -> _TrialsFilter:
    if shape is None:
        dtype = None if dtype is None else normalize_dtype(dtype)
        return _TrialsFilter(job_id, None, dtype, None if epilogue is None else parse_epilogue(epilogue), outcome)
    return _TrialsFilter(job_id, parse_problem(shape, dtype or "float16", epilogue or "none"), None, None, outcome)


def _trials_page(factory: sessionmaker[Session], w: _TrialsFilter, limit: int, offset: int) -> bytes:
    with transaction(factory) as s:
        rows = repo.list_measurements(
            s,
            job_id=w.job_id,
            problem=w.problem,
            dtype=w.dtype,
            epilogue=w.epilogue,
            outcome=w.outcome,
            limit=limit,
            offset=offset,
        )
        if (rows and len(rows) < limit) or (not rows and offset == 0):
            total = offset + len(rows)  # the last page: the count is known without a COUNT
        else:
            total = repo.count_measurements(
                s, job_id=w.job_id, problem=w.problem, dtype=w.dtype, epilogue=w.epilogue, outcome=w.outcome
            )
        again = repo.remeasurements_of(s, rows)
    page = Page[MeasurementOut](
        items=[MeasurementOut.of(r, again.get(r.id)) for r in rows], total=total, limit=limit, offset=offset
    )
    return page.model_dump_json().encode()


@router.get("/healthz", responses={503: {"model": ErrorOut, "description": "database unreachable"}})
def healthz(factory: Factory) -> HealthOut:
    with transaction(factory) as s:
        repo.ping(s)
    return HealthOut()


def _unrecorded(replay: SearchSpace | None, problem: Problem) -> str | None:
    """Why a service that replays recorded measurements cannot tune `problem` (it has no recording
    of it); None when it can."""
    broken = [] if replay is None else replay.problem_violations(problem)
    if not broken:
        return None
    return f"this service measures with recorded data (TIRTUNE_REPLAY): {'; '.join(v.reason for v in broken)}"


def _jobs_out(s: Session, jobs: list[JobRecord]) -> list[JobOut]:
    """JobOut for each job, their best measurements and those's re-measurements loaded in one
    query each (per source)."""
    best = repo.measurements_by_id(s, (j.best_measurement_id for j in jobs if j.best_measurement_id))
    again = repo.remeasurements_of(s, best.values())
    return [JobOut.of(j, best.get(j.best_measurement_id or 0), again.get(j.best_measurement_id or 0)) for j in jobs]
