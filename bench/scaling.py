"""Scaling over GPUs: the same study run with 1, 2 (4, 8) GPUs, one runner actor per GPU.

    python -m bench.scaling 4096x4096x4096 --dtype float16 --trials 64 --gpus 1 2 --out bench/results

For each GPU count: a fresh database and a fresh (cold) build cache, the same problem and the
same Optuna seed, the service's own path (TirxBuilder on Ray CPUs, GpuRunner with that many
actors, JobLoop with its re-measurement of the top trials). Recorded per run: wall time, trials
per minute over the whole search (the first, cold build included), GPU seconds per candidate,
each GPU's busy fraction (time it held a candidate / the job's wall time up to its last
result), and the best config with its trial and re-measured ratios. Then the runs' winners are
re-measured interleaved in one process, so whether they agree is judged on figures that
compare, against the noise measured on this GPU (bench/results/noise.json).
Writes scaling.json and scaling.md under --out.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tirtune.core import Candidate
from tirtune.db import migrate, repo
from tirtune.db.session import open_database
from tirtune.space import HOPPER, Problem
from tirtune.tuner.job import JobLoop, Progress
from tirtune.workers.gpu_runner import GpuRunner, tvm_version
from tirtune.workers.tirx_builder import TirxBuilder

NOISE_FILE = Path(__file__).resolve().parent / "results" / "noise.json"


def _one(problem: Problem, trials: int, gpus: int, cpus: int, work: Path) -> dict[str, Any]:
    url = f"sqlite:///{work / f'scaling-{gpus}.db'}"
    migrate.upgrade(url)
    sessions = open_database(url)
    with sessions() as s, s.begin():
        job_id = repo.create_job(s, problem, HOPPER.arch, trials).id
    builder = TirxBuilder(cache_dir=work / f"cache-{gpus}")
    runner = GpuRunner(num_gpus=gpus, run_timeout_s=60)
    stamps: list[float] = []

    def progress(p: Progress) -> None:
        stamps.append(time.monotonic())

    batch = max(cpus, 4 * gpus)
    loop = JobLoop(sessions, url, HOPPER, builder, runner, batch_size=batch, on_progress=progress)
    began = time.monotonic()
    summary = loop.run(job_id)
    ended = time.monotonic()
    usage = runner.usage()
    runner.close()
    span = stamps[-1] - began
    best = summary.best
    remeasured = {r.measurement_id: r for r in summary.remeasured} if summary.remeasured else {}
    best_re = remeasured.get(best.id) if best is not None else None
    return {
        "gpus": gpus,
        "trials": summary.trials,
        "batch_size": batch,
        "wall_s": round(ended - began, 1),
        "search_s": round(span, 1),
        "trials_per_min": round(60 * summary.trials / span, 2),
        "gpu_s_per_candidate": round(sum(u.busy_s for u in usage) / max(1, sum(u.candidates for u in usage)), 2),
        "gpu_busy": [
            {
                "runner": u.label,
                "candidates": u.candidates,
                "busy_s": round(u.busy_s, 1),
                "busy_fraction": round(u.busy_s / span, 3),
            }
            for u in usage
        ],
        "busy_fraction_mean": round(sum(u.busy_s for u in usage) / (span * len(usage)), 3),
        "best": None
        if best is None
        else {
            "config": best.config.to_json(),
            "label": best.config.label(),
            "trial_tflops": best.tflops,
            "trial_ratio": best.ratio,
            "remeasured_tflops": None if best_re is None else best_re.tflops,
            "remeasured_ratio": None if best_re is None else best_re.ratio,
        },
        "message": summary.message,
    }


def _agreement(problem: Problem, runs: list[dict[str, Any]], work: Path) -> dict[str, Any]:
    """Re-measure every run's winner interleaved in one process (one GPU)."""
    from tirtune.space import Config

    winners = {json.dumps(r["best"]["config"], sort_keys=True): r["best"]["label"] for r in runs if r["best"]}
    configs = [Config.from_json(json.loads(c)) for c in winners]
    builds = TirxBuilder(cache_dir=work / "cache-agree").build(
        [Candidate(c, problem, HOPPER.template_version) for c in configs]
    )
    runner = GpuRunner(num_gpus=1, run_timeout_s=60)
    results = runner.remeasure(builds, 7) if len(builds) > 1 else runner.run(builds)
    runner.close()
    figures = [
        {"label": c.label(), "outcome": r.outcome.value, "tflops": r.tflops, "ratio": r.ratio}
        for c, r in zip(configs, results, strict=True)
    ]
    ratios = [f["ratio"] for f in figures if f["ratio"]]
    noise = None
    if NOISE_FILE.exists():
        data = json.loads(NOISE_FILE.read_text())
        noise = data.get("across_processes", {}).get("ratio", {}).get("p90_minus_p10")
    spread = (max(ratios) - min(ratios)) if ratios else None
    return {
        "winners": figures,
        "ratio_spread": spread,
        "noise_p10_p90": noise,
        "agree": None if spread is None else (len(ratios) == 1 or spread <= (noise or 0.02)),
    }


def measure_stage(
    problem: Problem, configs: list[Any], cache: Path, gpu_counts: list[int], repeat: int
) -> list[dict[str, Any]]:
    """The GPU side alone: the same prebuilt candidates (warm cache, so no build waits) measured
    by runners of 1, 2 ... actors; candidates per minute and each GPU's busy fraction."""
    builds = TirxBuilder(cache_dir=cache).build([Candidate(c, problem, HOPPER.template_version) for c in configs])
    builds = [b for b in builds if b.ok] * repeat
    rows = []
    for g in gpu_counts:
        runner = GpuRunner(num_gpus=g, run_timeout_s=60)
        began = time.monotonic()
        results = runner.run(builds)
        span = time.monotonic() - began
        usage = runner.usage()
        runner.close()
        rows.append(
            {
                "gpus": g,
                "candidates": len(builds),
                "seconds": round(span, 1),
                "candidates_per_min": round(60 * len(builds) / span, 1),
                "ok": sum(r.outcome.value == "OK" for r in results),
                "busy_fraction": [round(u.busy_s / span, 3) for u in usage],
                "per_gpu_candidates": [u.candidates for u in usage],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _environment() -> dict[str, Any]:
    import torch

    smi = (
        subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        .stdout.strip()
        .splitlines()
    )
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "gpus": smi,
        "driver": smi[0].split(", ")[1] if smi else "",
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "tvm": tvm_version(),
        "host": platform.node(),
    }


def _markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        f"# Scaling over GPUs: {report['problem']} {report['dtype']}, {report['trials']} trials per run",
        "",
        f"{env['date']}; {len(env['gpus'])} x {env['gpus'][0].split(', ')[0] if env['gpus'] else '?'}, "
        f"driver {env['driver']}, CUDA {env['cuda']}, torch {env['torch']}, TVM {env['tvm']}; "
        f"{report['cpus']} CPUs for builds; cold build cache per run.",
        "",
        "| GPUs | trials | search s | trials/min | GPU s/candidate | speed-up | GPU busy (each) | best | trial ratio "
        "| re-measured ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    base = report["runs"][0]["trials_per_min"]
    for r in report["runs"]:
        b = r["best"] or {}
        busy = ", ".join(f"{g['busy_fraction']:.2f}" for g in r["gpu_busy"])
        lines.append(
            f"| {r['gpus']} | {r['trials']} | {r['search_s']} | {r['trials_per_min']} | {r['gpu_s_per_candidate']} "
            f"| {r['trials_per_min'] / base:.2f}x | {busy} | {b.get('label', '-')} | {_f(b.get('trial_ratio'))} "
            f"| {_f(b.get('remeasured_ratio'))} |"
        )
    agree = report["agreement"]
    lines += [
        "",
        "Winners re-measured interleaved in one process (7 rounds, cuBLAS in every round):",
        "",
        "| winner | TFLOP/s | ratio to cuBLAS |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {w['label']} | {_f(w['tflops'], 1)} | {_f(w['ratio'])} |" for w in agree["winners"]]
    lines += [
        "",
        f"Spread of the winners' ratios: {_f(agree['ratio_spread'])}; noise (p10-p90 of one config's "
        f"ratio across processes): {_f(agree['noise_p10_p90'])}; agree within noise: {agree['agree']}.",
        "",
    ]
    return "\n".join(lines)


def _f(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out", default="bench/results")
    ap.add_argument(
        "--measure-only",
        nargs=2,
        metavar=("DB", "CACHE"),
        help="only time the measuring stage: the configs a previous run's DB measured, built from "
        "its CACHE, on each GPU count (add to an existing scaling.json under --out)",
    )
    ap.add_argument("--repeat", type=int, default=2, help="with --measure-only: each candidate this many times")
    ap.add_argument("--dump-after", type=float, default=0, help="dump every thread's stack after this many seconds")
    args = ap.parse_args()
    import faulthandler
    import logging

    import ray

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.dump_after:
        faulthandler.dump_traceback_later(args.dump_after, repeat=True)

    problem = Problem.parse(args.shape, args.dtype)
    ray.init(include_dashboard=False, log_to_driver=False)
    cpus = int(ray.cluster_resources().get("CPU", 1))
    out = Path(args.out)
    if args.measure_only:
        sessions = open_database(f"sqlite:///{args.measure_only[0]}")
        with sessions() as s:
            rows = repo.list_measurements(s, limit=100_000)
        configs = sorted({r.config for r in rows if r.outcome.value == "OK" and r.problem == problem})
        stage = measure_stage(problem, configs, Path(args.measure_only[1]), args.gpus, args.repeat)
        path = out / "scaling.json"
        report = json.loads(path.read_text()) if path.exists() else {}
        report["measure_stage"] = {
            "environment": _environment(),
            "distinct_configs": len(configs),
            "repeat": args.repeat,
            "runs": stage,
        }
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")
        return
    work = Path(tempfile.mkdtemp(prefix="tirtune-scaling-"))
    runs = []
    for g in args.gpus:
        print(f"--- {g} GPU(s)", flush=True)
        runs.append(_one(problem, args.trials, g, cpus, work))
        print(json.dumps(runs[-1]), flush=True)
    report = {
        "problem": problem.shape,
        "dtype": problem.dtype,
        "trials": args.trials,
        "cpus": cpus,
        "environment": _environment(),
        "runs": runs,
        "agreement": _agreement(problem, runs, work),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "scaling.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "scaling.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    main()
