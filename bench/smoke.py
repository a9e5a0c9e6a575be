"""Hang-safe first run of prebuilt kernels: each one checked, under a watchdog.

    python -m bench.smoke .build/v4 --out smoke.jsonl [--watchdog-s 10]

Before timing new code paths (bench/best_vs_cublas.py gives a whole problem group one long
timeout, so one deadlocked kernel costs minutes of device time), every kernel of the manifest
runs on fresh random inputs, in order, through the measuring child's check
(`tirtune.runner.verify.verify`: a NaN-poisoned output inside NaN guard bands, every element
written, relative Frobenius error within `tolerance`, two runs bit-identical). Each launch is
polled up to --watchdog-s; a kernel that has not finished is recorded as HANG and this process
exits (the CUDA context is stuck), and the wrapper loop starts a fresh process after it.
One JSON line per kernel is appended to --out, so the loop resumes where it stopped:

    until python -m bench.smoke .build/v4 --out smoke.jsonl; do :; done

`--summarize smoke.jsonl --summary smoke.md` writes the markdown table (outcomes counted by kind);
`--failed smoke.jsonl` prints the names of the kernels that were not OK, comma-separated (for
`best_vs_cublas --exclude`). Rows carry the check that judged them (`check`); rows without one
(bench/results/kits/2026-11-29-hopper-gemm-4-smoke.jsonl, bench/results/sweeps/2026-11-29-hopper-gemm-4.jsonl)
were judged by this script's earlier check: one run, no guard bands.

Needs torch and tvm_ffi on the GPU host, not TVM.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tirtune.core import EpilogueSpec, Problem
from tirtune.core.problem import HALF_DTYPES, out_dtype_of
from tirtune.runner.inputs import draw_inputs
from tirtune.runner.measure import Nvml
from tirtune.runner.verify import tolerance, verify

CHECK = "tirtune.runner.verify"  # written into every row: what judged it


class _Hang(Exception):
    pass


def check(folder: Path, entry: dict[str, Any], watchdog_s: float) -> dict[str, Any]:
    import torch
    import tvm_ffi

    p = Problem(**entry["problem"])
    # Drawn as the measuring child draws them: a plain problem's A and B, a fused one's operands
    # after them (runner.inputs.draw_inputs), passed in the kernel's parameter order.
    inputs = draw_inputs(torch, p.m, p.n, p.k, p.dtype, p.epilogue, device="cuda", seed=int(time.time()) % 100_000)
    a, b = inputs.a, inputs.b
    fn = tvm_ffi.load_module(str(folder / entry["so"]))["main"]

    def run(d: Any) -> None:  # one launch under the watchdog
        torch.cuda.synchronize()
        done = torch.cuda.Event()
        started = time.perf_counter()
        with tvm_ffi.use_torch_stream():
            fn(*inputs.arguments(d))
        done.record()
        while not done.query():
            if time.perf_counter() - started > watchdog_s:
                raise _Hang
            time.sleep(0.005)

    try:
        verdict = verify(run, a, b, p.dtype, epilogue=p.epilogue, operands=inputs.operands)
    except _Hang:
        return {"name": entry["name"], "outcome": "HANG", "seconds": watchdog_s, "check": CHECK}
    row = {
        "name": entry["name"],
        "outcome": "OK" if verdict.ok else "WRONG",
        "rel_error": verdict.rel_error,
        "tolerance": tolerance(p.dtype, p.k, p.out_dtype),
    }
    return {**row, "check": CHECK, **({} if verdict.ok else {"message": verdict.message})}


def problem_text(problem: dict[str, Any]) -> str:
    """A row's problem: "MxNxK dtype", then the epilogue where there is one."""
    text = "{m}x{n}x{k} {dtype}".format(**problem)
    return f"{text} {problem['epilogue']}" if problem.get("epilogue", "none") != "none" else text


def _dtype_k_and_out(text: str) -> tuple[str, int, str]:
    """(operand dtype, K, D's dtype) of a row's problem text."""
    shape, dtype, *epilogue = text.split()
    return dtype, int(shape.split("x")[2]), out_dtype_of(dtype, EpilogueSpec.parse(epilogue[0] if epilogue else "none"))


def _worst_text(dtype: str, error: float, share: float) -> str:
    if dtype in HALF_DTYPES:
        return f"{dtype} {error:.1e} (tolerance {tolerance(dtype, 1):.0e})"
    return f"{dtype} {error:.1e} (at most {share:.2f} of a row's tolerance, which grows with K)"


def environment() -> dict[str, Any]:
    import torch

    return {
        "gpu_name": torch.cuda.get_device_name(0),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "driver": Nvml(torch).driver(),
    }


def summary(rows: list[dict[str, Any]], title: str) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    env = next((r["env"] for r in rows if r.get("env")), {})
    checked = all(r.get("check") == CHECK for r in rows)
    how = (
        "Each kernel through the measuring child's check (tirtune.runner.verify: NaN-poisoned output inside "
        "NaN guard bands, relative Frobenius error against a float32 reference, two runs bit-identical)"
        if checked
        else "Each kernel once on fresh random inputs into a NaN-poisoned output, relative Frobenius error "
        "against a float32 reference (this script's check before it used tirtune.runner.verify: one run, "
        "no guard bands)"
    )
    # The largest error per dtype against the measuring child's tolerance, whatever bound a row
    # was judged by when it ran (the first runs used a looser 1e-2 / 2e-2); FP8's bound grows with
    # K (runner.verify.tolerance), so its line gives the largest share of a row's own bound too.
    worst: dict[str, float] = {}
    share: dict[str, float] = {}
    for r in rows:
        if r.get("rel_error") is not None:
            dtype, k, out = _dtype_k_and_out(r["problem"])
            worst[dtype] = max(worst.get(dtype, 0.0), r["rel_error"])
            share[dtype] = max(share.get(dtype, 0.0), r["rel_error"] / tolerance(dtype, k, out))
    within = all(v <= 1.0 for v in share.values())
    lines = [
        f"# {title}",
        "",
        f"{env.get('date', '')} {env.get('gpu_name', '')}, driver {env.get('driver')}, CUDA {env.get('cuda')}, "
        f"torch {env.get('torch')}. {how}, an 8-10 s watchdog for hangs (bench/smoke.py).",
        "",
        "Outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f" (of {len(rows)})",
        "",
        "Largest relative error: "
        + ", ".join(_worst_text(d, e, share[d]) for d, e in sorted(worst.items()))
        + ("; all within the measuring child's tolerance" if within else "; NOT all within the child's tolerance"),
        "",
        "| outcome | config | problem | rel. error |",
        "| --- | --- | --- | --- |",
    ]
    for r in rows:
        err = r.get("rel_error")
        lines.append(f"| {r['outcome']} | {r['label']} | {r['problem']} | {'' if err is None else f'{err:.1e}'} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, nargs="?")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--watchdog-s", type=float, default=10.0)
    ap.add_argument("--summarize", type=Path, help="a JSONL this script wrote: write --summary and stop")
    ap.add_argument("--summary", type=Path)
    ap.add_argument("--title", default="Smoke run of prebuilt kernels")
    ap.add_argument("--failed", type=Path, help="a JSONL this script wrote: print the names of its non-OK kernels")
    args = ap.parse_args()
    if args.failed:
        rows = [json.loads(line) for line in args.failed.read_text().splitlines() if line.strip()]
        print(",".join(r["name"] for r in rows if r["outcome"] != "OK"))
        print(Counter(r["outcome"] for r in rows), file=sys.stderr)
        return 0
    if args.summarize:
        rows = [json.loads(line) for line in args.summarize.read_text().splitlines() if line.strip()]
        text = summary(rows, args.title)
        if args.summary:
            args.summary.write_text(text)
        print(text)
        return 0
    if args.folder is None or args.out is None:
        ap.error("give the prebuilt folder and --out (or --summarize)")
    env = {**environment(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    entries = json.loads((args.folder / "manifest.json").read_text())["entries"]
    seen = set()
    if args.out.exists():
        seen = {json.loads(line)["name"] for line in args.out.read_text().splitlines() if line.strip()}
    for entry in entries:
        if entry["name"] in seen:
            continue
        try:
            row = check(args.folder, entry, args.watchdog_s)
        except Exception as exc:  # a launch error poisons the context too: record it, start afresh
            row = {"name": entry["name"], "outcome": "ERROR", "message": str(exc)[:300], "check": CHECK}
        row["label"] = entry["label"]
        row["env"] = env
        row["problem"] = problem_text(entry["problem"])
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{row['outcome']:6s} {row.get('rel_error', '')!s:24.24s} {row['label']} @ {row['problem']}", flush=True)
        if row["outcome"] in ("HANG", "ERROR"):
            sys.stdout.flush()
            os._exit(3)  # no exit hooks: they would synchronize with the stuck kernel
    return 0


if __name__ == "__main__":
    sys.exit(main())
