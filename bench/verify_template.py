"""Verify and time prebuilt template kernels on a GPU host (needs torch and tvm_ffi, not tvm).

    python -m bench.verify_template .build/verify [--reps 50] [--rounds 5] [--warm-s 2] [--no-isolate]
        [--only SUBSTR] [--json out.json]

For each manifest entry (written by bench/prebuild.py): load the .so with tvm_ffi and check it on
fresh random inputs, twice, with the service's own check (`tirtune.runner.verify.verify`).
Correct kernels are then timed (CUDA events, warm-up, median of --reps) against
torch.mm(A, B.T) (cuBLAS) timed in the same process: --rounds alternate the two (reps/rounds
calls each per round), and the ratio reported is the median over rounds of cuBLAS time over
kernel time, so a drift of the card's clocks during the measurement hits both sides alike.
--warm-s runs cuBLAS GEMMs for that long first (a cold card flatters whatever is timed first).

Correctness is the measuring child's: D poisoned with NaN inside NaN guard bands, every element
written, rel_err = ||D - ref||_F / ||ref||_F against ref = A.float() @ B.float().T within
`tirtune.runner.verify.TOLERANCE` (1e-3 fp16, 8e-3 bf16), and two runs on the same inputs
bit-identical. With fp32 accumulation the error is the output rounding: about 3e-4 for fp16 and
2e-3 for bf16; a wrong tile, a stale stage or a misplaced fragment gives O(1). (Result files
written before this script used `verify` were judged by a looser check of its own: rel_err <= 1e-2
and max|D - ref| <= 5e-2 * max|ref|, one run, no guard bands; bench/README.md says which.)

By default each kernel is checked in its own child process with a timeout (--timeout; --jobs
children at a time), so a hang or an illegal-address error (which poisons the CUDA context)
costs only that kernel; the correct ones are then timed one after another in one more child.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tirtune.core import Problem
from tirtune.runner.inputs import draw_inputs
from tirtune.runner.verify import TOLERANCE, verify

WARMUP = 10
ROOT = Path(__file__).resolve().parents[1]
# What judged the rows, written into every result (older files carry none: the looser check).
CHECK = f"tirtune.runner.verify (tolerance {TOLERANCE}, guard bands, two runs)"


def _torch_dtype(name: str) -> Any:
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def _inputs(problem: dict[str, Any], seed: int, device: str = "cuda") -> tuple[Any, Any, Any]:
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    dt = _torch_dtype(problem["dtype"])
    a = torch.randn(problem["m"], problem["k"], device=device, dtype=dt, generator=gen)
    # B's rows: N, or 2N with swiglu (the packed gate and up weights).
    b = torch.randn(Problem(**problem).gemm_n, problem["k"], device=device, dtype=dt, generator=gen)
    d = torch.full((problem["m"], problem["n"]), float("nan"), device=device, dtype=dt)
    return a, b, d


def check(fn: Any, problem: dict[str, Any], seed: int = 0, device: str = "cuda") -> dict[str, Any]:
    """`fn(a, b, d, *operands)` on fresh inputs, judged by the service's check (`tirtune.runner.verify`),
    drawn as the measuring child draws them (`runner.inputs.draw_inputs`: a plain problem's A and B
    as ever; a fused one's operands after them, swiglu's packed B)."""
    import torch

    p = Problem(**problem)
    inputs = draw_inputs(torch, p.m, p.n, p.k, p.dtype, p.epilogue, device=device, seed=seed)
    verdict = verify(
        lambda d: fn(*inputs.arguments(d)), inputs.a, inputs.b, p.dtype, epilogue=p.epilogue, operands=inputs.operands
    )
    row: dict[str, Any] = {"rel_err": verdict.rel_error, "ok": verdict.ok}
    if not verdict.ok:
        row["wrong"] = verdict.message
    return row


def time_ms(call: Any, reps: int) -> tuple[float, float, float]:
    """Median, 10th and 90th percentile of `reps` timed calls after a warm-up."""
    import torch

    for _ in range(WARMUP):
        call()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends, strict=True):
        s.record()
        call()
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
    return statistics.median(times), times[len(times) // 10], times[(9 * len(times)) // 10]


def warm(seconds: float) -> None:
    """Keep the card busy with large GEMMs so it reaches its steady (power-limited) clocks."""
    import torch

    if seconds <= 0:
        return
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            torch.mm(a, a)
        torch.cuda.synchronize()


def environment() -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,power.limit,clocks.max.sm", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        env["driver"], env["power_limit"], env["max_sm_clock"] = (v.strip() for v in out.stdout.split(","))
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return env


def verify_entry(folder: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """Check one entry on two sets of fresh inputs; failures come back as rows."""
    import tvm_ffi

    row: dict[str, Any] = {"name": entry["name"], "label": entry["label"], "problem": entry["problem"]}
    try:
        fn = tvm_ffi.load_module(str(folder / entry["so"]))["main"]
        row.update(check(fn, entry["problem"], seed=1))
        if row["ok"]:
            row.update(check(fn, entry["problem"], seed=2))  # fresh inputs again: no stale luck
    except Exception as exc:  # a launch error, a bad module: report it, keep going
        row.update({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]})
    return row


def time_entry(folder: Path, entry: dict[str, Any], reps: int, rounds: int) -> dict[str, Any]:
    """Time a verified entry against cuBLAS in alternating rounds, then check its output again."""
    import torch
    import tvm_ffi

    row: dict[str, Any] = {}
    try:
        fn = tvm_ffi.load_module(str(folder / entry["so"]))["main"]
        a, b, d = _inputs(entry["problem"], seed=3)
        per = max(reps // max(rounds, 1), 5)
        ours, theirs = [], []
        for _ in range(max(rounds, 1)):
            ours.append(time_ms(lambda: fn(a, b, d), per))
            theirs.append(time_ms(lambda: torch.mm(a, b.T), per)[0])
        row["ms"] = statistics.median(t[0] for t in ours)
        row["p10_ms"], row["p90_ms"] = min(t[1] for t in ours), max(t[2] for t in ours)
        row["cublas_ms"] = statistics.median(theirs)
        ratios = sorted(c / t[0] for c, t in zip(theirs, ours, strict=True))
        row["ratio"] = statistics.median(ratios)
        row["ratio_min"], row["ratio_max"] = ratios[0], ratios[-1]
        # The timed calls must have computed the same product too.
        after = check(fn, entry["problem"], seed=4)
        row["ok"] = after["ok"]
        if not after["ok"]:
            row["wrong"] = f"after timing: {after['wrong']}"
    except Exception as exc:
        row.update({"ok": False, "error": f"timing: {type(exc).__name__}: {exc}"[:500]})
    return row


def measure(folder: Path, entry: dict[str, Any], reps: int, rounds: int = 1) -> dict[str, Any]:
    """Verify one entry and, if correct, time it against cuBLAS (in this process)."""
    row = verify_entry(folder, entry)
    if row["ok"]:
        row.update(time_entry(folder, entry, reps, rounds))
    return row


def _tflops(problem: dict[str, Any], ms: float | None) -> float | None:
    if not ms:
        return None
    return Problem(**problem).tflops(ms)  # 2 x M x gemm_n x K: both products with swiglu


def _child(folder: Path, args: list[str], timeout: float) -> tuple[list[dict[str, Any]], str]:
    """Run this script as a child; its JSON lines, and what went wrong if it did not finish."""
    cmd = [sys.executable, "-m", "bench.verify_template", str(folder.resolve()), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT)
        out, problem = proc.stdout, "" if proc.returncode == 0 else f"child exited {proc.returncode}: "
        problem += (proc.stderr or "")[-500:] if proc.returncode else ""
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        problem = f"timed out after {timeout:g}s (hang?)"
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")], problem


def _isolated(folder: Path, chosen: list[int], args: argparse.Namespace) -> dict[int, dict[str, Any]]:
    """Check every entry in its own child (args.jobs at a time: a hang or an illegal address costs
    one kernel), then time the correct ones in one child, one after another (a quiet GPU)."""
    from concurrent.futures import ThreadPoolExecutor

    def check_one(i: int) -> dict[str, Any]:
        lines, problem = _child(folder, ["--entry", str(i), "--check-only"], args.timeout)
        return lines[-1] if lines else {"ok": False, "error": problem}

    with ThreadPoolExecutor(args.jobs) as pool:
        rows = dict(zip(chosen, pool.map(check_one, chosen), strict=True))
    good = [i for i in chosen if rows[i].get("ok")]
    if good:
        timing = [
            "--time",
            ",".join(map(str, good)),
            "--reps",
            str(args.reps),
            "--rounds",
            str(args.rounds),
            "--warm-s",
            str(args.warm_s),
        ]
        # Each timing process alternates kernel and cuBLAS; --processes repeats the whole pass in
        # fresh processes (the spread between processes is larger than within one).
        passes = []
        for _ in range(max(args.processes, 1)):
            lines, problem = _child(folder, timing, args.timeout * len(good))
            passes.append(({line["index"]: line for line in lines}, problem))
        for i in good:
            timed = [t[i] for t, _ in passes if i in t and t[i].get("ok")]
            if not timed or len(timed) < len(passes):
                why = next((t[i].get("error") for t, _ in passes if i in t and not t[i].get("ok")), None)
                why = why or next((p for _, p in passes if p), "no result")
                rows[i].update({"ok": False, "error": f"not timed in every process: {why}"})
                continue
            best = sorted(timed, key=lambda t: t["ratio"])[len(timed) // 2]  # the median process
            rows[i].update({k: v for k, v in best.items() if k != "index"})
            if len(timed) > 1:
                rows[i]["process_ratios"] = [round(t["ratio"], 4) for t in timed]
                rows[i]["ratio_min"] = min(t["ratio_min"] for t in timed)
                rows[i]["ratio_max"] = max(t["ratio_max"] for t in timed)
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    cols = f"{'rel_err':>9} {'ok':>3} {'ms':>8} {'TFLOP/s':>8} {'cuBLAS':>8} {'ratio':>6} {'spread':>6}"
    head = f"{'config':<52} {'problem':<22} {cols}"
    lines = [head, "-" * len(head)]
    for r in rows:
        p = r["problem"]
        shape = f"{p['m']}x{p['n']}x{p['k']} {'bf16' if p['dtype'] == 'bfloat16' else 'fp16'}"
        tf, cb = _tflops(p, r.get("ms")), _tflops(p, r.get("cublas_ms"))
        rel = f"{r['rel_err']:.2e}" if r.get("rel_err") is not None else "-"
        ms = f"{r['ms']:.4f}" if r.get("ms") else "-"
        ratio = f"{r['ratio']:.3f}" if r.get("ratio") else "-"
        spread = f"{r['ratio_max'] - r['ratio_min']:.3f}" if r.get("ratio") else "-"
        step = r["name"].split("__")[0] + " " if r["name"].startswith("V") else ""  # the journey's step
        lines.append(
            f"{step + r['label']:<52} {shape:<22} {rel:>9} {'yes' if r.get('ok') else 'NO':>3} {ms:>8} "
            f"{tf or 0:>8.1f} {cb or 0:>8.1f} {ratio:>6} {spread:>6}"
        )
        if r.get("error"):
            lines.append(f"    error: {r['error']}")
        elif not r.get("ok"):
            lines.append(f"    wrong: {r.get('wrong')}")
    return "\n".join(lines)


def _markdown(env: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    keys = ("date", "gpu", "driver", "cuda_runtime", "torch", "template_version", "power_limit", "check")
    lines = ["Environment: " + ", ".join(f"{k} {env.get(k)}" for k in keys if env.get(k)) + ".", ""]
    lines += [
        "| kernel | problem | correct (rel. err) | ms | TFLOP/s | cuBLAS TFLOP/s | ratio (min-max over rounds) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        p = r["problem"]
        step = r["name"].split("__")[0] + " " if r["name"].startswith("V") else ""
        ok = f"yes ({r['rel_err']:.2e})" if r.get("ok") else f"NO: {r.get('error') or r.get('wrong')}"
        tf, cb = _tflops(p, r.get("ms")), _tflops(p, r.get("cublas_ms"))
        timing = (
            f"{r['ms']:.4f} | {tf:.0f} | {cb:.0f} | {r['ratio']:.3f} ({r['ratio_min']:.3f}-{r['ratio_max']:.3f})"
            if r.get("ratio") and tf and cb
            else "- | - | - | -"
        )
        if r.get("process_ratios"):
            timing += "; per process " + ", ".join(f"{v:.3f}" for v in r["process_ratios"])
        lines.append(f"| {step}{r['label']} | {p['m']}x{p['n']}x{p['k']} {p['dtype']} | {ok} | {timing} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="folder with manifest.json and the .so files")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5, help="alternations of kernel and cuBLAS timing")
    parser.add_argument("--warm-s", type=float, default=0.0, help="seconds of cuBLAS GEMMs before timing")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per kernel (isolated mode)")
    parser.add_argument("--no-isolate", action="store_true", help="run every kernel in this process")
    parser.add_argument("--only", default="", help="comma-separated substrings: entries whose name has one")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--md", type=Path, help="also write a markdown table (with the environment) here")
    parser.add_argument("--jobs", type=int, default=4, help="correctness checks at a time (isolated mode)")
    parser.add_argument("--processes", type=int, default=1, help="timing passes, each in a fresh process")
    parser.add_argument("--entry", type=int, help=argparse.SUPPRESS)  # child mode: one entry
    parser.add_argument("--check-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--time", default="", help=argparse.SUPPRESS)  # child mode: time these entries
    args = parser.parse_args()
    entries = json.loads((args.folder / "manifest.json").read_text())["entries"]

    if args.entry is not None:
        entry = entries[args.entry]
        if args.check_only:
            print(json.dumps(verify_entry(args.folder, entry)), flush=True)  # noqa: T201
        else:
            warm(args.warm_s)
            print(json.dumps(measure(args.folder, entry, args.reps, args.rounds)), flush=True)  # noqa: T201
        return 0
    if args.time:
        warm(args.warm_s)
        for i in map(int, args.time.split(",")):
            row = {"index": i, **time_entry(args.folder, entries[i], args.reps, args.rounds)}
            print(json.dumps(row), flush=True)  # noqa: T201
        return 0
    env = environment()
    env["template_version"] = json.loads((args.folder / "manifest.json").read_text()).get("template_version")
    env["check"] = CHECK
    print(json.dumps(env), flush=True)  # noqa: T201
    chosen = [i for i, e in enumerate(entries) if not args.only or any(p in e["name"] for p in args.only.split(","))]
    started = time.perf_counter()
    if args.no_isolate:
        warm(args.warm_s)
        rows = [measure(args.folder, entries[i], args.reps, args.rounds) for i in chosen]
    else:
        by_index = _isolated(args.folder, chosen, args)
        rows = [
            {"name": entries[i]["name"], "label": entries[i]["label"], "problem": entries[i]["problem"], **by_index[i]}
            for i in chosen
        ]
    for row in rows:
        status = "ok" if row.get("ok") else "FAIL"
        print(f"{row['name']}: {status}", flush=True)  # noqa: T201
    print(f"{len(rows)} kernels in {time.perf_counter() - started:.0f} s", flush=True)  # noqa: T201
    print(_table(rows))  # noqa: T201
    if args.json:
        args.json.write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    if args.md:
        args.md.write_text(_markdown(env, rows))
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
