"""Build and statically gate a random sample of valid Blackwell (sm_100a) configs, without a B200.

    python -m bench.blackwell_gate --count 110 --jobs 2     # bench/results/blackwell/<date>-static-gate.{json,md}

Each sampled (config, problem) goes through `bench.static_gate.gate`: TIRx lowering,
`nvcc -cubin` for sm_100a, and the static checks (no spills or local memory, register / shared
memory / TMEM budgets, tcgen05 families present and wgmma absent, the MMA shape and types from the
instruction descriptor, launch dimensions). Writes OUT.json (every report) and OUT.md (summary).
Nothing here runs a kernel: correctness, deadlock freedom and speed need a B200.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.filing import dated
from tirtune.builder import toolchain
from tirtune.space import Config, Problem
from tirtune.space.blackwell import BLACKWELL, STATUS, TEMPLATE_VERSION

# Mostly the seed's problem; some bf16 and some shapes with tails along M, N and K.
PROBLEMS = (
    (Problem(4096, 4096, 4096, "float16"), 6),
    (Problem(4096, 4096, 4096, "bfloat16"), 2),
    (Problem(8192, 8192, 8192, "float16"), 1),
    (Problem(1000, 1000, 1000, "float16"), 1),
)
CHECKS = ("lowered", "ptxas", "no_spills", "registers", "smem", "tmem", "families", "mma_shape", "launch")


def sample(count: int, seed: int) -> list[tuple[Config, Problem]]:
    """`count` distinct (config, problem) pairs, each config drawn uniformly from the problem's valid set."""
    rng = random.Random(seed)
    valid = {p: BLACKWELL.valid_configs(p) for p, _ in PROBLEMS}
    weights = [w for _, w in PROBLEMS]
    chosen: dict[tuple[str, str], tuple[Config, Problem]] = {}
    while len(chosen) < count:
        problem = rng.choices([p for p, _ in PROBLEMS], weights)[0]
        config = rng.choice(valid[problem])
        chosen.setdefault((config.canonical(), str(problem)), (config, problem))
    return list(chosen.values())


def _gate_one(item: tuple[Config, Problem]) -> dict[str, Any]:
    from bench.static_gate import gate

    config, problem = item
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bw-gate-") as tmp:
        report = gate(config, problem, tmp).to_json()
    report["seconds"] = round(time.perf_counter() - started, 2)
    return report


def _versions() -> dict[str, str]:
    import tvm

    nvcc = subprocess.run([toolchain.nvcc_path(), "--version"], capture_output=True, text=True, check=False).stdout
    release = next((line.strip() for line in nvcc.splitlines() if "release" in line), nvcc.strip()[-80:])
    cuobjdump = (
        subprocess.run([toolchain.cuobjdump_path(), "--version"], capture_output=True, text=True, check=False)
        .stdout.strip()
        .splitlines()
    )
    return {
        "nvcc": release,
        "tvm": tvm.__version__,
        "cuobjdump": cuobjdump[-1] if cuobjdump else "",
        "python": platform.python_version(),
    }


def summarize(reports: list[dict[str, Any]]) -> dict[str, Any]:
    counts = {name: sum(1 for r in reports if r["checks"].get(name)) for name in CHECKS}
    regs = [r["facts"]["registers"] for r in reports if r["facts"].get("registers") is not None]
    smem = [r["facts"]["dynamic_smem"] for r in reports if "dynamic_smem" in r["facts"]]
    failures = Counter(f.split(":")[0] for r in reports for f in r["failures"])
    return {
        "gated": len(reports),
        "passed": sum(1 for r in reports if r["passed"]),
        "checks": counts,
        "failures_by_check": dict(failures),
        "registers": [min(regs, default=0), max(regs, default=0)],
        "dynamic_smem": [min(smem, default=0), max(smem, default=0)],
        "build_seconds": _quartiles([r["seconds"] for r in reports]),
    }


def _quartiles(values: list[float]) -> dict[str, float]:
    s = sorted(values)
    return {"min": s[0], "median": s[len(s) // 2], "max": s[-1]} if s else {}


def to_markdown(result: dict[str, Any]) -> str:
    s, meta = result["summary"], result["meta"]
    t = s["build_seconds"]
    lines = [
        f"# Blackwell (sm_100a) static gate: {s['gated']} random valid configs",
        "",
        f"{meta['date']}, {meta['machine']}; {meta['versions']['nvcc']}, TVM {meta['versions']['tvm']}, "
        f"{meta['versions']['cuobjdump']}. Template {meta['template_version']} ({STATUS}).",
        f"Commit {meta['commit']}. Sample: seed {meta['seed']}, {meta['jobs']} parallel builds, "
        f"wall {meta['wall_s']} s; "
        f"the space has {meta['space_points']} knob points, {meta['valid_configs_4096_fp16']} valid at 4096^3 fp16.",
        "",
        "Nothing here ran on a B200: these are lowering, ptxas and SASS facts. Correctness, deadlock",
        "freedom (a flipped barrier phase passes every check below) and speed are not known.",
        "",
        "| check | passed |",
        "| --- | --- |",
        *[f"| {name} | {n}/{s['gated']} |" for name, n in s["checks"].items()],
        f"| **all checks** | **{s['passed']}/{s['gated']}** |",
        "",
        f"Registers per thread {s['registers'][0]}-{s['registers'][1]}; dynamic shared memory "
        f"{s['dynamic_smem'][0]}-{s['dynamic_smem'][1]} B; seconds per config (lower + nvcc -cubin + checks): "
        f"min {t['min']}, median {t['median']}, max {t['max']}.",
        "",
        "| config | problem | regs | smem B | grid x block x cluster | MMA | result |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["reports"]:
        f = r["facts"]
        mma = ", ".join(f"{m['m']}x{m['n']} {m['a']}" for m in f.get("mma", []))
        dims = f"{f.get('grid', ['?'])[0]} x {f.get('block', ['?'])[0]} x {f.get('cluster', ['?'])[0]}"
        verdict = "pass" if r["passed"] else "FAIL: " + "; ".join(x[:120] for x in r["failures"])
        problem = r["problem"]
        lines.append(
            f"| {r['label']} | {problem['m']}x{problem['n']}x{problem['k']} {problem['dtype']} | "
            f"{f.get('registers', '-')} | {f.get('dynamic_smem', '-')} | {dims} | {mma} | {verdict} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=110)
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None,
                        help="OUT.json and OUT.md (default: bench/results/blackwell/<date>-static-gate)")
    parser.add_argument("--render-only", action="store_true", help="rewrite OUT.md from OUT.json, build nothing")
    args = parser.parse_args(argv)
    args.out = args.out or dated("blackwell", "static-gate")
    if args.render_only:
        args.out.with_suffix(".md").write_text(to_markdown(json.loads(args.out.with_suffix(".json").read_text())))
        return 0
    items = sample(args.count, args.seed)
    commit = _commit()  # the code the sample is built with (read now: the tree may move during the run)
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        reports = []
        for i, report in enumerate(pool.map(_gate_one, items), 1):
            reports.append(report)
            print(
                f"[{i}/{len(items)}] {report['label']} {report['problem']['dtype']}: "  # noqa: T201
                f"{'pass' if report['passed'] else report['failures']}",
                flush=True,
            )
    valid_4096 = len(BLACKWELL.valid_configs(Problem(4096, 4096, 4096)))
    result = {
        "meta": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.node() or 'host'}: {platform.processor() or platform.machine()}, "
            f"{_cpus()} CPU cores, no GPU",
            "versions": _versions(),
            "seed": args.seed,
            "jobs": args.jobs,
            "wall_s": round(time.perf_counter() - started, 1),
            "template_version": TEMPLATE_VERSION,
            "status": STATUS,
            "valid_configs_4096_fp16": valid_4096,
            "commit": commit,
            "space_points": sum(1 for _ in BLACKWELL.configs()),
        },
        "summary": summarize(reports),
        "reports": reports,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(to_markdown(result))
    print(json.dumps(result["summary"], indent=1))  # noqa: T201
    return 0 if result["summary"]["passed"] == len(reports) else 1


def _commit() -> str:
    """HEAD, marked "+dirty" if the Blackwell branch's own files differ from it."""
    root = Path(__file__).resolve().parents[1]
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False, cwd=root
    )
    ours = [
        "tirtune/kernels/blackwell",
        "tirtune/kernels/skeleton.py",
        "tirtune/space/blackwell",
        "bench/static_gate.py",
        "tirtune/builder/toolchain.py",
    ]
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", *ours], cwd=root, check=False).returncode != 0
    return head.stdout.strip() + ("+dirty" if dirty else "")


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


if __name__ == "__main__":
    sys.exit(main())
