"""How fast the tuner finds the best recorded config, against random search, with no GPU.

Replays recorded measurements (bench/data/*.jsonl, a sample of the space per problem) and runs,
per problem and seed, the service's own proposer the way a job does: batches of `--batch` asked
`--ahead` batches ahead of the one being measured, each told when it is measured:

- `local`: OptunaProposer from the job's starting points (its branch's `start_configs`) with its
  local search (`LOCAL_SHARE` of each batch one knob, here the fewest knobs, from the best so far),
  as `POST /tune` runs;
- `tpe`: the same with TPE alone (local_share 0, the service before the local search);
- `local-cold`, `tpe-cold`: the two without starting points (what each learns from the
  replies alone);
- `random`: the recorded configs in a seeded random order.

The space each searches is the recorded sample (`ReplayRunner.restrict`), so every trial is a
real measurement. Reported: the median over seeds of the best same-run ratio found after n trials as a
fraction of the best recorded, and the trials until within 2% of it (median; '>N' if not reached).

    python -m bench.tuner_study bench/data/hopper-gemm-3-*.jsonl --trials 64 --seeds 5 \
        --batch 16 --ahead 2          # bench/results/tuner-study/<date>-study.{json,md}
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.filing import dated
from tirtune.runner.replay_runner import ReplayRunner
from tirtune.space import Config, Problem
from tirtune.space.branches import branch
from tirtune.space.hopper import space_for
from tirtune.space.space import SearchSpace
from tirtune.tuner.optuna_proposer import LOCAL_SHARE, OptunaProposer
from tirtune.tuner.proposer import Feedback

STRATEGIES = ("local", "tpe", "local-cold", "tpe-cold", "random")
CHECKPOINTS = (1, 4, 8, 16, 32, 64, 128)
WITHIN = 0.98


def recorded_ratios(replay: ReplayRunner, problem: Problem) -> dict[Config, float]:
    """The same-run ratio to cuBLAS of every correct recorded config, the service's objective
    (failures count as 0 when proposed)."""
    out = {}
    for config in replay.configs(problem):
        data = replay.recorded(problem, config)
        if data is not None and data["outcome"] == "OK" and data.get("time_ms") and data.get("cublas_ms"):
            out[config] = data["cublas_ms"] / data["time_ms"]
    return out


def tpe_trace(
    space: SearchSpace, problem: Problem, score: dict[Config, float], trials: int, seed: int, *,
    warm: bool, local_share: float, batch: int, ahead: int,
) -> list[float]:
    """The score (same-run ratio) of each trial in the order a job would measure them: `ahead`
    batches asked before the oldest is told (JobLoop's order)."""
    trace: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        proposer = OptunaProposer(
            f"sqlite:///{tmp}/study.db",
            "study",
            space,
            seed=seed,
            start_with=branch(space.arch).start_configs(problem) if warm else (),
            problem=problem,
            local_share=local_share,
        )
        asked = 0
        pending: list[list[Any]] = []
        while True:
            while len(pending) < ahead and asked < trials:
                proposals = proposer.ask(min(batch, trials - asked))
                if not proposals:
                    break  # every recorded config was tried
                asked += len(proposals)
                pending.append(proposals)
            if not pending:
                break
            feedback = []
            for p in pending.pop(0):
                ratio = score.get(p.config)
                trace.append(ratio or 0.0)
                feedback.append(Feedback(p.trial, ratio, "OK" if ratio else "WRONG_RESULT"))
            proposer.tell(feedback)
    return trace


def random_trace(
    space: SearchSpace, problem: Problem, score: dict[Config, float], trials: int, seed: int
) -> list[float]:
    configs = space.valid_configs(problem)
    random.Random(seed).shuffle(configs)
    return [score.get(c, 0.0) for c in configs[:trials]]


def summarize(traces: list[list[float]], best: float, trials: int) -> dict[str, Any]:
    fractions = {}
    for n in CHECKPOINTS:
        if n <= trials:
            fractions[str(n)] = round(statistics.median(max(t[:n], default=0.0) / best for t in traces), 4)
    reached = []
    for t in traces:
        hit = next((i + 1 for i, v in enumerate(t) if v >= WITHIN * best), None)
        reached.append(hit if hit is not None else trials + 1)
    med = statistics.median(reached)
    return {
        "best_fraction_after": fractions,
        "trials_to_within_2pct": reached,
        "median_trials_to_within_2pct": med if med <= trials else f">{trials}",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="+", help="recorded .jsonl files (one problem each, or several)")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16, help="a job's batch (one per CPU on a GPU host: 16)")
    ap.add_argument("--ahead", type=int, default=2, help="batches asked ahead of the one measured (JobLoop: 2)")
    ap.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    ap.add_argument("--out", default=None,
                    help="writes OUT.json and OUT.md (default: bench/results/tuner-study/<date>-study)")
    args = ap.parse_args()
    replay = ReplayRunner(args.data)
    space = replay.restrict(space_for(replay.template_version))
    rows = []
    began = time.monotonic()
    for problem in sorted(replay.problems(), key=lambda p: (p.shape, p.dtype)):
        score = recorded_ratios(replay, problem)
        if not score:
            continue
        best_config, best = max(score.items(), key=lambda kv: kv[1])
        row: dict[str, Any] = {
            "problem": problem.shape,
            "dtype": problem.dtype,
            "recorded": len(replay.configs(problem)),
            "correct": len(score),
            "best_recorded": {"config": best_config.label(), "ratio": round(best, 3)},
            "starts_recorded": sum(c in score for c in branch("sm_90a").start_configs(problem)),
            "strategies": {},
        }
        for name in args.strategies:
            traces = []
            for seed in range(args.seeds):
                if name == "random":
                    traces.append(random_trace(space, problem, score, args.trials, seed))
                else:
                    traces.append(tpe_trace(space, problem, score, args.trials, seed, warm=not name.endswith("-cold"),
                                            local_share=LOCAL_SHARE if name.startswith("local") else 0.0,
                                            batch=args.batch, ahead=args.ahead))
            row["strategies"][name] = summarize(traces, best, args.trials)
            print(f"{time.monotonic() - began:.0f}s {problem} {name}: {row['strategies'][name]}", flush=True)
        rows.append(row)
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "data": [str(p) for p in args.data],
        "template_version": replay.template_version,
        "measured_on": replay.stack().to_json(),
        "trials": args.trials,
        "seeds": args.seeds,
        "batch": args.batch,
        "ahead": args.ahead,
        "local_share": LOCAL_SHARE,
        "problems": rows,
    }
    out = Path(args.out) if args.out else dated("tuner-study", "study")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(render(report))
    print(out.with_suffix(".md").read_text())
    return 0


def render(report: dict[str, Any]) -> str:
    stack = report["measured_on"]
    checkpoints = [str(n) for n in CHECKPOINTS if n <= report["trials"]]
    lines = [
        f"# Tuner study on recorded measurements ({report['template_version']})",
        "",
        f"{report['date']}; replayed from {', '.join(report['data'])} (measured on {stack['gpu_name']}, driver "
        f"{stack['driver']}, CUDA {stack['cuda']}, TVM {stack['tvm']}). Per problem and strategy, the median "
        f"over {report['seeds']} seeds of the best same-run ratio found after n trials, as a fraction of the best "
        f"recorded config; batches of {report['batch']} asked {report.get('ahead', 1)} ahead, as a job asks them. "
        f"`local`: the service's proposer from the job's starting points, {report.get('local_share', 0)} of each "
        "batch after them near the best so far; `tpe`: the same with TPE alone; `local-cold`, `tpe-cold`: the two "
        "without starting points; `random`: recorded configs in random order.",
        "",
        "| problem | dtype | recorded (correct) | best recorded | strategy | "
        + " | ".join(f"n={n}" for n in checkpoints)
        + " | trials to 98% (median) |",
        "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in checkpoints) + " | --- |",
    ]
    for r in report["problems"]:
        for name, s in r["strategies"].items():
            cells = " | ".join(f"{s['best_fraction_after'][n]:.3f}" for n in checkpoints)
            best = r["best_recorded"]
            lines.append(
                f"| {r['problem']} | {r['dtype']} | {r['recorded']} ({r['correct']}) | {best['config']} "
                f"({best['ratio']}x) | {name} | {cells} | {s['median_trials_to_within_2pct']} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
