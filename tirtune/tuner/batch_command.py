"""`tirtune tune --shapes FILE` and `tirtune tune-model CONFIG.json --tokens ...`: several problems
as one batch of jobs, one after another on one set of workers, with one progress display (a bar
per problem and one for the batch) and one summary table.

Every job is the service's own (`JobLoop`: proposals, builds, the measuring child, the top trials
re-measured); each problem's best is `repo.best_of` of its job, as GET /best ranks. A problem the
template cannot take is refused before anything starts, with its reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tirtune.core import Problem, Source, SpaceError
from tirtune.db import repo, transaction
from tirtune.db.session import open_database
from tirtune.model.keeper import ModelKeeper
from tirtune.settings import Settings
from tirtune.space import branches
from tirtune.tuner.job import JobLoop
from tirtune.tuner.job import Progress as JobProgress
from tirtune.tuner.models import model_keeper
from tirtune.tuner.runtime import TUNE_REPLAY_HINT, check_local_gpus, make_workers
from tirtune.tuner.tune_command import report_console

__all__ = ["Named", "parse_shapes", "run_batch"]

_LINE = re.compile(
    r"^\s*(?:(?P<name>[A-Za-z_][\w.@-]*)\s+)?(?P<shape>\d+\s*x\s*\d+\s*x\s*\d+)"
    r"(?:\s*[: ]\s*(?P<dtype>[A-Za-z0-9]+))?\s*$"
)


@dataclass(frozen=True, slots=True)
class Named:
    """A problem of a batch and what it is for (a layer's GEMM: "qkv@16"), for the table."""

    name: str
    problem: Problem


def parse_shapes(text: str, default_dtype: str = "float16") -> list[Named]:
    """A shapes file: one problem a line, `[name] MxNxK[:dtype| dtype]`; `#` starts a comment.
    Duplicates are tuned once."""
    found: dict[Problem, Named] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _LINE.match(line)
        if match is None:
            raise SpaceError(f"line {number}: {line[:60]!r} is not `[name] MxNxK[:dtype]`")
        problem = Problem.parse(match["shape"], match["dtype"] or default_dtype)
        found.setdefault(problem, Named(match["name"] or problem.shape, problem))
    if not found:
        raise SpaceError("the shapes file names no problem")
    return list(found.values())


def run_batch(
    settings: Settings,
    problems: Sequence[Named],
    *,
    trials: int,
    time_s: float | None,
    replay: str | Path | None,
    database_url: str | None = None,
) -> dict[str, Any]:
    """Tune each problem in turn (`trials` and `time_s` each) and return the batch's summary."""
    for named in problems:
        branches.check_problem(named.problem)  # every refusal before any job starts
    replaying = (replay or settings.replay) is not None
    if not replaying:
        check_local_gpus(settings, TUNE_REPLAY_HINT)  # before a database is made or a Ray started
    console = report_console(stderr=True)
    url = database_url or settings.database_url_for(replay=replaying)
    sessions = open_database(url)
    workers = make_workers(settings, replay=replay, no_gpu_hint=TUNE_REPLAY_HINT)
    for named in problems:
        workers.space.check_problem(named.problem)
    source = Source(workers.runner.source)
    models = model_keeper(sessions) if settings.cost_model else None  # one for the batch: each job adds to it
    console.print(f"tuning {len(problems)} problems on {workers.space.arch}, up to {trials} trials each")
    rows = []
    with _bar(console) as bar:
        overall = bar.add_task("batch", total=len(problems), best="")
        for named in problems:
            # Created and claimed together, as `tirtune tune` does: a job service on the same
            # database never sees a batch's job QUEUED, so it cannot take it.
            with transaction(sessions) as s:
                job = repo.create_job(s, named.problem, workers.space.arch, trials, time_s)
                repo.claim_job(s, job.id)
            rows.append(_one(sessions, url, settings, workers, named, job.id, bar, trials, models))
            bar.advance(overall)
    with transaction(sessions) as s:
        for named, row in zip(problems, rows, strict=True):
            # The job's own problem, its epilogue included: a fused problem's trials are its own.
            row.update(_best(repo.best_of(s, named.problem, source=source, job_id=row["job_id"])))
    summary = {
        "problems": rows,
        "trials_per_problem": trials,
        "source": source.value,
        "template_version": workers.space.template_version,
    }
    _print(summary)
    return summary


def _one(
    sessions: Any,
    url: str,
    settings: Settings,
    workers: Any,
    named: Named,
    job_id: int,
    bar: Progress,
    trials: int,
    models: ModelKeeper | None,
) -> dict[str, Any]:
    task = bar.add_task(f"{named.name} {named.problem.shape} {named.problem.dtype}", total=trials, best="-")

    def update(p: JobProgress) -> None:
        ratio = "-" if p.best is None or p.best.ratio is None else f"best so far {p.best.ratio:.3f}x (trial)"
        bar.update(task, completed=p.trials_done, best=ratio)

    loop = JobLoop(
        sessions,
        url,
        workers.space,
        workers.builder,
        workers.runner,
        batch_size=workers.batch_size,
        on_progress=update,
        remeasure_processes=settings.remeasure_processes,
        local_share=settings.local_share,
        models=models,
    )
    try:
        result = loop.run(job_id)
    except BaseException as exc:
        with transaction(sessions) as s:
            repo.finish_job(s, job_id, "CANCELLED" if isinstance(exc, KeyboardInterrupt) else "FAILED", str(exc))
        raise
    with transaction(sessions) as s:
        repo.finish_job(s, job_id, result.state, result.message)
    bar.update(task, completed=trials, best=result.message[:60])
    return {
        "name": named.name,
        "shape": named.problem.shape,
        "dtype": named.problem.dtype,
        "epilogue": str(named.problem.epilogue),
        "job_id": job_id,
        "state": result.state,
        "trials": result.trials,
        "stopped_because": result.message,
    }


def _best(choice: Any) -> dict[str, Any]:
    if choice is None:
        return {"config": None, "config_label": None, "ratio": None, "confirmed": None, "key": None}
    f, t = choice.best.figures, choice.best.trial
    return {
        "config": t.config.to_json(),
        "config_label": t.config.label(),
        "ratio": f.ratio,
        "ratio_p10": f.ratio_p10,
        "ratio_p90": f.ratio_p90,
        "confirmed": f.confirmed,
        "tflops": f.tflops,
        "key": t.key,
    }


def _bar(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[best]}"),
        console=console,
    )


def _print(summary: dict[str, Any]) -> None:
    table = Table(
        title=f"{len(summary['problems'])} problems: the best of each job by same-run ratio "
        f"(re-measured first){' (replayed)' if summary['source'] == 'replay' else ''}"
    )
    for column in ("name", "problem", "best config", "ratio (p10-p90)", "re-measured", "trials"):
        table.add_column(column, justify="right" if column in ("ratio (p10-p90)", "trials") else "left")
    for r in summary["problems"]:
        spread = f" ({r['ratio_p10']:.3f}-{r['ratio_p90']:.3f})" if r.get("ratio_p10") and r.get("ratio_p90") else ""
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}{spread}"
        table.add_row(
            r["name"],
            f"{r['shape']} {r['dtype']}" + ("" if r["epilogue"] == "none" else f" epilogue={r['epilogue']}"),
            r["config_label"] or "no verified config",
            ratio,
            "-" if r["confirmed"] is None else ("yes" if r["confirmed"] else "no"),
            str(r["trials"]),
        )
    report_console().print(table)
