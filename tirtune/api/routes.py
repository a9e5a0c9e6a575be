"""HTTP routes. Handlers only read and queue: tuning itself runs in the JobService workers."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from tirtune.api.best import NotTuned, find_best
from tirtune.api.cache import ResponseCache
from tirtune.api.deps import Factory, require_token
from tirtune.api.errors import ApiError
from tirtune.api.schemas import (
    BestOut,
    ErrorOut,
    HealthOut,
    JobOut,
    MeasurementOut,
    Page,
    TuneRequest,
)
from tirtune.core import Outcome, Problem, Source
from tirtune.db import JobRecord, JobState, repo, transaction
from tirtune.space.branches import branch

__all__ = ["router"]

# Ids and offsets are 32-bit integers in the database; larger ones are refused up front.
MAX_INT = 2**31 - 1
PRINTABLE = r"^[ -~]+$"

router = APIRouter(responses={422: {"model": ErrorOut, "description": "invalid request"}})

Limit = Annotated[int, Query(ge=1, le=500)]
Offset = Annotated[int, Query(ge=0, le=MAX_INT)]
Shape = Annotated[str, Query(max_length=64, description="MxNxK, e.g. 4096x4096x4096")]
Dtype = Annotated[str, Query(max_length=16, description="float16 or bfloat16 (fp16, bf16 accepted)")]


@router.post(
    "/tune",
    status_code=202,
    dependencies=[Depends(require_token)],
    responses={
        200: {"model": JobOut, "description": "the same problem is already queued or running: that job"},
        401: {"model": ErrorOut, "description": "missing or wrong bearer token"},
    },
)
def tune(body: TuneRequest, request: Request, response: Response, factory: Factory) -> JobOut:
    """Queue a tuning job (202), or return the active job for the same problem and arch (200)."""
    problem = body.problem()
    branch(body.arch).space.check_problem(problem)  # e.g. a K that TMA cannot address: refused before queueing
    with transaction(factory) as s:
        repo.lock_problem(s, problem, body.arch)
        job = repo.find_active_job(s, problem, body.arch)
        if job is None:
            job = repo.create_job(s, problem, body.arch, body.max_trials, body.time_budget_s)
        else:
            response.status_code = 200
        out = _jobs_out(s, [job])[0]
    response.headers["Location"] = request.url_for("get_job", job_id=job.id).path
    return out


@router.get("/jobs")
def list_jobs(
    factory: Factory, limit: Limit = 50, offset: Offset = 0, state: JobState | None = None
) -> Page[JobOut]:
    """Jobs, newest first."""
    with transaction(factory) as s:
        jobs = repo.list_jobs(s, state=state, limit=limit, offset=offset)
        return Page(items=_jobs_out(s, jobs), total=repo.count_jobs(s, state), limit=limit, offset=offset)


@router.get("/jobs/{job_id}", responses={404: {"model": ErrorOut}})
def get_job(factory: Factory, job_id: Annotated[int, Path(ge=1, le=MAX_INT)]) -> JobOut:
    with transaction(factory) as s:
        return _jobs_out(s, [repo.get_job(s, job_id)])[0]


@router.get(
    "/best", response_model=BestOut,
    responses={404: {"model": ErrorOut, "description": "nothing tuned for it yet"}},
)
async def best(
    request: Request,
    factory: Factory,
    shape: Shape,
    dtype: Dtype = "float16",
    gpu: Annotated[str | None, Query(max_length=128, pattern=PRINTABLE)] = None,
    fallback: Annotated[
        Literal["none", "nearest"],
        Query(description="nearest: when the shape is not tuned, serve the best of the nearest tuned shape "
                          "of the same dtype (log-space distance of M, N, K) and say so in `fallback`"),
    ] = "none",
    source: Annotated[
        Source,
        Query(description="gpu (default): only figures this service measured on a GPU; replay: only figures read "
                          "back from recordings (labelled so: `source`, `recording`, `branch_status`, `note`)"),
    ] = Source.GPU,
) -> Response:
    """The best verified, non-stale configuration of a problem: the highest same-run ratio to
    cuBLAS, re-measured figures first (tirtune.db.best), with its p10-p90, whether it was
    re-measured (`confirmed`), and the runner-up with a statement when the two are within noise.
    Answers are cached per API process until the measurements or re-measurements change (checked
    every `best_cache_check_s`, 1 s by default; see tirtune.api.cache): hits wait on neither the
    database nor a worker thread."""
    problem = Problem.parse(shape, dtype)
    cache: ResponseCache = request.app.state.best_cache
    if cache.claim_check():
        _check_in_background(factory, cache)
    key = (problem, gpu, fallback, source)
    body = cache.get(key)
    if body is None:
        generation = cache.generation
        found = await run_in_threadpool(_find_best, factory, problem, gpu, fallback, source)
        body = found.model_dump_json().encode()
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
            version = repo.measurements_version(s)
    finally:
        cache.checked(version)  # None (a failed read) drops everything


def _find_best(
    factory: sessionmaker[Session], problem: Problem, gpu: str | None, fallback: Literal["none", "nearest"],
    source: Source,
) -> BestOut:
    with transaction(factory) as s:
        found = find_best(s, problem, gpu=gpu, source=source, fallback=fallback)
    if isinstance(found, NotTuned):
        raise ApiError(404, "not_found", found.message(start="POST /tune to start", ask_replayed="source=replay"))
    return found


@router.get("/trials")
def trials(
    factory: Factory,
    job_id: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None,
    shape: Annotated[str | None, Query(max_length=64)] = None,
    dtype: Annotated[str | None, Query(max_length=16)] = None,
    outcome: Outcome | None = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> Page[MeasurementOut]:
    """Measurements, newest first; `shape` (with `dtype`, default float16) narrows to one problem."""
    problem = _problem_filter(shape, dtype)
    with transaction(factory) as s:
        rows = repo.list_measurements(
            s, job_id=job_id, problem=problem, outcome=outcome, limit=limit, offset=offset
        )
        total = repo.count_measurements(s, job_id=job_id, problem=problem, outcome=outcome)
        again = repo.remeasurements_of(s, rows)
    return Page(items=[MeasurementOut.of(r, again.get(r.id)) for r in rows], total=total, limit=limit, offset=offset)


@router.get("/healthz", responses={503: {"model": ErrorOut, "description": "database unreachable"}})
def healthz(factory: Factory) -> HealthOut:
    with transaction(factory) as s:
        repo.ping(s)
    return HealthOut()


def _problem_filter(shape: str | None, dtype: str | None) -> Problem | None:
    if shape is None:
        if dtype is not None:
            message = "dtype filters need a shape too, e.g. shape=4096x4096x4096&dtype=bf16"
            raise ApiError(422, "validation_error", message)
        return None
    return Problem.parse(shape, dtype or "float16")


def _jobs_out(s: Session, jobs: list[JobRecord]) -> list[JobOut]:
    """JobOut for each job, their best measurements and those's re-measurements loaded in one
    query each (per source)."""
    best = repo.measurements_by_id(s, (j.best_measurement_id for j in jobs if j.best_measurement_id))
    again = repo.remeasurements_of(s, best.values())
    return [JobOut.of(j, best.get(j.best_measurement_id or 0), again.get(j.best_measurement_id or 0)) for j in jobs]
