"""Every trial a suite's jobs measured, with where the search took it from.

    python -m bench.suite_trials SUITE.sqlite --out bench/results/suite/2026-12-02-run1-trials.csv

Reads a suite's database (bench/suite.py --database: the service's tables and the jobs' Optuna
studies in one) and writes one CSV row per measurement of each job's own trials: problem, dtype,
trial, origin, config, outcome, ratio, TFLOP/s, same-run cuBLAS TFLOP/s and the job's epilogue
("none", or its fused ops and scales: two jobs of one shape and dtype are told apart by it). The origin is what
the job's proposer recorded on the Optuna trial: "start" (a starting point, enqueued: with a cost
model, its first picks), "neighbour" (one knob, or one of the space's jumps, from a best so far:
user attr neighbour_of), "refine" (among a guided job's last trials, the best config's own
neighbours: refine), "model" (the cost model's pick from its ranked pool: model_pick), "repaired" (a valid config near
a sample a rule refused: repaired_from), "tpe" (TPE's own sample). Prints, per job, the best trial's origin
and how many trials came within 2% of it, then how many jobs' best was not a starting point
(the local search's test in docs/perf-notes.md).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna
import sqlalchemy as sa

from tirtune.core import Config
from tirtune.db.models import Job, Measurement
from tirtune.db.session import open_database
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS

NEAR = 0.98  # "within 2% of the best"
ORIGINS = ("start", "neighbour", "refine", "model", "repaired", "tpe")


@dataclass(frozen=True)
class Row:
    problem: str
    dtype: str
    trial: int
    origin: str
    config: str
    outcome: str
    ratio: float | None
    tflops: float | None
    cublas_tflops: float | None
    epilogue: str = "none"


def origin(trial: optuna.trial.FrozenTrial) -> str:
    """Where the proposer took `trial` from (see the module's docstring)."""
    if trial.user_attrs.get("refine"):
        return "refine"
    if "neighbour_of" in trial.user_attrs:
        return "neighbour"
    if "model_pick" in trial.user_attrs:
        return "model"
    if "repaired_from" in trial.user_attrs:
        return "repaired"
    if "fixed_params" in trial.system_attrs:
        return "start"
    return "tpe"


def trials(url: str) -> list[Row]:
    """The rows of every job in the database at `url`, jobs in order, each job's trials in order."""
    sessions = open_database(url)
    storage = optuna.storages.RDBStorage(url)
    rows: list[Row] = []
    with sessions() as s:
        for job in s.scalars(sa.select(Job).order_by(Job.id)):
            try:
                study = optuna.load_study(study_name=job.study_name, storage=storage)
            except KeyError:  # a job that never started (a run cut by its deadline): nothing measured
                continue
            origins = {t.number: origin(t) for t in study.get_trials(deepcopy=False)}
            measured = s.scalars(sa.select(Measurement).where(Measurement.job_id == job.id, Measurement.trial_number
                                 .is_not(None)).order_by(Measurement.trial_number, Measurement.id))
            for m in measured:
                number = int(m.trial_number or 0)
                rows.append(Row(f"{job.m}x{job.n}x{job.k}", job.dtype, number, origins.get(number, "?"),
                                Config.from_json(m.config, HOPPER_KNOBS).label(), m.outcome, m.ratio, m.tflops, m.cublas_tflops,
                                job.epilogue or "none"))
    return rows


def summary(rows: Sequence[Row]) -> list[str]:
    """Per job: its best trial (the trial figure), the best's origin, the origins within 2% of it."""
    lines: list[str] = []
    jobs = list(dict.fromkeys((r.problem, r.dtype, r.epilogue) for r in rows))
    not_start = 0
    for problem, dtype, epilogue in jobs:
        name = f"{problem} {dtype}" + ("" if epilogue == "none" else f" {epilogue}")
        own = [r for r in rows if (r.problem, r.dtype, r.epilogue) == (problem, dtype, epilogue)]
        ok = [r for r in own if r.outcome == "OK" and r.ratio]
        if not ok:
            lines.append(f"{name}: no verified trial")
            continue
        best = max(ok, key=lambda r: r.ratio or 0.0)
        near = Counter(r.origin for r in ok if (r.ratio or 0.0) >= NEAR * (best.ratio or 0.0))
        measured = Counter(r.origin for r in own)
        not_start += best.origin != "start"
        lines.append(f"{name}: best {best.ratio:.3f} (trial {best.trial}, {best.origin}: {best.config}); "
                     f"within 2%: {dict(near)}; measured: {dict(measured)}")
    lines.append(f"{not_start} of {len(jobs)} jobs' best trial was not a starting point")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("database", help="a suite's SQLite file, or a database URL")
    ap.add_argument("--out", type=Path, default=None, help="the CSV (default: none, the summary only)")
    args = ap.parse_args(argv)
    url = args.database if "://" in args.database else f"sqlite:///{Path(args.database).resolve()}"
    if "://" not in args.database and not Path(args.database).is_file():
        print(f"no such database file: {args.database}", file=sys.stderr)
        return 2
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = trials(url)
    if args.out is not None:
        with args.out.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["problem", "dtype", "trial", "origin", "config", "outcome", "ratio", "tflops", "cublas_tflops",
                        "epilogue"])
            for r in rows:
                w.writerow([r.problem, r.dtype, r.trial, r.origin, r.config, r.outcome,
                            *(f"{v:.4g}" if v is not None else "" for v in (r.ratio, r.tflops, r.cublas_tflops)),
                            r.epilogue])
    print("\n".join(summary(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
