"""The cost model on problems it did not learn from: leave-one-shape-out over the shipped prior.

    python -m bench.model_study --out bench/results/generalize/DATE-model-study     # + .json, .md

For each shape of the prior (tirtune/model/data) with enough distinct configs measured, the model
is trained on every other shape (both dtypes of the shape left out) and asked about this one:

- `top1`: the recorded ratio of the config it ranks first among the recorded ones, as a fraction
  of the best recorded (the zero-trial pick, judged where a figure exists);
- `top8`: the best of its first eight, likewise;
- a simulated 32-trial job on the recorded configs (`SearchSpace.restricted`: every proposal has a
  measured answer; batches of 8 asked 2 ahead, as JobLoop asks), per strategy and seed: the best
  found as a fraction of the best recorded, and the trial at which it first came within 2%.
  `guided`: the proposer with the cost model (its picks, then its ranking of neighbours and pool,
  fine-tuned on the job's answers); `classic`: the shape class's starts and the nearest-first
  local search, as without a model. No transfer (no database): each job starts cold.

The recorded configs of a problem are those earlier searches chose, mostly good ones, so this
judges the ranking among plausible configs; how the model does on the whole space is what
bench/generalize.py measures on a GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tirtune.core import Config, Problem, Sample
from tirtune.model.guide import Guide
from tirtune.model.learner import CostModel, train
from tirtune.model.prior import load_prior
from tirtune.space.branches import branch
from tirtune.space.hopper import HOPPER
from tirtune.space.space import SearchSpace
from tirtune.tuner.optuna_proposer import OptunaProposer
from tirtune.tuner.proposer import Feedback
from tirtune.tuner.start import START_PICKS

GPU = "NVIDIA H200"
WITHIN = 0.98
STRATEGIES = ("guided", "classic")


def recorded(samples: Sequence[Sample]) -> dict[Problem, dict[Config, float]]:
    """Per problem, each config's ratio (the geometric mean of its measurements)."""
    logs: dict[Problem, dict[Config, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        logs[s.problem][s.config].append(math.log(s.ratio))
    return {p: {c: math.exp(statistics.fmean(v)) for c, v in cs.items()} for p, cs in logs.items()}


def trace(space: SearchSpace, problem: Problem, score: dict[Config, float], model: CostModel | None, seed: int,
          trials: int, batch: int, ahead: int) -> list[float]:
    """The ratio of each trial in the order a job would measure them."""
    guide = Guide(model, space, problem) if model is not None else None
    starts = tuple(guide.first(START_PICKS)) if guide is not None else branch("sm_90a").start_configs(problem)
    out: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        proposer = OptunaProposer(f"sqlite:///{tmp}/study.db", "study", space, seed=seed, start_with=starts,
                                  problem=problem, guide=guide, budget=trials)
        asked, pending = 0, []
        while True:
            while len(pending) < ahead and asked < trials:
                proposals = proposer.ask(min(batch, trials - asked))
                if not proposals:
                    break
                asked += len(proposals)
                pending.append(proposals)
            if not pending:
                return out
            feedback = []
            for p in pending.pop(0):
                ratio = score.get(p.config)
                out.append(ratio or 0.0)
                feedback.append(Feedback(p.trial, ratio, "OK" if ratio else "WRONG_RESULT"))
            proposer.tell(feedback)


def study(min_configs: int, seeds: int, trials: int, batch: int, ahead: int,
          only: Sequence[str] = (), strategies: Sequence[str] = STRATEGIES) -> dict[str, Any]:
    prior = load_prior(GPU)
    table = recorded(prior.samples)
    shapes = sorted({p.shape for p, cs in table.items() if len(cs) >= min_configs and (not only or p.shape in only)})
    rows = []
    began = time.monotonic()
    for shape in shapes:
        model = train([s for s in prior.samples if s.problem.shape != shape])
        for problem in sorted((p for p in table if p.shape == shape), key=lambda p: p.dtype):
            score = table[problem]
            if len(score) < min_configs or model is None:
                continue
            best = max(score.values())
            configs = list(score)
            predicted = model.predict(configs, problem)
            order = sorted(range(len(configs)), key=lambda i: -predicted[i])
            space = HOPPER.restricted({problem: configs}, "recorded", "not among the recorded configs")
            row: dict[str, Any] = {
                "problem": problem.shape, "dtype": problem.dtype, "recorded": len(score), "best": round(best, 4),
                "top1": round(score[configs[order[0]]] / best, 4),
                "top8": round(max(score[configs[i]] for i in order[:8]) / best, 4),
                "predicted_top1": round(float(predicted[order[0]]), 4),
                "strategies": {},
            }
            for name in strategies:
                found, reached = [], []
                for seed in range(seeds):
                    t = trace(space, problem, score, model if name == "guided" else None, seed, trials, batch, ahead)
                    found.append(max(t, default=0.0) / best)
                    reached.append(next((i + 1 for i, v in enumerate(t) if v >= WITHIN * best), trials + 1))
                row["strategies"][name] = {"best_fraction": round(statistics.median(found), 4),
                                           "trials_to_2pct": statistics.median(reached)}
            rows.append(row)
            print(f"{time.monotonic() - began:5.0f}s {problem}: top1 {row['top1']:.3f} top8 {row['top8']:.3f} "
                  + " ".join(f"{n} {s['best_fraction']:.3f}/{s['trials_to_2pct']}"
                             for n, s in row["strategies"].items()), flush=True)
    geo = {key: math.exp(statistics.fmean(math.log(r[key]) for r in rows)) for key in ("top1", "top8")}
    for name in strategies:
        geo[f"{name}_best_fraction"] = math.exp(statistics.fmean(
            math.log(max(r["strategies"][name]["best_fraction"], 1e-9)) for r in rows))
        geo[f"{name}_median_trials_to_2pct"] = statistics.median(r["strategies"][name]["trials_to_2pct"] for r in rows)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "gpu": GPU, "prior_digest": prior.digest,
        "prior_samples": len(prior), "min_configs": min_configs, "seeds": seeds, "trials": trials, "batch": batch,
        "ahead": ahead, "only": list(only), "strategies": list(strategies), "problems": rows,
        "summary": {k: round(v, 4) for k, v in geo.items()},
    }


def render(r: dict[str, Any]) -> str:
    s = r["summary"]
    names = r.get("strategies", list(STRATEGIES))
    lines = [
        "# The cost model on shapes it did not learn from (leave-one-shape-out over the prior)",
        "",
        f"- {r['date']}; prior of {r['gpu']}: {r['prior_samples']} samples, digest {r['prior_digest']}; shapes with "
        f"at least {r['min_configs']} recorded configs; {r['seeds']} seeds, {r['trials']} trials in batches of "
        f"{r['batch']} asked {r['ahead']} ahead",
        f"- zero-trial pick (geomean fraction of the best recorded): top-1 **{s['top1']:.3f}**, best of top-8 "
        f"{s['top8']:.3f}",
        "- simulated jobs, best found (geomean fraction): "
        + ", ".join(f"{n} **{s[f'{n}_best_fraction']:.3f}**" for n in names)
        + "; median trials to within 2%: "
        + ", ".join(f"{n} {s[f'{n}_median_trials_to_2pct']}" for n in names),
        "",
        "| problem | dtype | recorded | best | top-1 | top-8 | predicted top-1 | "
        + " | ".join(f"{n} best / trials to 2%" for n in names) + " |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |" + " --- |" * len(names),
    ]
    for p in r["problems"]:
        runs = " | ".join(f"{p['strategies'][n]['best_fraction']:.3f} / {p['strategies'][n]['trials_to_2pct']}"
                          for n in names)
        lines.append(f"| {p['problem']} | {p['dtype']} | {p['recorded']} | {p['best']:.3f} | {p['top1']:.3f} | "
                     f"{p['top8']:.3f} | {p['predicted_top1']:.3f} | {runs} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-configs", type=int, default=24, help="shapes with at least this many recorded configs")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ahead", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=(), help="these shapes (MxNxK) alone")
    ap.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=STRATEGIES,
                    help="the simulated jobs to run (classic does not depend on the model)")
    ap.add_argument("--out", type=Path, default=None, help="writes OUT.json and OUT.md")
    args = ap.parse_args(argv)
    report = study(args.min_configs, args.seeds, args.trials, args.batch, args.ahead, args.only, args.strategies)
    text = render(report)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
