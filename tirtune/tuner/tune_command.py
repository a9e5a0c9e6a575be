"""`tirtune tune`: one job through the service's own path, with a progress bar and a table."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tirtune.db import repo
from tirtune.db.records import MeasurementRecord, RemeasurementRecord
from tirtune.db.session import open_database
from tirtune.settings import Settings
from tirtune.space import HOPPER, Problem
from tirtune.tuner.job import JobLoop
from tirtune.tuner.job import Progress as JobProgress
from tirtune.tuner.runtime import TUNE_REPLAY_HINT, make_workers

__all__ = ["run_tune", "summarize"]


def run_tune(
    settings: Settings,
    shape: str,
    dtype: str,
    *,
    trials: int,
    time_s: float | None,
    replay: str | Path | None,
    top: int = 10,
) -> dict[str, Any]:
    problem = Problem.parse(shape, dtype)
    HOPPER.check_problem(problem)  # refuse before anything starts
    console = Console(stderr=True)
    sessions = open_database(settings.database_url)
    workers = make_workers(settings, replay=replay, no_gpu_hint=TUNE_REPLAY_HINT)  # the GPUs decide the branch
    workers.space.check_problem(problem)  # e.g. a replay with nothing recorded for it
    with sessions() as s, s.begin():
        job = repo.create_job(s, problem, workers.space.arch, trials, time_s)
        repo.claim_job(s, job.id)
    console.print(f"job {job.id}: tuning {problem} on {workers.space.arch}, up to {trials} trials")
    began = time.monotonic()
    with _bar(console) as bar:
        task = bar.add_task("tuning", total=trials, best="-")

        def update(p: JobProgress) -> None:
            best = f"best {p.best.tflops:.0f} TFLOP/s ({p.best.ratio:.3f}x cuBLAS)" if p.best and p.best.tflops else "-"
            bar.update(task, completed=p.trials_done, best=best)

        loop = JobLoop(
            sessions,
            settings.database_url,
            workers.space,
            workers.builder,
            workers.runner,
            batch_size=workers.batch_size,
            on_progress=update,
        )
        try:
            result = loop.run(job.id)
        except BaseException as exc:
            with sessions() as s, s.begin():
                repo.finish_job(s, job.id, "CANCELLED" if isinstance(exc, KeyboardInterrupt) else "FAILED", str(exc))
            raise
    with sessions() as s, s.begin():
        finished = repo.finish_job(s, job.id, "DONE", result.message)
        rows = repo.list_measurements(s, job_id=job.id, limit=100_000)
        remeasured = repo.job_remeasurements(s, job.id)
    summary = summarize(
        problem,
        rows,
        job_id=job.id,
        elapsed_s=time.monotonic() - began,
        top=top,
        best_id=finished.best_measurement_id,
        remeasured=remeasured,
    )
    summary["stopped_because"] = result.message
    _print_table(console, summary)
    return summary


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
    top: int = 10,
    best_id: int | None = None,
    remeasured: Sequence[RemeasurementRecord] = (),
) -> dict[str, Any]:
    """The result file's content: the best config, same-run cuBLAS, provenance, outcome counts.

    The best is the job's (after the interleaved re-measurement of the top trials, when there
    was one); its figures are its trial's, and `best_remeasured` gives the re-measured ones."""
    ok = sorted((r for r in rows if r.outcome == "OK" and r.tflops), key=lambda r: -(r.tflops or 0))
    best = next((r for r in ok if r.id == best_id), ok[0] if ok else None)
    by_id = {r.id: r for r in rows}
    return {
        "problem": problem.shape,
        "dtype": problem.dtype,
        "job_id": job_id,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "gpu": best.gpu_name if best else (rows[0].gpu_name if rows else None),
        "driver": best.driver if best else None,
        "cuda": best.cuda if best else None,
        "tvm": best.tvm_version if best else None,
        "torch": best.torch_version if best else None,
        # What was measured (a replay of recorded data keeps its recording's version).
        "template_version": best.template_version if best else (rows[0].template_version if rows
                                                                else HOPPER.template_version),
        "trials": sum(1 for r in rows if r.outcome != "INVALID"),
        "invalid_configs_refused": sum(1 for r in rows if r.outcome == "INVALID"),
        "outcomes": dict(Counter(str(r.outcome.value) for r in rows)),
        "elapsed_s": round(elapsed_s, 1),
        "best_config": best.config.to_json() if best else None,
        "best_tflops": best.tflops if best else None,
        "best_time_ms": best.time_ms if best else None,
        "cublas_tflops": best.cublas_tflops if best else None,
        "ratio": best.ratio if best else None,
        "best_rel_error": best.rel_error if best else None,
        "sm_clock_mhz": best.sm_clock_mhz if best else None,
        "power_w": best.power_w if best else None,
        "best_remeasured": next((_again(m, by_id) for m in remeasured if best and m.measurement_id == best.id), None),
        "remeasured": [_again(m, by_id) for m in remeasured],
        "top": [_row(r) for r in ok[:top]],
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
        "rounds": m.rounds,
    }


def _row(r: MeasurementRecord) -> dict[str, Any]:
    return {
        "config": r.config.to_json(),
        "label": r.config.label(),
        "tflops": r.tflops,
        "time_ms": r.time_ms,
        "time_p10_ms": r.time_p10_ms,
        "time_p90_ms": r.time_p90_ms,
        "cublas_tflops": r.cublas_tflops,
        "ratio": r.ratio,
        "rel_error": r.rel_error,
    }


def _print_table(console: Console, summary: dict[str, Any]) -> None:
    where = f" on {summary['gpu']}" if summary["gpu"] else " (nothing measured)"
    table = Table(title=f"{summary['problem']} {summary['dtype']}{where}: top configs")
    for column in ("config", "TFLOP/s", "cuBLAS TFLOP/s", "ratio", "rel. error"):
        table.add_column(column, justify="left" if column == "config" else "right")
    for row in summary["top"]:
        table.add_row(
            row["label"],
            f"{row['tflops']:.1f}",
            f"{row['cublas_tflops'] or 0:.1f}",
            f"{row['ratio'] or 0:.3f}",
            f"{row['rel_error'] or 0:.1e}",
        )
    Console().print(table)
    counts = _counts(summary["outcomes"])
    Console().print(
        f"{summary['trials']} trials ({counts}) in {summary['elapsed_s']}s, "
        f"{summary['invalid_configs_refused']} invalid configs refused by rules; "
        f"{summary.get('stopped_because', '')}"
    )


def to_markdown(summary: dict[str, Any]) -> str:
    """The result file's table: provenance first, then the top configs against same-run cuBLAS."""
    s = summary
    lines = [
        f"# tirtune tune {s['problem']} {s['dtype']}",
        "",
        f"- date: {s['date']}; GPU: {s['gpu']}; driver {s['driver']}; CUDA {s['cuda']}; TVM {s['tvm']}; "
        f"torch {s['torch']}; template {s['template_version']}",
        f"- {s['trials']} trials ({_counts(s['outcomes'])}), "
        f"{s['invalid_configs_refused']} invalid configs refused by rules, {s['elapsed_s']} s; "
        f"{s.get('stopped_because', '')}",
        f"- best: {_label(s['best_config'])}: {_f(s['best_tflops'])} TFLOP/s, cuBLAS {_f(s['cublas_tflops'])} "
        f"TFLOP/s in the same run, ratio {_f(s['ratio'], 3)}",
        *(
            [
                f"- re-measured interleaved with the top {len(s['remeasured'])} trials: "
                f"{_f(s['best_remeasured']['tflops'])} TFLOP/s, ratio {_f(s['best_remeasured']['ratio'], 3)}"
            ]
            if s.get("best_remeasured")
            else []
        ),
        "",
        "| config | TFLOP/s | time ms (p10-p90) | cuBLAS TFLOP/s | ratio | rel. error |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in s["top"]:
        lines.append(
            f"| {r['label']} | {_f(r['tflops'])} | {_f(r['time_ms'], 4)} ({_f(r['time_p10_ms'], 4)}-"
            f"{_f(r['time_p90_ms'], 4)}) | {_f(r['cublas_tflops'])} | {_f(r['ratio'], 3)} | "
            f"{r['rel_error']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def _counts(outcomes: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()) if k != "INVALID")


def _label(config: dict[str, Any] | None) -> str:
    from tirtune.space import Config

    return "none" if config is None else Config.from_json(config).label()


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
