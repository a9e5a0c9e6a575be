"""The dashboard: a static page (tirtune/api/static/) and the JSON views it polls.

The page and its scripts ship inside the package, Chart.js included (static/vendor/), so it works
with no internet. It polls GET /jobs and GET /studies/{shape}/{dtype}/summary (with `epilogue` for
a fused problem) every few seconds; its tables name each problem's epilogue.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, FastAPI, Query
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from tirtune.api.best import answer
from tirtune.api.deps import Factory
from tirtune.api.errors import ApiError
from tirtune.api.routes import (
    ANY_ROUTE,
    DTYPE_DOC,
    DTYPE_SCHEMA,
    MAX_INT,
    SHAPE_DOC,
    SHAPE_SCHEMA,
    Epilogue,
    Limit,
    Offset,
    parse_problem,
)
from tirtune.api.schemas import ErrorOut, Page, StudyOut, StudySummaryOut
from tirtune.api.summary import TOP, summarize
from tirtune.core import Problem, Source
from tirtune.db import JobRecord, repo, transaction
from tirtune.db.best import choose

__all__ = ["STATIC", "install_dashboard", "router"]

STATIC = Path(__file__).parent / "static"
MAX_POINTS = 20_000

router = APIRouter(responses=ANY_ROUTE)


def install_dashboard(app: FastAPI) -> None:
    """Add the page, its static files and the study views to `app`."""
    app.mount("/dashboard/static", StaticFiles(directory=STATIC), name="dashboard-static")
    app.include_router(router)


@router.get("/", include_in_schema=False)
def root() -> RedirectResponse:
    return RedirectResponse("/dashboard")


@router.get("/dashboard", include_in_schema=False)
def dashboard() -> FileResponse:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


@router.get("/studies")
def studies(factory: Factory, limit: Limit = 100, offset: Offset = 0) -> Page[StudyOut]:
    """Every problem with measurements (a shape, dtype and epilogue), the most recently measured first."""
    with transaction(factory) as s:
        rows = repo.problem_stats(s, limit=limit, offset=offset)
        total = repo.count_problems(s)
    return Page(items=[StudyOut.of(r) for r in rows], total=total, limit=limit, offset=offset)


@router.get("/studies/{shape}/{dtype}/summary", responses={404: {"model": ErrorOut}})
def study_summary(
    factory: Factory,
    shape: Annotated[str, PathParam(max_length=64, description=SHAPE_DOC, json_schema_extra=SHAPE_SCHEMA)],
    dtype: Annotated[str, PathParam(max_length=16, description=DTYPE_DOC, json_schema_extra=DTYPE_SCHEMA)],
    epilogue: Epilogue = "none",
    job_id: Annotated[int | None, Query(ge=1, le=MAX_INT, description="only this job's trials")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_POINTS, description="at most this many, the oldest")] = 5000,
) -> StudySummaryOut:
    """Trials coloured by outcome, best-so-far (highest same-run ratio) against same-run cuBLAS,
    knob importance, the top configs and the best as GET /best ranks them (of this job, with
    `job_id`; the GPU's measurements, or the replayed ones when there are no others), and
    failures by reason, for one problem. 404 when the problem has no measurements; a job's
    summary is empty, not 404, until its first one."""
    problem = parse_problem(shape, dtype, epilogue)
    with transaction(factory) as s:
        if job_id is not None:
            _check_job_tunes(repo.get_job(s, job_id), problem)
        records = repo.problem_measurements(s, problem, job_id=job_id, limit=limit)
        total = repo.count_measurements(s, job_id=job_id, problem=problem)
        top = repo.ranked(s, problem, job_id=job_id, limit=TOP) or repo.ranked(
            s, problem, job_id=job_id, limit=TOP, source=Source.REPLAY
        )
    if not records and job_id is None:
        raise ApiError(404, "not_found", f"no measurements of {problem} yet")
    choice = choose(top[:2])
    best = None if choice is None else answer(choice)
    return StudySummaryOut.of(problem, job_id, summarize(records, top), truncated=total > len(records), best=best)


def _check_job_tunes(job: JobRecord, problem: Problem) -> None:
    """A job's study exists (empty at first) from the moment the job is queued, for its problem only."""
    if job.problem != problem:
        raise ApiError(404, "not_found", f"job {job.id} tunes {job.problem}, not {problem}")
