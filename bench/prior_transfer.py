"""Which rows should a GPU model's cost model learn from when few of its own are on file? Offline,
leave-one-problem-out over one GPU model's measurements (a draw's measurement table).

    python -m bench.prior_transfer bench/results/generalize/2026-12-06-1039785609-h100-measurements.csv \
        --out bench/results/generalize/2026-12-06-prior-transfer-h100.json

For each problem of the table, a model is fitted without it and ranks the configs the problem
measured; judged as bench/model_variants.py judges: the measured ratio of the model's first and
best-of-eight picks as a fraction of the best measured, and the Spearman correlation of predicted
and measured log ratios. The sources of a fit:

- `lent`: the shipped prior of another GPU model only (what a job on a GPU without a prior starts from);
- `own`: the table's other problems only;
- `both`: the lent prior and the table's other problems, each problem weighing the same;
- `both-xW`: as `both`, the table's rows weighing W times as much.

The configs judged were chosen by searches guided by the lent prior, so this ranks within what a
search found, not over the whole space.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from bench.model_prior import table_rows
from tirtune.core import Config, Problem, Sample
from tirtune.model.features import FEATURES, matrix
from tirtune.model.learner import PARAMS, ROUNDS, lightgbm, problem_weights
from tirtune.model.prior import load_prior
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS


def read_table(path: Path) -> list[Sample]:
    """A measurement table's correct plain-GEMM rows as samples (bench/model_prior.py reads them)."""
    return [
        Sample(
            Problem(int(r["m"]), int(r["n"]), int(r["k"]), r["dtype"]),
            Config.from_json(json.loads(r["config"]), HOPPER_KNOBS),
            float(r["ratio"]),
            r["origin"],
        )
        for r in table_rows(path.resolve(), gpu="")
    ]


def fit(samples: list[Sample], weights: np.ndarray, seed: int) -> object:
    lgb = lightgbm()
    x = matrix([(s.config, s.problem) for s in samples])
    y = np.array([math.log(s.ratio) for s in samples])
    data = lgb.Dataset(x, y, weight=weights, feature_name=list(FEATURES), free_raw_data=True)
    return lgb.train({**PARAMS, "seed": seed}, data, num_boost_round=ROUNDS)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1]) if len(a) > 2 else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", type=Path, help="a measurement table (problem, dtype, config, outcome, ratio)")
    ap.add_argument("--lent", default="NVIDIA H200", help="the GPU model whose shipped prior is lent")
    ap.add_argument("--weights", default="3,10", help="the table rows' weights for the both-xW variants")
    ap.add_argument("--seeds", default="0,1,2", help="the learner's seeds, one report each")
    ap.add_argument("--own-prior", default=None,
                    help="the own rows: this GPU model's shipped prior (every problem of it but the one held out) "
                    "instead of the table's other problems; the table's problems are held out in turn")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    own = read_table(args.table)
    pool = None if args.own_prior is None else list(load_prior(args.own_prior).samples)
    if pool is not None and not pool:
        ap.error(f"--own-prior: no shipped prior of {args.own_prior!r}")
    reports = [study(own, args.lent, args.weights, int(seed), pool) for seed in args.seeds.split(",")]
    args.out.write_text(json.dumps({"table": str(args.table), "reports": reports}, indent=1) + "\n")
    return 0


def study(
    own: list[Sample], lent_gpu: str, weight_list: str, seed: int, pool: list[Sample] | None = None
) -> dict[str, object]:
    """One seed's leave-one-problem-out report (module docstring); `pool`: the rows the `own` and
    `both` fits learn from (less the held-out problem's), where not the table's own."""
    lent = list(load_prior(lent_gpu).samples)
    by_problem: dict[Problem, list[Sample]] = defaultdict(list)
    for s in own:
        by_problem[s.problem].append(s)
    problems = sorted(by_problem, key=lambda p: (p.m, p.n, p.k, p.dtype))
    variants = ["lent", "own", "both", *(f"both-x{w}" for w in weight_list.split(",") if w.strip())]
    per: dict[str, list[dict[str, object]]] = {v: [] for v in variants}
    lent_model = fit(lent, problem_weights(lent), seed)
    for held in problems:
        rest = [s for s in (own if pool is None else pool) if s.problem != held]
        tests = by_problem[held]
        best = max(s.ratio for s in tests)
        x = matrix([(s.config, s.problem) for s in tests])
        measured = np.array([math.log(s.ratio) for s in tests])
        for v in variants:
            if v == "lent":
                model = lent_model
            elif v == "own":
                model = fit(rest, problem_weights(rest), seed)
            else:
                w = 1.0 if v == "both" else float(v.split("-x")[1])
                rows = [*lent, *rest]
                weights = problem_weights(rows) * np.array([1.0] * len(lent) + [w] * len(rest))
                model = fit(rows, weights, seed)
            pred = np.asarray(model.predict(x))  # type: ignore[attr-defined]
            order = np.argsort(-pred)
            per[v].append(
                {
                    "problem": f"{held.m}x{held.n}x{held.k}",
                    "dtype": held.dtype,
                    "configs": len(tests),
                    "top1": tests[order[0]].ratio / best,
                    "top8": max(tests[i].ratio for i in order[:8]) / best,
                    "spearman": spearman(pred, measured),
                }
            )
        print(held, {v: round(float(per[v][-1]["top1"]), 3) for v in variants}, file=sys.stderr)  # type: ignore[arg-type]
    summary = {
        v: {
            "top1_geomean": math.exp(statistics.fmean(math.log(float(r["top1"])) for r in rows)),  # type: ignore[arg-type]
            "top8_geomean": math.exp(statistics.fmean(math.log(float(r["top8"])) for r in rows)),  # type: ignore[arg-type]
            "top1_below_095": sum(float(r["top1"]) < 0.95 for r in rows),  # type: ignore[arg-type]
            "spearman_median": statistics.median(float(r["spearman"]) for r in rows),  # type: ignore[arg-type]
        }
        for v, rows in per.items()
    }
    report = {
        "lent": lent_gpu,
        "lent_samples": len(lent),
        "own_samples": len(own),
        "own_from": "the table" if pool is None else f"the shipped prior ({len(pool)} rows)",
        "problems": len(problems),
        "seed": seed,
        "learner": {"params": PARAMS, "rounds": ROUNDS},
        "summary": summary,
        "per_problem": per,
    }
    for v, s in summary.items():
        print(
            f"seed {seed} {v:10s} top1 {s['top1_geomean']:.4f} top8 {s['top8_geomean']:.4f} "
            f"below0.95 {s['top1_below_095']} spearman {s['spearman_median']:.3f}"
        )
    return report


if __name__ == "__main__":
    sys.exit(main())
