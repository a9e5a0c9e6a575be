"""Measure valid configs of the Hopper space for one or more problems on this host's GPUs.

The output (one JSON line per config, format in bench/data/README.md) feeds the replay runner,
so the tuner can be tested and studied without a GPU. Uses the service's own path: TIRx builds
as Ray CPU tasks, measurements by the GPU runner (one actor per GPU; verify, then time against
cuBLAS). The builds of the next chunk overlap the measurement of the current one.

    python -m bench.record_space 4096x4096x4096:float16 8192x8192x1024:float16 --limit 300 --out bench/data

Each problem writes `<template version>-<shape>-<dtype>.jsonl` (e.g.
hopper-gemm-2-4096x4096x4096-float16.jsonl); `--limit N` measures a random sample of N valid
configs (seeded, so a rerun measures the same sample), spread over the whole space, plus the
job's starting points (`tirtune.space.branches`: the Hopper branch's `start_configs`) that are valid for the problem.

A rerun appends to the existing files and measures only the configs they lack, so an
interrupted recording resumes.

`--build-only CACHE` compiles the same seeded sample into the build cache CACHE on this machine's
CPUs and measures nothing (no GPU needed): carry CACHE to the GPU host and point
TIRTUNE_CACHE_DIR at it, and the measuring run finds every build there.

`--summary PREFIX` also writes PREFIX.json and PREFIX.md: per problem, the outcomes by kind, the
largest relative error of the correct ones and the best ratio to cuBLAS; this is the correctness
sweep (every measurement is verified against a float32 reference before it is timed):

    python -m bench.record_space 4096x4096x4096 1000x1000x1000 48x4096x2048:bfloat16 \
        --limit 100 --out /tmp/sweep --summary bench/results/sweeps/DATE-WHAT

`--summarize FILE... --summary PREFIX` writes the same report from recorded JSONL files (several
runs, other limits per problem), measuring nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from tirtune.builder.tirx_builder import compile_candidate
from tirtune.core import BuildResult, Candidate, Outcome, RunResult
from tirtune.runner.replay_runner import ReplayRunner, to_record
from tirtune.settings import get_settings
from tirtune.space import HOPPER, Config, Problem
from tirtune.space.branches import branch
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.tuner.runtime import make_workers


def _problems(specs: list[str], default_dtype: str) -> list[Problem]:
    out = []
    for spec in specs:
        shape, _, dtype = spec.partition(":")
        out.append(Problem.parse(shape, dtype or default_dtype))
    return out


def _file_name(problem: Problem) -> str:
    return f"{HOPPER.template_version.replace('/', '-')}-{problem.shape}-{problem.dtype}.jsonl"


def _recorded(path: Path) -> set[Config]:
    """Configs already in an output file (a rerun after an interrupted one measures the rest)."""
    if not path.exists():
        return set()
    return {Config.from_json(json.loads(line)["config"], HOPPER_KNOBS) for line in path.read_text().splitlines() if line.strip()}


def _sample(problem: Problem, limit: int) -> list[Candidate]:
    """Every valid config, or a seeded sample of `limit` plus the job's starting points (so a
    replay of the sample starts where a real job does)."""
    configs = HOPPER.valid_configs(problem)
    if limit:
        sample = random.Random(0).sample(configs, min(limit, len(configs)))
        known = branch(HOPPER.arch).start_configs(problem)
        starts = [c for c in known if HOPPER.is_valid(c, problem) and c not in sample]
        configs = sorted(sample) + starts
    return [Candidate(c, problem, HOPPER.template_version) for c in configs]


def _chunks(
    problems: list[Problem], limit: int, size: int, skip: dict[Problem, set[Config]]
) -> Iterator[tuple[Problem, list[Candidate]]]:
    for problem in problems:
        cands = [c for c in _sample(problem, limit) if c.config not in skip[problem]]
        for start in range(0, len(cands), size):
            yield problem, cands[start : start + size]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problems", nargs="*", help="SHAPE or SHAPE:DTYPE, e.g. 4096x14336x4096:bfloat16")
    ap.add_argument("--dtype", default="float16", help="dtype of problems given without one")
    ap.add_argument("--out", default="bench/data")
    ap.add_argument("--limit", type=int, default=0, help="measure a random sample of this many configs per problem")
    ap.add_argument("--batch", type=int, default=0, help="candidates per chunk (default: the workers' batch size)")
    ap.add_argument("--build-only", metavar="CACHE", help="only compile the sample into this build cache")
    ap.add_argument("--jobs", type=int, default=2, help="parallel compiles with --build-only")
    ap.add_argument("--summarize", nargs="+", metavar="JSONL", help="report on recorded files instead of measuring")
    ap.add_argument("--note", default="", help="a sentence for the summary (how the sample was drawn)")
    ap.add_argument("--summary", help="write PREFIX.json and PREFIX.md: outcomes by kind per problem")
    args = ap.parse_args()
    if args.summarize:
        if not args.summary:
            ap.error("--summarize needs --summary PREFIX")
        replay = ReplayRunner(args.summarize)
        write_summary(Path(args.summary), recorded_results(replay), replay.stack().to_json(), 0.0, args.note)
        print(Path(args.summary).with_suffix(".md").read_text())
        return
    if not args.problems:
        ap.error("name at least one problem")
    problems = _problems(args.problems, args.dtype)
    if args.build_only:
        build_only(problems, args.limit, Path(args.build_only), args.jobs)
        return
    workers = make_workers(get_settings())
    size = args.batch or workers.batch_size
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[Problem, IO[str]] = {}
    counts: dict[Problem, Counter[str]] = {p: Counter() for p in problems}
    began = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=1)
    # A rerun appends to the files and measures only what they lack (an interrupted run resumes).
    skip = {p: _recorded(out_dir / _file_name(p)) for p in problems}
    chunks = _chunks(problems, args.limit, size, skip)

    def submit() -> tuple[Problem, Future[list[BuildResult]]] | None:
        nxt = next(chunks, None)
        return None if nxt is None else (nxt[0], pool.submit(workers.builder.build, nxt[1]))

    try:
        pending = submit()
        while pending is not None:
            problem, future = pending
            builds = future.result()
            pending = submit()  # builds of the next chunk overlap these measurements
            if problem not in files:
                files[problem] = (out_dir / _file_name(problem)).open("a")
            f = files[problem]
            for result in workers.runner.run(builds):
                f.write(json.dumps(to_record(result)) + "\n")
                counts[problem][result.outcome.value] += 1
            f.flush()
            done = {f"{p.shape}:{p.dtype}": dict(c) for p, c in counts.items() if c}
            print(f"{time.monotonic() - began:.0f}s {done}", flush=True)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        for f in files.values():
            f.close()
    for p, c in counts.items():
        print(f"{p.shape} {p.dtype}: {dict(c)}")
    print(f"done in {time.monotonic() - began:.0f}s")
    if args.summary:  # from the files: a resumed recording's report covers its earlier runs too
        replay = ReplayRunner([out_dir / _file_name(p) for p in problems if (out_dir / _file_name(p)).exists()])
        write_summary(
            Path(args.summary), recorded_results(replay), replay.stack().to_json(), time.monotonic() - began, args.note
        )


def build_only(problems: list[Problem], limit: int, cache: Path, jobs: int) -> None:
    """Compile the sample into `cache` (skipping what is there); print progress and failures."""
    timeout = get_settings().build_timeout_s
    cands = [c for p in problems for c in _sample(p, limit)]
    began = time.monotonic()
    outcomes: Counter[str] = Counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for i, result in enumerate(pool.map(lambda c: compile_candidate(c, str(cache), timeout), cands), 1):
            outcomes[result.outcome.value + (" (cached)" if result.cached else "")] += 1
            if result.outcome is not Outcome.OK:
                print(f"{result.candidate.config.label()} {result.candidate.problem}: {result.message}", flush=True)
            if i % 20 == 0 or i == len(cands):
                print(f"{time.monotonic() - began:.0f}s {i}/{len(cands)} {dict(outcomes)}", flush=True)


def recorded_results(replay: ReplayRunner) -> dict[Problem, list[RunResult]]:
    """Every recorded measurement as a result, grouped by problem (largest problems first)."""
    out: dict[Problem, list[RunResult]] = {}
    for problem in sorted(replay.problems(), key=lambda p: (-p.m * p.n * p.k, p.shape, p.dtype)):
        builds = [
            BuildResult(Candidate(c, problem, replay.template_version), Outcome.OK) for c in replay.configs(problem)
        ]
        out[problem] = replay.run(builds)
    return out


def summarize(results: dict[Problem, list[RunResult]]) -> list[dict[str, Any]]:
    rows = []
    for problem, rs in results.items():
        ok = [r for r in rs if r.outcome is Outcome.OK]
        errors = [r.rel_error for r in ok if r.rel_error is not None]
        ratios = [r.ratio for r in ok if r.ratio is not None]
        best = max(ok, key=lambda r: r.ratio or 0.0, default=None)
        rows.append(
            {
                "problem": problem.shape,
                "dtype": problem.dtype,
                "configs": len(rs),
                "outcomes": dict(Counter(r.outcome.value for r in rs)),
                "wrong": sum(r.outcome is Outcome.WRONG_RESULT for r in rs),
                "max_rel_error": max(errors, default=None),
                "best": None
                if best is None
                else {
                    "config": best.candidate.config.label(),
                    "ratio": best.ratio,
                    "tflops": best.tflops,
                    "cublas_tflops": best.cublas_tflops,
                },
                "median_ratio": sorted(ratios)[len(ratios) // 2] if ratios else None,
            }
        )
    return rows


def write_summary(
    prefix: Path, results: dict[Problem, list[RunResult]], stack: dict[str, str], seconds: float, note: str = ""
) -> None:
    rows = summarize(results)
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "template_version": HOPPER.template_version,
        "stack": stack,
        "seconds": round(seconds),
        "configs": sum(r["configs"] for r in rows),
        "wrong": sum(r["wrong"] for r in rows),
        "note": note,
        "problems": rows,
    }
    prefix.parent.mkdir(parents=True, exist_ok=True)
    prefix.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        f"# Correctness sweep: {report['configs']} configs of {HOPPER.template_version}, {report['wrong']} wrong",
        "",
        f"{report['date']}; {stack.get('gpu_name')}, driver {stack.get('driver')}, CUDA {stack.get('cuda')}, "
        f"TVM {stack.get('tvm')}; every config verified against a float32 reference (NaN-poisoned output, "
        "guard bands, run twice) before it was timed against cuBLAS in the same process."
        + (f" {note}" if note else ""),
        "",
        "| problem | dtype | configs | outcomes | wrong | max rel. error | best (ratio to cuBLAS) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        best = r["best"]
        best_text = "-" if not best else f"{best['config']} ({best['ratio']:.3f})"
        err = "-" if r["max_rel_error"] is None else f"{r['max_rel_error']:.1e}"
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))
        lines.append(
            f"| {r['problem']} | {r['dtype']} | {r['configs']} | {outcomes} | {r['wrong']} | {err} | {best_text} |"
        )
    prefix.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
