"""`tirtune tune`: one job through the service's own path, with a progress bar and a table.

The bar, the table, the summary file and GET /best name one best, chosen by `repo.ranked`
(tirtune.db.best): the highest same-run ratio, re-measured figures first. The summary's `best`
is GET /best's answer, rendered by the function the CLI hands in (`serve`: tirtune.api.best's
`answer`; the tuner never imports the API, docs/architecture.md).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tirtune.core import Problem, Source
from tirtune.db import repo, shown_url, transaction
from tirtune.db.best import BestChoice, Ranked, choose
from tirtune.db.records import MeasurementRecord, RemeasurementRecord
from tirtune.db.session import open_database
from tirtune.runner.replay_runner import ReplayRunner
from tirtune.settings import Settings
from tirtune.space import branches
from tirtune.tuner.job import JobLoop
from tirtune.tuner.job import Progress as JobProgress
from tirtune.tuner.models import model_keeper
from tirtune.tuner.runtime import TUNE_REPLAY_HINT, check_local_gpus, make_workers

__all__ = ["Serve", "report_console", "run_tune", "summarize"]

# GET /best's JSON for a choice (tirtune.api.best.answer, dumped): the CLI hands it in.
Serve = Callable[[BestChoice], dict[str, Any]]

# The result table's width when stdout is not a terminal: wide enough for any row, so that
# `| cat` or a file gets every cell whole (rich would otherwise assume 80 columns and cut).
PIPED_WIDTH = 1000


def report_console(*, stderr: bool = False) -> Console:
    """stdout (the table, the summary lines) or stderr (progress, notes) of a command: a terminal's
    width, or unbounded when piped, so that no figure or command is cut or wrapped."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=PIPED_WIDTH)


def run_tune(
    settings: Settings,
    shape: str,
    dtype: str,
    *,
    trials: int,
    time_s: float | None,
    replay: str | Path | None,
    serve: Serve,
    top: int = 10,
    database_url: str | None = None,
    epilogue: str = "none",
) -> dict[str, Any]:
    """Tune one problem (with its fused `epilogue`, text such as "bias+residual") in the foreground
    and return the summary. `database_url` defaults to DATABASE_URL, or for a replay (`replay` or
    TIRTUNE_REPLAY) to the replay database; `serve` renders a best as GET /best does (the
    summary's `best`)."""
    problem = Problem.parse(shape, dtype, epilogue)
    branches.check_problem(problem)  # refuse what no branch can tune before anything starts
    replaying = (replay or settings.replay) is not None
    if not replaying:
        check_local_gpus(settings, TUNE_REPLAY_HINT)  # before a database is made or a Ray started
    console = report_console(stderr=True)
    url = database_url or settings.database_url_for(replay=replaying)
    sessions = open_database(url)
    workers = make_workers(settings, replay=replay, no_gpu_hint=TUNE_REPLAY_HINT)  # the GPUs decide the branch
    workers.space.check_problem(problem)  # e.g. a replay with nothing recorded for it
    source = Source(workers.runner.source)
    with transaction(sessions) as s:
        job = repo.create_job(s, problem, workers.space.arch, trials, time_s)
        repo.claim_job(s, job.id)
    console.print(f"job {job.id}: tuning {problem} on {workers.space.arch}, up to {trials} trials")
    if source is Source.REPLAY:
        named = "" if url == settings.replay_database_url else f" --database {shown_url(url)}"
        console.print(
            f"replaying recorded measurements (not a GPU run) into {shown_url(url)}; `tirtune best "
            f"{problem.shape} --dtype {problem.dtype}{_epilogue_flag(problem)} --source replay{named}` and "
            "GET /best?source=replay "
            "serve them, labelled"
        )
    began = time.monotonic()
    with _bar(console) as bar:
        task = bar.add_task("tuning", total=trials, best="-")

        def update(p: JobProgress) -> None:
            bar.update(task, completed=p.trials_done, best=_so_far(p.best))

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
            models=model_keeper(sessions) if settings.cost_model else None,
        )
        try:
            result = loop.run(job.id)
        except BaseException as exc:
            with transaction(sessions) as s:
                repo.finish_job(s, job.id, "CANCELLED" if isinstance(exc, KeyboardInterrupt) else "FAILED", str(exc))
            raise
        bar.update(task, best=_named(result.choice))  # the bar ends on the best the table names
    with transaction(sessions) as s:
        repo.finish_job(s, job.id, result.state, result.message)
        rows = repo.list_measurements(s, job_id=job.id, limit=100_000)
        remeasured = repo.job_remeasurements(s, job.id)
        ranked = repo.ranked(s, problem, job_id=job.id, source=source, limit=max(top, 2))
        overall = repo.best_of(s, problem, source=source)  # what GET /best serves (no fallback)
    summary = summarize(
        problem,
        rows,
        job_id=job.id,
        elapsed_s=time.monotonic() - began,
        serve=serve,
        top=top,
        ranked=ranked,
        remeasured=remeasured,
    )
    summary["stopped_because"] = result.message
    summary["replayed_from"] = workers.runner.recordings() if isinstance(workers.runner, ReplayRunner) else None
    summary["database"] = shown_url(url)
    _print_table(console, summary)
    ours = choose(ranked[:2])
    if overall is not None and (ours is None or overall.best.trial.id != ours.best.trial.id):
        other = overall.best.trial
        console.print(
            f"the best stored for {problem} is another job's: {other.config.label()} "
            f"({overall.best.figures.ratio:.3f}x, job {other.job_id}); GET /best serves that one"
        )
    return summary


def _so_far(best: MeasurementRecord | None) -> str:
    if best is None or best.ratio is None:
        return "-"
    return f"best so far {best.ratio:.3f}x cuBLAS ({best.tflops or 0:.0f} TFLOP/s, trial)"


def _named(choice: BestChoice | None) -> str:
    if choice is None:
        return "no verified config"
    f = choice.best.figures
    spread = f" ({f.ratio_p10:.3f}-{f.ratio_p90:.3f})" if f.ratio_p10 is not None and f.ratio_p90 else ""
    how = "re-measured" if f.confirmed else "trial, not re-measured"
    return f"best {f.ratio:.3f}x cuBLAS{spread}, {f.tflops or 0:.0f} TFLOP/s, {how}"


def _bar(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[best]}"),
        console=console,
    )


def summarize(
    problem: Problem,
    rows: list[MeasurementRecord],
    *,
    job_id: int,
    elapsed_s: float,
    serve: Serve,
    top: int = 10,
    ranked: Sequence[Ranked] = (),
    remeasured: Sequence[RemeasurementRecord] = (),
) -> dict[str, Any]:
    """The result file's content: the best config, same-run cuBLAS, provenance, outcome counts.

    The best and the top rows are `ranked` (repo.ranked of this job: the same-run ratio, the
    re-measured figures first), so the table, the summary and GET /best name the same config with
    the same figures; `best` is exactly GET /best's answer for this job, `best_trial` its trial's
    figures, `best_remeasured` its re-measurement."""
    choice = choose(ranked[:2])
    best = None if choice is None else choice.best
    trial = None if best is None else best.trial
    figures = None if best is None else best.figures
    by_id = {r.id: r for r in rows}
    return {
        "problem": problem.shape,
        "dtype": problem.dtype,
        "epilogue": str(problem.epilogue),
        "job_id": job_id,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "gpu": trial.gpu_name if trial else (rows[0].gpu_name if rows else None),
        "driver": trial.driver if trial else None,
        "cuda": trial.cuda if trial else None,
        "tvm": trial.tvm_version if trial else None,
        "torch": trial.torch_version if trial else None,
        "source": trial.source.value if trial else (rows[0].source.value if rows else None),
        # What was measured (a replay of recorded data keeps its recording's version).
        "template_version": trial.template_version
        if trial
        else (rows[0].template_version if rows else _default_version()),
        "trials": sum(1 for r in rows if r.outcome != "INVALID"),
        "invalid_configs_refused": sum(1 for r in rows if r.outcome == "INVALID"),
        "outcomes": dict(Counter(str(r.outcome.value) for r in rows)),
        "elapsed_s": round(elapsed_s, 1),
        "best_config": trial.config.to_json() if trial else None,
        "best_tflops": figures.tflops if figures else None,
        "best_time_ms": figures.time_ms if figures else None,
        "cublas_tflops": figures.cublas_tflops if figures else None,
        "ratio": figures.ratio if figures else None,
        "ratio_p10": figures.ratio_p10 if figures else None,
        "ratio_p90": figures.ratio_p90 if figures else None,
        "confirmed": figures.confirmed if figures else None,
        "best_trial": {
            "tflops": trial.tflops,
            "ratio": trial.ratio,
            "ratio_p10": trial.ratio_p10,
            "ratio_p90": trial.ratio_p90,
        }
        if trial
        else None,
        "best_rel_error": trial.rel_error if trial else None,
        "sm_clock_mhz": trial.sm_clock_mhz if trial else None,
        "power_w": trial.power_w if trial else None,
        "best": None if choice is None else serve(choice),
        "best_remeasured": None
        if figures is None or figures.remeasurement is None
        else _again(figures.remeasurement, by_id),
        "remeasured": [_again(m, by_id) for m in remeasured],
        "top": [_row(r) for r in ranked[:top]],
        "failures": [
            {"config": r.config.to_json(), "outcome": r.outcome, "message": r.message[:300]}
            for r in rows
            if r.outcome not in ("OK", "INVALID")
        ],
    }


def _again(m: RemeasurementRecord, by_id: dict[int, MeasurementRecord]) -> dict[str, Any]:
    trial = by_id.get(m.measurement_id)
    return {
        "label": trial.config.label() if trial else None,
        "outcome": m.outcome.value,
        "tflops": m.tflops,
        "time_ms": m.time_ms,
        "cublas_tflops": None if m.cublas_ms is None or trial is None else trial.problem.tflops(m.cublas_ms),
        "ratio": m.ratio,
        "ratio_p10": m.ratio_p10,
        "ratio_p90": m.ratio_p90,
        "rounds": m.rounds,
        "processes": m.processes,
    }


def _row(ranked: Ranked) -> dict[str, Any]:
    r, f = ranked.trial, ranked.figures
    return {
        "config": r.config.to_json(),
        "label": r.config.label(),
        "ratio": f.ratio,
        "ratio_p10": f.ratio_p10,
        "ratio_p90": f.ratio_p90,
        "confirmed": f.confirmed,
        "tflops": f.tflops,
        "time_ms": f.time_ms,
        "cublas_tflops": f.cublas_tflops,
        "trial_ratio": r.ratio,
        "trial_time_p10_ms": r.time_p10_ms,
        "trial_time_p90_ms": r.time_p90_ms,
        "rel_error": r.rel_error,
    }


def _print_table(console: Console, summary: dict[str, Any]) -> None:
    where = f" on {summary['gpu']}" if summary["gpu"] else " (nothing measured)"
    table = Table(
        title=f"{summary['problem']} {summary['dtype']}{_fused(summary)}{where}"
        f"{' (replayed)' if summary.get('source') == 'replay' else ''}: top configs by same-run ratio "
        "(re-measured first)"
    )
    # rel. error and the trials' times are in the JSON and markdown files; a terminal is narrow.
    for column in ("config", "ratio (p10-p90)", "re-measured", "TFLOP/s", "cuBLAS TFLOP/s", "trial ratio"):
        table.add_column(column, justify="left" if column == "config" else "right")
    for row in summary["top"]:
        table.add_row(
            row["label"],
            f"{row['ratio']:.3f} ({_interval(row)})",
            "yes" if row["confirmed"] else "no",
            _f(row["tflops"]),
            _f(row["cublas_tflops"]),
            _f(row["trial_ratio"], 3),
        )
    out = report_console()
    out.print(table)
    best = summary.get("best")
    if best is not None:
        out.print(f"best: {best['config_label']}: {best['note']}")
    counts = _counts(summary["outcomes"])
    out.print(
        f"{summary['trials']} trials ({counts}) in {summary['elapsed_s']}s, "
        f"{summary['invalid_configs_refused']} invalid configs refused by rules; "
        f"{summary.get('stopped_because', '')}"
    )


def to_markdown(summary: dict[str, Any]) -> str:
    """The result file's table: provenance first, then the top configs against same-run cuBLAS."""
    s = summary
    best = s.get("best") or {}
    lines = [
        f"# tirtune tune {s['problem']} {s['dtype']}{_fused(s)}",
        "",
        f"- date: {s['date']}; GPU: {s['gpu']}; driver {s['driver']}; CUDA {s['cuda']}; TVM {s['tvm']}; "
        f"torch {s['torch']}; template {s['template_version']}"
        + (f"; replayed from {', '.join(s['replayed_from'])} (not a GPU run)" if s.get("replayed_from") else ""),
        f"- {s['trials']} trials ({_counts(s['outcomes'])}), "
        f"{s['invalid_configs_refused']} invalid configs refused by rules, {s['elapsed_s']} s; "
        f"{s.get('stopped_because', '')}",
        f"- best (highest same-run ratio, {'re-measured' if s.get('confirmed') else 'trial figures, not re-measured'})"
        f": {_label(s['best_config'])}: ratio {_f(s['ratio'], 3)}{_spread(s)}, {_f(s['best_tflops'])} TFLOP/s, "
        f"cuBLAS {_f(s['cublas_tflops'])} TFLOP/s in the same run"
        + (f"; its trial: ratio {_f(s['best_trial']['ratio'], 3)}" if s.get("best_trial") else ""),
        *([f"- {best['note']}"] if best.get("note") else []),
        "",
        "| config | ratio | p10-p90 | re-measured | TFLOP/s | cuBLAS TFLOP/s | trial ratio | rel. error |",
        "| --- | ---: | ---: | :---: | ---: | ---: | ---: | ---: |",
    ]
    for r in s["top"]:
        lines.append(
            f"| {r['label']} | {_f(r['ratio'], 3)} | {_interval(r)} | {'yes' if r['confirmed'] else 'no'} | "
            f"{_f(r['tflops'])} | {_f(r['cublas_tflops'])} | {_f(r['trial_ratio'], 3)} | {r['rel_error']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def _interval(row: dict[str, Any]) -> str:
    low, high = row.get("ratio_p10"), row.get("ratio_p90")
    return "-" if low is None or high is None else f"{low:.3f}-{high:.3f}"


def _spread(s: dict[str, Any]) -> str:
    interval = _interval(s)
    return "" if interval == "-" else f" (p10-p90 {interval})"


def _counts(outcomes: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()) if k != "INVALID")


def _label(config: dict[str, Any] | None) -> str:
    from tirtune.space import Config

    # A config of any branch labels the same (every table holds the same knobs): the default's table.
    return "none" if config is None else Config.from_json(config, branches.branch(branches.DEFAULT_ARCH).knobs).label()


def _default_version() -> str:
    return branches.BRANCHES[branches.DEFAULT_ARCH].space.template_version


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _epilogue_flag(problem: Problem) -> str:
    return "" if problem.epilogue.is_none else f" --epilogue {problem.epilogue}"


def _fused(summary: dict[str, Any]) -> str:
    """' epilogue=bias+residual' for a fused problem's summary, else nothing (older summaries too)."""
    epilogue = summary.get("epilogue", "none")
    return "" if epilogue == "none" else f" epilogue={epilogue}"
