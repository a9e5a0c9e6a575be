"""Fault injection on the GPU: a study of good configs with broken kernels mixed in.

Through the service's own path (TirxBuilder on Ray CPU tasks, GpuRunner actor with its
supervised measuring child), measures `--good` valid configs of the Hopper space and the
test-only faulty kernels of bench/faults/kernels.py (deadlock, out-of-bounds write, illegal
address, wrong result, ptxas failure, too much shared memory), interleaved. Every result is
stored (SQLite, `faults.db`) and written to `faults.json`; the study passes when each fault got
its expected outcome, every good config measured OK, and the GPU still works afterwards (a good
config measured again, a torch matmul in a fresh process).

    python -m bench.fault_study            # ~3-4 min on the H200: bench/results/measurement/faults.json
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.faults.kernels import FAULTS
from tirtune.builder.tirx_builder import TirxBuilder
from tirtune.core import BuildResult, Candidate, Outcome, RunResult
from tirtune.db import open_database, repo, transaction
from tirtune.runner.gpu_runner import GpuRunner
from tirtune.settings import get_settings
from tirtune.space import HOPPER, Problem
from tirtune.tuner.runtime import start_ray

TORCH_CHECK = ("import torch; a = torch.randn(4096, 4096, device='cuda', dtype=torch.float16); "
               "c = (a @ a.T).float(); ref = a.float() @ a.float().T; torch.cuda.synchronize(); "
               "print(float((c - ref).norm() / ref.norm()))")


@dataclass(frozen=True)
class Item:
    kind: str  # "good" or a fault kind
    candidate: Candidate
    template: str
    expected: str
    message_has: str = ""


def _items(problem: Problem, good: int) -> list[Item]:
    configs = random.Random(0).sample(HOPPER.valid_configs(problem), good)
    goods = [Item("good", Candidate(c, problem, HOPPER.template_version), "tirtune.kernels.hopper:build",
                  Outcome.OK.value) for c in configs]
    faults = [Item(kind, Candidate(f.config, problem, f"{HOPPER.template_version}+fault:{kind}"),
                   f"bench.faults.kernels:{kind}", f.expected, f.message_has) for kind, f in FAULTS.items()]
    # Spread the faults through the study: each lands between good configs, mid-batch.
    order = list(goods)
    step = max(1, len(goods) // (len(faults) + 1))
    for i, fault in enumerate(faults):
        order.insert(i * (step + 1) + step // 2, fault)
    return order


def _build(items: list[Item], cache_dir: Path, timeout_s: float) -> dict[Candidate, BuildResult]:
    by_template: dict[str, list[Candidate]] = {}
    for item in items:
        by_template.setdefault(item.template, []).append(item.candidate)
    with ThreadPoolExecutor(len(by_template)) as pool:
        futures = [pool.submit(TirxBuilder(cache_dir=cache_dir, timeout_s=timeout_s, template=t).build, cands)
                   for t, cands in by_template.items()]
        return {b.candidate: b for f in futures for b in f.result()}


def _row(item: Item, build: BuildResult, result: RunResult) -> dict[str, Any]:
    passed = result.outcome.value == item.expected and item.message_has in result.message
    return {"kind": item.kind, "label": item.candidate.config.label(), "config": item.candidate.config.to_json(),
            "template": item.template, "expected": item.expected, "got": result.outcome.value,
            "message": result.message[:400], "pass": passed, "build_s": round(build.seconds, 1),
            "cached_build": build.cached, "time_ms": result.time_ms, "ratio": result.ratio,
            "rel_error": result.rel_error}


def _gpu_usable(runner: GpuRunner, good: BuildResult) -> dict[str, Any]:
    [again] = runner.run([good])
    torch = _run([sys.executable, "-c", TORCH_CHECK])
    smi = _run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu",
                "--format=csv,noheader"])
    try:
        torch_ok = torch[0] == 0 and float(torch[1].strip().splitlines()[-1]) < 1e-2
    except (ValueError, IndexError):
        torch_ok = False
    return {"good_config_again": again.outcome.value, "ratio_again": again.ratio, "torch_mm_ok": torch_ok,
            "torch_output": torch[1][-300:], "nvidia_smi": smi[1].strip(),
            "usable": again.outcome is Outcome.OK and torch_ok}


def _run(cmd: list[str]) -> tuple[int, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        return proc.returncode, proc.stdout + proc.stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, f"{type(exc).__name__}: {exc}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4096x4096x4096")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--good", type=int, default=50)
    ap.add_argument("--run-timeout", type=float, default=20.0, help="watchdog per candidate (the deadlock waits this)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out", default="bench/results/measurement")
    args = ap.parse_args()
    began = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = get_settings()
    problem = Problem.parse(args.shape, args.dtype)
    start_ray(settings)
    runner = GpuRunner(num_gpus=1, run_timeout_s=args.run_timeout)
    stack = runner.stack()
    items = _items(problem, args.good)
    builds = _build(items, settings.cache_dir, settings.build_timeout_s)
    print(f"built {len(builds)} candidates in {time.monotonic() - began:.0f}s", flush=True)
    db_path = out / "faults.db"
    db_path.unlink(missing_ok=True)
    sessions = open_database(f"sqlite:///{db_path}")
    rows: list[dict[str, Any]] = []
    for start in range(0, len(items), args.batch):
        chunk = items[start:start + args.batch]
        chunk_builds = [builds[i.candidate] for i in chunk]
        runnable = [b for b in chunk_builds if b.ok]
        measured = iter(runner.run(runnable))
        for item, build in zip(chunk, chunk_builds, strict=True):
            result = next(measured) if build.ok else RunResult.failed(item.candidate, build.outcome, build.message)
            with transaction(sessions) as s:
                repo.record_measurement(s, job_id=None, trial_number=None, key=item.candidate.measurement_key(stack),
                                        candidate=item.candidate, outcome=result.outcome, message=result.message,
                                        result=result, build_seconds=build.seconds)
            rows.append(_row(item, build, result))
            print(f"{item.kind:>16} {item.candidate.config.label():<24} {result.outcome.value:<13} "
                  f"{result.message[:90]}", flush=True)
    good_ok = [r for r in rows if r["kind"] == "good" and r["got"] == "OK"]
    usable = _gpu_usable(runner, builds[next(i.candidate for i in items if i.kind == "good")])
    with transaction(sessions) as s:
        stored = repo.count_measurements(s)
    faults = [r for r in rows if r["kind"] != "good"]
    summary = {
        "faults_classified": sum(r["pass"] for r in faults), "faults": len(faults),
        "good_ok": len(good_ok), "good": args.good, "stored_results": stored, "gpu_usable": usable["usable"],
        "actor_deaths": runner.actor_deaths,
    }
    passed = summary["faults_classified"] == len(faults) and len(good_ok) == args.good \
        and stored == len(rows) and usable["usable"]
    report = {
        "problem": problem.shape, "dtype": problem.dtype, "gpu": stack.gpu_name, "driver": stack.driver,
        "cuda": stack.cuda, "tvm": stack.tvm, "run_timeout_s": args.run_timeout, "pass": passed,
        "summary": summary, "after": usable, "elapsed_s": round(time.monotonic() - began, 1),
        "faults": faults, "candidates": rows,
    }
    (out / "faults.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("pass", "summary", "elapsed_s")}, indent=1))
    for r in faults:
        print(f"  {r['kind']:>16}: expected {r['expected']:<13} got {r['got']:<13} {'ok' if r['pass'] else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
