"""What one tuning trial's measurement costs on the GPU, and whether cheaper settings move its ratio.

    python -m bench.trial_cost .build/trial-cost --out bench/results/measurement/<date>-trial-cost
    # on the GPU host: bash bench/gpu_session.sh trial-cost .build/trial-cost

Every trial of a job is one measurement by the measuring child (`tirtune.runner.measure`,
`_Bench.measure`): fresh inputs, the kernel verified, then the kernel and cuBLAS timed in ROUNDS
interleaved blocks, each launch after an L2 flush, each block queued behind a sleeping hold long
enough for the host to queue it. On an H100 a draw's runner measured one trial every 0.7 s and was
busy three quarters of the time (docs/perf-notes.md), so the measurement's own cost bounds how
many problems a GPU tunes in an hour. In one process, for each kernel of a prebuilt kit (bench/
prebuild.py; the set `trial-cost`), each variant of the settings measures it as the tuner does (one
MeasureRequest), its wall time and its ratio to cuBLAS recorded; the variants rotate from kernel to
kernel and pass to pass (no variant always runs first), for --passes passes:

- `as-is`: the service's settings until the study's first run (a 256 MiB flush, at most 200
  launches a block, a hold of 0.1 ms a launch);
- `hold-0.05`: half that hold (timed_events still redoes a block whose queueing outlasts it, with
  twice the hold: `redone` counts them);
- `flush-2xL2`: a flush buffer of twice the card's L2 instead of 256 MiB;
- `reps-100`: at most 100 launches a block;
- `all`: the three together;
- `adopted`: half the hold and at most 100 launches a block, the 256 MiB flush kept: the
  service's settings after the first run (bench/results/measurement/2026-12-07-trial-cost-h100.md)
  until the next two, on another machine, found the half hold outlasted by the queueing in most blocks
  and fast kernels' ratios moved by up to 3% (-rerun-1.md); the service has taken `reps-100` since.

Writes OUT.json and OUT.md: {"date", "gpu", "driver", "torch", "passes", "variants": {name:
settings}, "rows": [{"pass", "kernel", "problem", "variant", "wall_s", "ratio", "ratio_p10",
"ratio_p90", "kernel_ms", "redone", "outcome"}], "summary": [{"kernel", "problem", "kernel_ms",
"by_variant": {name: {"wall_s", "ratio", "ratio_vs_as_is"}}}], "wall_s_by_variant"}; wall times and
ratios are medians over the passes.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tirtune.core import Problem

VARIANTS: dict[str, dict[str, Any]] = {
    "as-is": {"flush": "256MiB", "max_reps": 200, "hold_ms_per_rep": 0.1},
    "hold-0.05": {"flush": "256MiB", "max_reps": 200, "hold_ms_per_rep": 0.05},
    "flush-2xL2": {"flush": "2xL2", "max_reps": 200, "hold_ms_per_rep": 0.1},
    "reps-100": {"flush": "256MiB", "max_reps": 100, "hold_ms_per_rep": 0.1},
    "all": {"flush": "2xL2", "max_reps": 100, "hold_ms_per_rep": 0.05},
    "adopted": {"flush": "256MiB", "max_reps": 100, "hold_ms_per_rep": 0.05},
}


class _Redone(logging.Handler):
    """Counts the blocks timed_events queued again because the queueing outlasted the hold."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("queueing"):
            self.count += 1


def run(kit: Path, passes: int) -> dict[str, Any]:
    import torch

    from tirtune.runner import measure

    entries = json.loads((kit / "manifest.json").read_text())["entries"]
    bench = measure._Bench()
    l2 = torch.cuda.get_device_properties(bench.device).L2_cache_size
    flushes = {"256MiB": bench.flush, "2xL2": torch.empty(2 * l2 // 4, dtype=torch.float32, device=bench.device)}
    redone = _Redone()
    measure.log.addHandler(redone)
    measure.log.setLevel(logging.DEBUG)
    names = list(VARIANTS)
    rows: list[dict[str, Any]] = []
    for p in range(passes):
        for i, e in enumerate(entries):
            problem = Problem(**e["problem"])
            for j in range(len(names)):
                variant = names[(i + p + j) % len(names)]
                settings = VARIANTS[variant]
                bench.flush = flushes[settings["flush"]]
                bench.max_reps = settings["max_reps"]
                bench.hold_ms_per_rep = settings["hold_ms_per_rep"]
                request = measure.MeasureRequest(
                    str(kit / e["so"]), problem.m, problem.n, problem.k, problem.dtype,
                    seed=1000 * p + i, epilogue=problem.epilogue,
                )
                before = redone.count
                began = time.perf_counter()
                reply = bench.measure(request)
                wall = time.perf_counter() - began
                ratios = sorted(reply.round_ratios)
                rows.append({
                    "pass": p, "kernel": e["label"], "problem": problem.shape, "dtype": problem.dtype,
                    "variant": variant, "wall_s": wall, "outcome": reply.outcome,
                    "ratio": statistics.median(ratios) if ratios else None,
                    "ratio_p10": ratios[0] if ratios else None, "ratio_p90": ratios[-1] if ratios else None,
                    "kernel_ms": statistics.median(reply.times_ms) if reply.times_ms else None,
                    "redone": redone.count - before,
                })
                print(f"pass {p} {problem.shape:>18s} {variant:10s} {wall:6.3f} s  ratio "
                      f"{rows[-1]['ratio'] or float('nan'):.3f}  redone {rows[-1]['redone']}", flush=True)
    measure.log.removeHandler(redone)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"), **bench.info, "l2_bytes": l2,
        "kit": str(kit), "passes": passes, "variants": VARIANTS, "rows": rows, **summarize(rows),
    }


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per kernel and variant the median wall time and ratio over the passes, each ratio beside
    as-is's; per variant the median wall time over every measurement."""
    kernels = list(dict.fromkeys((r["problem"], r["dtype"], r["kernel"]) for r in rows))
    summary = []
    for problem, dtype, kernel in kernels:
        mine = [r for r in rows if (r["problem"], r["dtype"], r["kernel"]) == (problem, dtype, kernel)]
        by: dict[str, dict[str, Any]] = {}
        for variant in dict.fromkeys(r["variant"] for r in mine):
            these = [r for r in mine if r["variant"] == variant and r["outcome"] == "OK"]
            by[variant] = {
                "wall_s": statistics.median(r["wall_s"] for r in these) if these else None,
                "ratio": statistics.median(r["ratio"] for r in these) if these else None,
                "redone": sum(r["redone"] for r in these),
            }
        base = by.get("as-is", {}).get("ratio")
        for v in by.values():
            v["ratio_vs_as_is"] = v["ratio"] / base if base and v["ratio"] else None
        times = [r["kernel_ms"] for r in mine if r["kernel_ms"]]
        summary.append({"kernel": kernel, "problem": problem, "dtype": dtype,
                        "kernel_ms": statistics.median(times) if times else None, "by_variant": by})
    variants = dict.fromkeys(r["variant"] for r in rows)
    wall = {v: statistics.median(r["wall_s"] for r in rows if r["variant"] == v) for v in variants}
    return {"summary": summary, "wall_s_by_variant": wall}


def markdown(r: dict[str, Any]) -> str:
    names = list(r["wall_s_by_variant"])
    lines = [
        "# What one trial's measurement costs, and whether cheaper settings move its ratio",
        "",
        f"- {r['date']}; {r['gpu_name']}, driver {r['driver']}, CUDA {r['cuda']}, torch {r['torch']}; L2 "
        f"{r['l2_bytes'] / 2**20:.0f} MiB; kit {r['kit']}; {r['passes']} passes, the variants rotating",
        "- variants: " + "; ".join(
            f"`{n}`: flush {s['flush']}, at most {s['max_reps']} launches a block, hold {s['hold_ms_per_rep']} ms "
            "a launch" for n, s in r["variants"].items()),
        "- median wall time per measurement: " + ", ".join(
            f"{n} {r['wall_s_by_variant'][n]:.3f} s" for n in names),
        "",
        "| problem | kernel ms | " + " | ".join(f"{n} s / ratio" for n in names) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in names) + " |",
    ]
    for k in r["summary"]:
        cells = []
        for n in names:
            v = k["by_variant"].get(n) or {}
            wall = "-" if v.get("wall_s") is None else f"{v['wall_s']:.3f}"
            ratio = "-" if v.get("ratio") is None else f"{v['ratio']:.3f}"
            shift = "" if n == "as-is" or v.get("ratio_vs_as_is") is None else f" ({v['ratio_vs_as_is']:.3f}x)"
            redo = f", {v['redone']} redone" if v.get("redone") else ""
            cells.append(f"{wall} / {ratio}{shift}{redo}")
        kms = "-" if k["kernel_ms"] is None else f"{k['kernel_ms']:.4f}"
        lines.append(f"| {k['problem']} {k['dtype']} | {kms} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("kit", type=Path, help="a folder made by bench/prebuild.py (manifest.json + .so files)")
    ap.add_argument("--out", type=Path, required=True, help="OUT.json and OUT.md")
    ap.add_argument("--passes", type=int, default=3, help="times each kernel is measured under each variant")
    args = ap.parse_args(argv)
    if not (args.kit / "manifest.json").is_file():
        ap.error(f"no manifest.json in {args.kit}")
    if args.passes < 1:
        ap.error("--passes must be at least 1")
    result = run(args.kit, args.passes)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
