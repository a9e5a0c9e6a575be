"""Measurement noise on this GPU, as the protocol sees it (docs/measurement.md).

1. One config timed in `--processes` separate measuring processes (a fresh ChildSupervisor each:
   new CUDA context, new warm-up), each giving kernel and cuBLAS medians and their ratio: the
   spread of the ratio between processes is what a single trial's figure is worth.
2. The top configs of the recorded study (bench/data), first measured one after another as trials
   are, then re-measured interleaved (`RemeasureRequest`, the job's last step) `--repeats` times
   in one process: do the interleaved rankings agree with each other, and with the trials'?

Writes noise.json. No Ray: builds run as plain subprocesses, measurements in supervised children.

    python -m bench.noise            # ~2-3 min on the H200: bench/results/measurement/noise.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tirtune.builder.tirx_builder import compile_candidate
from tirtune.core import BuildResult, Candidate, RunResult, Stack
from tirtune.runner.gpu_runner import reply_to_result, tvm_version
from tirtune.runner.measure import MeasureReply, MeasureRequest, RemeasureReply, RemeasureRequest
from tirtune.runner.supervisor import ChildSupervisor
from tirtune.settings import get_settings
from tirtune.space import HOPPER, Config, Problem
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.space.hopper.knobs import config as hopper_config

ROOT = Path(__file__).resolve().parents[1]
BEST = hopper_config(blk_m=128, blk_n=256, blk_k=64, stages=4, consumers=2, warp_specialized=True)


def _spread(values: list[float]) -> dict[str, float]:
    """min, p10, median, p90, max (nearest-rank percentiles) of a few figures."""
    ordered = sorted(values)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]

    return {"min": ordered[0], "p10": pct(0.1), "median": statistics.median(ordered), "p90": pct(0.9),
            "max": ordered[-1], "p90_minus_p10": pct(0.9) - pct(0.1), "n": len(ordered)}


def _build(candidates: list[Candidate], cache_dir: Path) -> list[BuildResult]:
    with ThreadPoolExecutor(len(candidates)) as pool:
        builds = list(pool.map(lambda c: compile_candidate(c, str(cache_dir), 600.0), candidates))
    failed = [b for b in builds if not b.ok]
    if failed:
        raise SystemExit(f"build failed: {failed[0].candidate.config.label()}: {failed[0].message}")
    return builds


def _stack(info: dict[str, Any]) -> Stack:
    return Stack(info["gpu_name"], info.get("driver", ""), info.get("cuda", ""), tvm_version(),
                 info.get("compute_capability", ""))


def _row(result: RunResult) -> dict[str, Any]:
    p = result.provenance
    return {"label": result.candidate.config.label(), "outcome": result.outcome.value, "message": result.message,
            "time_ms": result.time_ms, "time_p10_ms": result.time_p10_ms, "time_p90_ms": result.time_p90_ms,
            "cublas_ms": result.cublas_ms, "ratio": result.ratio, "tflops": result.tflops,
            "repetitions": result.repetitions, "sm_clock_mhz": p.sm_clock_mhz if p else None,
            "power_w": p.power_w if p else None}


def across_processes(build: BuildResult, processes: int) -> dict[str, Any]:
    p = build.candidate.problem
    rows = []
    for i in range(processes):
        sup = ChildSupervisor(run_timeout_s=120.0)
        try:
            info = sup.start()
            reply = sup.measure(MeasureRequest(build.artifact or "", p.m, p.n, p.k, p.dtype, seed=i))
        finally:
            sup.close()
        assert isinstance(reply, MeasureReply)
        result = reply_to_result(build, reply, _stack(info), info.get("torch", ""), i)
        within = (result.cublas_ms / result.time_p90_ms, result.cublas_ms / result.time_p10_ms) \
            if result.cublas_ms and result.time_p10_ms and result.time_p90_ms else None
        rows.append({**_row(result), "process": i, "ratio_within_p90_p10": within})
        print(f"process {i}: {result.outcome.value} ratio {result.ratio or 0:.4f} clock {rows[-1]['sm_clock_mhz']} "
              f"power {rows[-1]['power_w']}", flush=True)
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    return {"config": build.candidate.config.label(), "processes": rows,
            "ratio": _spread(ratios) if ratios else None,
            "kernel_ms": _spread([r["time_ms"] for r in rows if r["time_ms"]]) if ratios else None,
            "cublas_ms": _spread([r["cublas_ms"] for r in rows if r["cublas_ms"]]) if ratios else None}


def interleaved_top(builds: list[BuildResult], recorded: dict[str, float], repeats: int, rounds: int) -> dict[str, Any]:
    p = builds[0].candidate.problem
    sup = ChildSupervisor(run_timeout_s=120.0)
    try:
        info = sup.start()
        stack, torch_version = _stack(info), info.get("torch", "")
        trials = []
        for i, b in enumerate(builds):  # one after another, as a study's trials are measured
            reply = sup.measure(MeasureRequest(b.artifact or "", p.m, p.n, p.k, p.dtype, seed=100 + i))
            assert isinstance(reply, MeasureReply)
            trials.append(_row(reply_to_result(b, reply, stack, torch_version, 100 + i)))
        sessions = []
        for r in range(repeats):
            request = RemeasureRequest(tuple(b.artifact or "" for b in builds), p.m, p.n, p.k, p.dtype, 200 + r, rounds)
            reply = sup.measure(request, timeout_s=600.0)
            replies = reply.replies if isinstance(reply, RemeasureReply) else tuple(reply for _ in builds)
            sessions.append([_row(reply_to_result(b, x, stack, torch_version, 200 + r))
                             for b, x in zip(builds, replies, strict=True)])
    finally:
        sup.close()
    labels = [b.candidate.config.label() for b in builds]

    def rank(rows: list[dict[str, Any]]) -> list[str]:
        return [r["label"] for r in sorted(rows, key=lambda r: -(r["ratio"] or 0))]

    return {"configs": labels, "recorded_ratio": recorded, "trials_one_after_another": trials,
            "trial_ranking": rank(trials), "interleaved": sessions, "interleaved_rankings": [rank(s) for s in sessions],
            "winner_agreement": _agreement([rank(s)[0] for s in sessions]), "rounds": rounds,
            "ratio_spread_per_config": {label: _spread([s[i]["ratio"] for s in sessions if s[i]["ratio"]])
                                        for i, label in enumerate(labels)}}


def _agreement(winners: list[str]) -> dict[str, Any]:
    most = max(set(winners), key=winners.count)
    return {"winner": most, "times": winners.count(most), "of": len(winners)}


def _top(problem: Problem, data: Path, n: int) -> tuple[list[Config], dict[str, float]]:
    """The `n` fastest configs of the recorded study of `problem`, with their recorded ratio."""
    rows = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    ok = sorted((r for r in rows if r["outcome"] == "OK" and Problem(**r["problem"]) == problem
                 and r["template_version"] == HOPPER.template_version), key=lambda r: r["time_ms"])[:n]
    configs = [Config.from_json(r["config"], HOPPER_KNOBS) for r in ok]
    return configs, {c.label(): r["cublas_ms"] / r["time_ms"] for c, r in zip(configs, ok, strict=True)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4096x4096x4096")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved re-measurements of the top configs")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--data", default=str(ROOT / "bench" / "data" / "hopper-4096x4096x4096-float16.jsonl"))
    ap.add_argument("--out", default="bench/results/measurement")
    args = ap.parse_args()
    began = time.monotonic()
    problem = Problem.parse(args.shape, args.dtype)
    top, recorded = _top(problem, Path(args.data), args.top)
    configs = [BEST, *[c for c in top if c != BEST]]
    builds = _build([Candidate(c, problem, HOPPER.template_version) for c in configs], get_settings().cache_dir)
    by_config = {b.candidate.config: b for b in builds}
    print(f"built {len(builds)} in {time.monotonic() - began:.0f}s", flush=True)
    report = {"problem": problem.shape, "dtype": problem.dtype,
              "across_processes": across_processes(by_config[BEST], args.processes),
              "top": interleaved_top([by_config[c] for c in top], recorded, args.repeats, args.rounds)}
    report["elapsed_s"] = round(time.monotonic() - began, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "noise.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({"ratio_across_processes": report["across_processes"]["ratio"],
                      "winner_agreement": report["top"]["winner_agreement"],
                      "trial_ranking": report["top"]["trial_ranking"],
                      "interleaved_rankings": report["top"]["interleaved_rankings"],
                      "elapsed_s": report["elapsed_s"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
