"""Tuner quality: how soon a 32-trial job comes within 2% of what 96 trials find.

    python -m bench.tuner_quality --draw bench/results/generalize/<date>-<seed>.json \\
        --trials-csv bench/results/generalize/<date>-<seed>-trials.csv      # 12 of its problems, 96 trials

The 32-trial jobs are a random draw's (bench/generalize.py): its report names each problem's
job, and its trials table (bench/suite_trials.py over the draw's database) holds every trial in
the order the job measured them. `--problems` of the draw's problems (12 by default, chosen with
`--seed`, drawn now and recorded unless given) are tuned again, each with `--trials` (96) trials,
by a service of this script's own with an empty database, all queued at once as the draw queued
its own; each reference is that run's measured `GET /best` (its best re-measured).

Per problem:
- `best_ratio`: the 96-trial run's best ratio to cuBLAS (`best_tflops` against the same run's
  `best_cublas_tflops`);
- `trials_to_2pct`: the 1-based count of measured trials (refusals not counted) after which the
  32-trial job first had a trial within 2% of `best_ratio` (its trial figure at least 0.98 of it);
  null when none of its trials came that close;
- `predicted_ratio`: the ratio the job's first trial measured; with the cost model on, that trial
  is the model's zero-trial top-1 (tirtune.tuner.start.guided_starts), so this is the top-1's
  measured ratio, and `model_said` is the ratio the model predicted for it before tuning (the
  draw's `GET /best` answer), when it made one.

Writes OUT_DIR/tuner-quality-<date>.json and .md: {"problems": [{"problem", "dtype",
"trials_to_2pct", "predicted_ratio", "best_ratio", ...}], "trials_to_2pct_median",
"trials_to_2pct_p90", "top1_of_best_geomean", "targets", ...}. A job that never came within 2%
counts as beyond its budget in the percentiles.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import secrets
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench import generalize, suite

WITHIN = 0.98
TARGETS = {"trials_to_2pct_median": 8, "trials_to_2pct_p90": 32, "top1_of_best_geomean": 0.97}


def measured_trials(rows: Sequence[Mapping[str, str]], problem: str, dtype: str) -> list[float | None]:
    """The job's measured trials in trial order: each one's ratio (None: measured, not correct).
    Refusals (INVALID, never built) are left out: they cost the job nothing."""
    mine = [r for r in rows if r["problem"] == problem and r["dtype"] == dtype and r["outcome"] != "INVALID"]
    mine.sort(key=lambda r: int(r["trial"]))
    return [float(r["ratio"]) if r["outcome"] == "OK" and r["ratio"] else None for r in mine]


def trials_to(ratios: Sequence[float | None], best: float, within: float = WITHIN) -> int | None:
    """The 1-based count of trials after which one was within `within` of `best`, else None."""
    for i, ratio in enumerate(ratios, 1):
        if ratio is not None and ratio >= within * best:
            return i
    return None


def p90(values: Sequence[float]) -> float:
    """The 90th percentile, interpolated as generalize.py's p10 is (statistics, "inclusive")."""
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]


def summary(problems: Sequence[Mapping[str, Any]], budget: int) -> dict[str, Any]:
    """Median and 90th percentile of trials_to_2pct (never: budget + 1) and the geomean of the
    top-1's ratio over the best's."""
    counts = [float(p["trials_to_2pct"] if p["trials_to_2pct"] is not None else budget + 1)
              for p in problems if p.get("best_ratio")]
    tops = [p["predicted_ratio"] / p["best_ratio"] for p in problems
            if p.get("best_ratio") and p.get("predicted_ratio")]
    figures: dict[str, Any] = {
        "scored": len(counts),
        "trials_to_2pct_median": statistics.median(counts) if counts else None,
        "trials_to_2pct_p90": p90(counts) if counts else None,
        "top1_of_best_geomean": suite.geomean(tops),
        "never_within_2pct": sum(1 for p in problems if p.get("best_ratio") and p["trials_to_2pct"] is None),
    }
    figures["targets_met"] = None if not counts else {
        "trials_to_2pct_median": figures["trials_to_2pct_median"] <= TARGETS["trials_to_2pct_median"],
        "trials_to_2pct_p90": figures["trials_to_2pct_p90"] <= TARGETS["trials_to_2pct_p90"],
        "top1_of_best_geomean": (figures["top1_of_best_geomean"] or 0) >= TARGETS["top1_of_best_geomean"],
    }
    return figures


def _reached(p: Mapping[str, Any]) -> str:
    """The trials-to-2% cell: the count, "never", or "-" where the 96-trial run gave no best to
    compare with (it had not ended by the deadline; not scored)."""
    if not p.get("best_ratio"):
        return "-"
    return str(p["trials_to_2pct"]) if p["trials_to_2pct"] is not None else "never"


def markdown(r: Mapping[str, Any]) -> str:
    f = suite._f
    met = r["targets_met"] or {}

    def said(key: str) -> str:
        return "met" if met.get(key) else "not met"

    lines = [
        "# Tuner quality: a 32-trial job against a 96-trial run's best",
        "",
        f"- {r['started_at']}; {r['gpu']}, driver {r['driver']}, torch {r['torch']}; template {r['template_version']}",
        f"- the draw {r['draw']} (seed {r['draw_seed']}, {r['draw_trials']} trials a problem); {len(r['problems'])} of "
        f"its problems chosen with seed **{r['seed']}**, each tuned again with {r['trials']} trials from an empty "
        f"database ({r['wall_s']} s)",
        f"- trials to within 2%: median **{f(r['trials_to_2pct_median'], 1)}** ({said('trials_to_2pct_median')}: <= "
        f"{TARGETS['trials_to_2pct_median']}), 90th percentile **{f(r['trials_to_2pct_p90'], 1)}** "
        f"({said('trials_to_2pct_p90')}: <= {TARGETS['trials_to_2pct_p90']}); never within 2%: "
        f"{r['never_within_2pct']} of {r['scored']} scored"
        + (f" ({len(r['problems']) - r['scored']} without a 96-trial best by the deadline: not scored)"
           if len(r["problems"]) > r["scored"] else ""),
        f"- the zero-trial top-1 at **{f(r['top1_of_best_geomean'])}** of the best in geomean "
        f"({said('top1_of_best_geomean')}: >= {TARGETS['top1_of_best_geomean']})",
        "",
        "| problem | dtype | trials to 2% | top-1 ratio | model said | 32-trial best | 96-trial best "
        "| 96-trial config |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for p in r["problems"]:
        lines.append(
            f"| {p['problem']} | {p['dtype']} | {_reached(p)} "
            f"| {f(p.get('predicted_ratio'))} | {f(p.get('model_said'))} | {f(p.get('draw_ratio'))} "
            f"| {f(p.get('best_ratio'))} | {p.get('config_label') or p.get('error') or '-'} |"
        )
    return "\n".join(lines) + "\n"


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--draw", type=Path, required=True, help="a draw's report (bench/generalize.py's JSON)")
    ap.add_argument("--trials-csv", type=Path, required=True, help="the draw's trials (bench/suite_trials.py)")
    ap.add_argument("--problems", type=int, default=12, help="how many of the draw's problems")
    ap.add_argument("--trials", type=int, default=96, help="the reference runs' trial budget")
    ap.add_argument("--seed", type=int, default=None, help="default: drawn now (secrets.randbits(32)) and recorded")
    ap.add_argument("--url", default=None, help="a running service with an empty database; default: start one")
    ap.add_argument("--database", default=None, help="the started service's database (default: beside the output)")
    ap.add_argument("--source", choices=("gpu", "replay"), default="gpu",
                    help="replay: score a replaying service's figures (a check of this script, with --url)")
    ap.add_argument("--deadline-s", type=float, default=7200.0,
                    help="give up waiting this many seconds after the script began (its service's start included)")
    ap.add_argument("--out-dir", type=Path, default=Path("bench/results/generalize"))
    args = ap.parse_args(argv)
    if args.problems < 1 or args.trials < 1:
        ap.error("--problems and --trials must be at least 1")
    if args.source == "replay" and args.url is None:
        ap.error("--source replay needs --url (a started service measures on the GPU)")
    for path in (args.draw, args.trials_csv):
        if not path.is_file():
            ap.error(f"{path}: no such file")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    draw = json.loads(args.draw.read_text())
    rows = list(csv.DictReader(args.trials_csv.open()))
    scored_draw = [p for p in draw["problems"] if p.get("ratio")]
    if not scored_draw:
        raise SystemExit(f"{args.draw}: no scored problem to compare with")
    here = generalize.visible_gpu() if args.source == "gpu" else None
    if here is not None and draw.get("gpu") and here != draw["gpu"]:
        # The draw's trials are ratios on its card; a reference measured on another card's cuBLAS
        # says nothing about how soon those trials came near it.
        raise SystemExit(f"{args.draw}: the draw measured on {draw['gpu']}, this machine has {here}; "
                         "run the reference on the same GPU model")
    seed = secrets.randbits(32) if args.seed is None else args.seed
    chosen = random.Random(seed).sample(scored_draw, min(args.problems, len(scored_draw)))
    print(f"seed {seed}: {len(chosen)} of {len(scored_draw)} problems of {args.draw.name}")
    started = datetime.now(UTC)
    out = args.out_dir / f"tuner-quality-{started.date().isoformat()}"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    database = args.database or f"sqlite:///{(args.out_dir / f'tuner-quality-{seed}.sqlite').resolve()}"
    with suite.service(database, out.with_suffix(".serve.log")) if args.url is None else suite._given(args.url) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            jobs = suite.queue(client, [(p["problem"], p["dtype"], p.get("model", "")) for p in chosen], args.trials)
            suite.wait(client, jobs, args.deadline_s, since=began)
            references = [suite.score(client, job, args.source) for job in jobs]
    problems = []
    for p, ref in zip(chosen, references, strict=True):
        best = ref.get("ratio")
        ratios = measured_trials(rows, p["problem"], p["dtype"])
        problems.append({
            "problem": p["problem"],
            "dtype": p["dtype"],
            "model": p.get("model"),
            "trials_to_2pct": trials_to(ratios, best) if best else None,
            "predicted_ratio": p.get("first_trial_ratio"),
            "model_said": p.get("predicted_ratio"),
            "best_ratio": best,
            "best_tflops": ref.get("tflops"),
            "best_cublas_tflops": ref.get("cublas_tflops"),
            "draw_ratio": p.get("ratio"),
            "draw_trials_measured": len(ratios),
            "config": ref.get("config"),
            "config_label": ref.get("config_label"),
            "state": ref.get("state"),
            "error": ref.get("error"),
        })
    base = suite.report(references, args.trials, time.monotonic() - began, args.source)
    result = {
        "date": started.date().isoformat(),
        "started_at": started.isoformat(timespec="seconds"),
        "gpu": base["gpu"], "driver": base["driver"], "torch": base["torch"], "tvm": base["tvm"],
        "template_version": base["template_version"], "wall_s": base["wall_s"], "source": args.source,
        "draw": args.draw.name, "draw_seed": draw.get("seed"), "draw_trials": draw.get("trials_per_problem"),
        "seed": seed, "trials": args.trials, "within": WITHIN, "targets": TARGETS,
        "problems": problems,
        **summary(problems, int(draw.get("trials_per_problem") or 32)),
    }
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
