"""Scaling over GPUs: the same studies run with 1 and 2 (4, 8) GPUs, one runner actor per GPU.

    python -m bench.scaling 4096x4096x4096:float16 16x4096x4096:float16 --trials 64 --gpus 1 2 \
        --caches cold warm --build-path cubin     # OUT/scaling.{json,md}, OUT: bench/results/scaling

For each problem and GPU count: a cold study (a fresh database and an empty build cache), then, with
--caches warm, the same study again on a fresh database over the cache the cold one filled (same
Optuna seed: the same proposals, every build a cache hit). Each study is the service's own path: the
builder of --build-path (TirxBuilder's .so, or CubinBuilder's device-only cubin with its persistent
lowering processes), GpuRunner with that many actors, JobLoop with its re-measurement of the top
trials. Recorded per study: wall time, trials per minute over the whole search (the first build
included), GPU seconds per candidate, each GPU's busy fraction (time it held a candidate / the
search's span), and the best config with its trial and re-measured ratios. Then every problem's
winners are re-measured interleaved in one process, so whether the 1- and 2-GPU bests agree is
judged on figures that compare, against the noise measured on this GPU
(bench/results/measurement/2026-11-29-noise.json). --cpus sets the build processes (default: as the
service, the CPUs less two a GPU, `cubin_builder.build_processes`; 14 is what the service runs on
one 16-core H200 host, so `--cpus 14` stands for that host on a 32-core one). --suite-trials N then
queues the suite's twenty problems at once on a service (bench/suite.py) that sees 2, then 1 ...
GPUs and runs --suite-jobs jobs per GPU at a time (TIRTUNE_CONCURRENT_JOBS), and records each run's
wall time; the suites run first, most GPUs first, each keeping its own report and database
(suite-2gpu.json, .sqlite) beside scaling.json. Writes scaling.json and scaling.md under --out
(filed as bench/results/scaling/<date>-<what>.{json,md}) after every study and suite run; each
study's database (every trial with its config and outcome) is kept under OUT/studies/. The full
study on a two-GPU host (nvidia-h200-x2), in the background (14 build processes: what the service
runs on one 16-core H200 host, so the 1-GPU cold 4096^3 study is also the cold-study target's,
docs/perf-notes.md "Targets"):

    bash bench/gpu_session.sh bg scaling "TIRTUNE_BUILD_PATH=cubin python3 -m bench.scaling \
        4096x4096x4096:float16 16x4096x4096:float16 --trials 64 --gpus 1 2 --caches cold warm \
        --build-path cubin --cpus 14 --suite-trials 16 --out /root/tirtune/scaling"
    bash bench/gpu_session.sh collect scaling
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tirtune.builder.cubin_builder import build_processes
from tirtune.builder.tirx_builder import TirxBuilder
from tirtune.core import Candidate
from tirtune.db import migrate, repo
from tirtune.db.session import open_database
from tirtune.runner.gpu_runner import GpuRunner, tvm_version
from tirtune.space import HOPPER, Problem
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.tuner.job import JobLoop, Progress

NOISE_FILE = Path(__file__).resolve().parent / "results" / "measurement" / "2026-11-29-noise.json"


def _builder(kind: str, cache: Path, cpus: int) -> Any:
    if kind == "cubin":
        from tirtune.builder.cubin_builder import CubinBuilder

        return CubinBuilder(cache_dir=cache, processes=cpus, warm=True)  # as the service makes it
    return TirxBuilder(cache_dir=cache)


def _study(problem: Problem, trials: int, gpus: int, cpus: int, cache: Path, db: Path, build_path: str,
           cold: bool) -> dict[str, Any]:
    url = f"sqlite:///{db}"
    migrate.upgrade(url)
    sessions = open_database(url)
    with sessions() as s, s.begin():
        job_id = repo.create_job(s, problem, HOPPER.arch, trials).id
    setup_began = time.monotonic()
    builder = _builder(build_path, cache, cpus)
    runner = GpuRunner(num_gpus=gpus, run_timeout_s=60)
    setup_s = time.monotonic() - setup_began  # the GPU actors' start (the builder's warms meanwhile)
    stamps: list[float] = []

    def progress(p: Progress) -> None:
        stamps.append(time.monotonic())

    batch = max(cpus, 4 * gpus)
    loop = JobLoop(sessions, url, HOPPER, builder, runner, batch_size=batch, on_progress=progress)
    began = time.monotonic()
    try:
        summary = loop.run(job_id)
    finally:
        if hasattr(builder, "close"):
            builder.close()
    ended = time.monotonic()
    usage = runner.usage()
    runner.close()
    span = (stamps[-1] if stamps else ended) - began
    best = summary.best
    remeasured = {r.measurement_id: r for r in summary.remeasured} if summary.remeasured else {}
    best_re = remeasured.get(best.id) if best is not None else None
    return {
        "problem": problem.shape,
        "dtype": problem.dtype,
        "gpus": gpus,
        "cache": "cold" if cold else "warm",
        "build_path": build_path,
        "cpus": cpus,
        "trials": summary.trials,
        "batch_size": batch,
        "wall_s": round(ended - began, 1),
        "setup_s": round(setup_s, 1),  # before the job: Ray's GPU actors started, not in wall_s
        "search_s": round(span, 1),
        "trials_per_min": round(60 * summary.trials / span, 2),
        "gpu_s_per_candidate": round(sum(u.busy_s for u in usage) / max(1, sum(u.candidates for u in usage)), 2),
        "gpu_busy": [round(u.busy_s / span, 3) for u in usage],
        "gpu_detail": [
            {"runner": u.label, "candidates": u.candidates, "busy_s": round(u.busy_s, 1)} for u in usage
        ],
        "best_config": None if best is None else best.config.to_json(),
        "best_label": None if best is None else best.config.label(),
        "best_trial_ratio": None if best is None else best.ratio,
        "best_ratio": None if best_re is None else best_re.ratio,
        "best_tflops": None if best_re is None else best_re.tflops,
        # The same-run cuBLAS figure beside it: the re-measurement's own cuBLAS time.
        "best_cublas_tflops": None if best_re is None or not best_re.cublas_ms else problem.tflops(best_re.cublas_ms),
        "message": summary.message,
    }


def _agreement(problem: Problem, runs: list[dict[str, Any]], work: Path, build_path: str) -> dict[str, Any]:
    """Re-measure every run's winner of `problem` interleaved in one process (one GPU)."""
    from tirtune.space import Config

    winners = {json.dumps(r["best_config"], sort_keys=True) for r in runs if r["best_config"]}
    configs = [Config.from_json(json.loads(c), HOPPER_KNOBS) for c in sorted(winners)]
    builder = _builder(build_path, work / "cache-agree", 4)
    try:
        builds = builder.build([Candidate(c, problem, HOPPER.template_version) for c in configs])
    finally:
        if hasattr(builder, "close"):
            builder.close()
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
        "problem": problem.shape,
        "dtype": problem.dtype,
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


def _suite(gpus: int, trials: int, jobs: int, work: Path, build_path: str, keep: Path) -> dict[str, Any]:
    """The suite's twenty problems queued at once on a service that sees `gpus` GPUs and runs
    `jobs` jobs at a time (bench/suite.py, its own `tirtune serve` and database)."""
    import os
    import sys

    out = work / f"suite-{gpus}"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus)),
           "TIRTUNE_CONCURRENT_JOBS": str(jobs), "TIRTUNE_BUILD_PATH": build_path}
    print(f"--- the suite on {gpus} GPU(s), {jobs} jobs at once, {trials} trials each", flush=True)
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "bench.suite", "--trials", str(trials), "--out", str(out)],
                          env=env, check=False, capture_output=True, text=True)
    wall = time.monotonic() - began
    result = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else {}
    keep.mkdir(parents=True, exist_ok=True)
    for suffix in (".json", ".md", ".serve.log", ".sqlite"):  # each run's own report and trials, beside scaling.json
        if out.with_suffix(suffix).exists():
            (keep / f"suite-{gpus}gpu{suffix}").write_bytes(out.with_suffix(suffix).read_bytes())
    problems = result.get("problems", [])
    row = {
        "gpus": gpus, "concurrent_jobs": jobs, "trials_per_problem": trials, "wall_s": round(wall, 1),
        "problems": len(problems), "measured": sum(1 for r in problems if r.get("ratio")),
        "geomean": result.get("geomean"), "exit_code": done.returncode,
    }
    if done.returncode != 0:
        row["stderr_tail"] = done.stderr[-2000:]
    print(json.dumps(row), flush=True)
    return row


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
        f"# Scaling over GPUs: {report['trials']} trials per study, {report['build_path']} build path",
        "",
        f"{env['date']}; {len(env['gpus'])} x {env['gpus'][0].split(', ')[0] if env['gpus'] else '?'}, "
        f"driver {env['driver']}, CUDA {env['cuda']}, torch {env['torch']}, TVM {env['tvm']}; "
        f"{report['cpus']} build processes. Cold: fresh database and empty build cache; warm: fresh database, "
        "the cache the cold study filled. Wall: the job, from its first proposal to its best named (the "
        "top trials' re-measurement included; Ray's GPU actors started before it); search: to the last "
        "trial's result.",
        "",
        "| problem | dtype | GPUs | cache | trials | wall s | search s | trials/min | speed-up | GPU s/candidate "
        "| GPU busy (each) | best | trial ratio | re-measured ratio |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |",
    ]
    base = {(r["problem"], r["dtype"], r["cache"]): r["trials_per_min"] for r in report["studies"] if r["gpus"] == 1}
    for r in report["studies"]:
        one = base.get((r["problem"], r["dtype"], r["cache"]))
        speedup = f"{r['trials_per_min'] / one:.2f}x" if one else "-"
        busy = ", ".join(f"{b:.2f}" for b in r["gpu_busy"])
        lines.append(
            f"| {r['problem']} | {r['dtype']} | {r['gpus']} | {r['cache']} | {r['trials']} | {r['wall_s']} "
            f"| {r.get('search_s', '-')} | {r['trials_per_min']} | {speedup} | {r['gpu_s_per_candidate']} | {busy} "
            f"| {r['best_label'] or '-'} "
            f"| {_f(r['best_trial_ratio'])} | {_f(r['best_ratio'])} |"
        )
    for agree in report["agreement"]:
        lines += [
            "",
            f"{agree['problem']} {agree['dtype']}: the studies' winners re-measured interleaved in one process "
            "(7 rounds, cuBLAS in every round):",
            "",
            "| winner | TFLOP/s | ratio to cuBLAS |",
            "| --- | ---: | ---: |",
        ]
        lines += [f"| {w['label']} | {_f(w['tflops'], 1)} | {_f(w['ratio'])} |" for w in agree["winners"]]
        lines += [
            "",
            f"Spread of the winners' ratios: {_f(agree['ratio_spread'])}; noise (p10-p90 of one config's "
            f"ratio across processes): {_f(agree['noise_p10_p90'])}; agree within noise: {agree['agree']}.",
        ]
    if report.get("suite"):
        base = next((r["wall_s"] for r in report["suite"] if r["gpus"] == 1), None)
        lines += ["", "The suite's twenty problems queued at once on a service of that many GPUs:", "",
                  "| GPUs | jobs at once | trials each | wall s | speed-up | measured | geomean |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        lines += [f"| {r['gpus']} | {r['concurrent_jobs']} | {r['trials_per_problem']} | {r['wall_s']} "
                  f"| {_x(base, r['wall_s'])} | {r['measured']} of {r['problems']} | {_f(r['geomean'])} |"
                  for r in report["suite"]]
    return "\n".join(lines) + "\n"


def _x(base: float | None, wall: float) -> str:
    return f"{base / wall:.2f}x" if base else "-"


def _f(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problems", nargs="*", help="MxNxK or MxNxK:dtype (default dtype: --dtype)")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out", default="bench/results/scaling")
    ap.add_argument("--caches", nargs="+", choices=("cold", "warm"), default=["cold", "warm"],
                    help="per GPU count: a cold study, then (warm) the same over the cache it filled")
    ap.add_argument("--build-path", choices=("so", "cubin"), default=None,
                    help="default: the service's own (TIRTUNE_BUILD_PATH)")
    ap.add_argument("--cpus", type=int, default=0,
                    help="build processes (default: the CPUs Ray sees less two a GPU, as the service)")
    ap.add_argument("--no-agreement", action="store_true", help="skip re-measuring the winners together")
    ap.add_argument("--suite-trials", type=int, default=0,
                    help="also the 20 suite problems as concurrent jobs (bench/suite.py, this many trials each) "
                    "through a service on each GPU count of --gpus")
    ap.add_argument("--suite-jobs", type=int, default=2, help="jobs the service runs at once per GPU")
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

    problems = [Problem.parse(*(p.split(":") if ":" in p else (p, args.dtype))) for p in args.problems]
    problem = problems[0] if problems else None
    if args.build_path is None:
        from tirtune.settings import get_settings

        args.build_path = get_settings().build_path
    ray.init(include_dashboard=False, log_to_driver=False, **({"num_cpus": args.cpus} if args.cpus else {}))
    cpus = int(ray.cluster_resources().get("CPU", 1))
    build_cpus = args.cpus or build_processes(cpus, max(args.gpus))  # as the service leaves cores to its runners
    out = Path(args.out)
    if args.measure_only:
        if problem is None:
            ap.error("--measure-only needs the problem")
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
    env = _environment()  # the run's start
    report: dict[str, Any] = {
        "date": env["date"], "gpu": env["gpus"][0].split(", ")[0] if env["gpus"] else None, "environment": env,
        "trials": args.trials, "cpus": build_cpus, "build_path": args.build_path,
        "studies": [], "agreement": [], "suite": [],
    }

    def write() -> None:
        """The report so far (after every study and suite run: a run cut short keeps what it measured)."""
        out.mkdir(parents=True, exist_ok=True)
        (out / "scaling.json").write_text(json.dumps(report, indent=2) + "\n")
        (out / "scaling.md").write_text(_markdown(report))

    if args.suite_trials:
        # The suites first, most GPUs first (each suite's service starts its own Ray, seeing only its
        # GPUs); the studies' Ray after them.
        ray.shutdown()
        for g in sorted(args.gpus, reverse=True):
            report["suite"].append(_suite(g, args.suite_trials, args.suite_jobs * g, work, args.build_path, out))
            report["suite"].sort(key=lambda r: r["gpus"])
            write()
        ray.init(include_dashboard=False, log_to_driver=False, **({"num_cpus": args.cpus} if args.cpus else {}))
    for problem in problems:
        runs = []
        for g in args.gpus:
            name = f"{problem.shape}-{problem.dtype}-{g}"
            for n, cache in enumerate(args.caches):
                print(f"--- {problem} on {g} GPU(s), {cache} cache", flush=True)
                db = work / f"{name}-{n}.db"
                runs.append(_study(problem, args.trials, g, build_cpus, work / f"cache-{name}", db,
                                   args.build_path, cold=cache == "cold"))
                # Every trial with its config and outcome (a failed check's config included), kept.
                (out / "studies").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(db, out / "studies" / f"{name}gpu-{cache}.sqlite")
                print(json.dumps(runs[-1]), flush=True)
                report["studies"].append(runs[-1])
                write()
        if not args.no_agreement:
            report["agreement"].append(_agreement(problem, runs, work, args.build_path))
            write()
    write()
    print(_markdown(report))


if __name__ == "__main__":
    main()
