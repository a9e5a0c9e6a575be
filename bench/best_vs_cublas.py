"""The best configs against cuBLAS: the service's own measuring child, re-measured interleaved,
median over several fresh processes. Writes OUT/best-vs-cublas.{json,md} (default OUT:
bench/results/kits; filed there as <date>-<kit>.{json,md}, bench/README.md).

    python -m bench.best_vs_cublas .build/best --processes 3 --rounds 7

Input: a folder made by bench/prebuild.py (manifest.json + .so files), e.g. the tuner's winners.
Needs torch and tvm_ffi on the GPU host, not TVM. For each process: a fresh measuring child
(`tirtune.runner.measure.serve`, as the GPU runner uses: it warms the card with cuBLAS GEMMs
first), then per problem one RemeasureRequest: every kernel verified against a float32 reference
(NaN-poisoned output, guard bands, run twice), then all of them and cuBLAS timed round by round
with the L2 flushed before every repetition. A kernel's ratio in a process is cuBLAS's median
time over the kernel's; the reported figure is the median process's. Each record carries
problem, dtype, config, tflops, cublas_tflops and ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tirtune.core import Problem
from tirtune.runner.measure import MeasureReply, RemeasureReply, RemeasureRequest, serve
from tirtune.runner.supervisor import ChildSupervisor


def _tflops(p: dict[str, Any], ms: float | None) -> float | None:
    return None if not ms else Problem(**p).tflops(ms)  # 2 x M x gemm_n x K: both products with swiglu


def one_process(
    folder: Path, entries: list[dict[str, Any]], rounds: int, timeout_s: float, target: Callable[[Any], None] = serve
) -> dict[str, Any]:
    """Every entry measured interleaved (per problem) in one fresh measuring child (`target` is
    the child's entry point: the service's own, or a stand-in in tests)."""
    child = ChildSupervisor(run_timeout_s=timeout_s, target=target)
    info = child.start()
    out: dict[str, Any] = {}
    try:
        by_problem: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for e in entries:
            by_problem[json.dumps(e["problem"], sort_keys=True)].append(e)
        for group in by_problem.values():
            p = group[0]["problem"]
            request = RemeasureRequest(
                tuple(str(folder / e["so"]) for e in group),
                p["m"],
                p["n"],
                p["k"],
                p["dtype"],
                seed=int(time.time()) % 100_000,
                rounds=rounds,
                epilogue=Problem(**p).epilogue,  # a fused problem's operands and baseline (none: as ever)
            )
            reply = child.measure(request, timeout_s=timeout_s * (1 + len(group)))
            replies = reply.replies if isinstance(reply, RemeasureReply) else tuple(reply for _ in group)
            for e, r in zip(group, replies, strict=True):
                out[e["name"]] = _figures(r)
    finally:
        child.close()
    return {"info": info, "rows": out}


def _figures(r: MeasureReply) -> dict[str, Any]:
    if r.outcome != "OK" or not r.times_ms or not r.cublas_times_ms:
        return {"outcome": r.outcome, "message": r.message[:300]}
    ms, cublas = statistics.median(r.times_ms), statistics.median(r.cublas_times_ms)
    return {
        "outcome": "OK",
        "ms": ms,
        "cublas_ms": cublas,
        "ratio": cublas / ms,
        "rel_error": r.rel_error,
        "sm_clock_mhz": r.sm_clock_mhz,
        "power_w": r.power_w,
        "repetitions": len(r.times_ms),
    }


def combine(entries: list[dict[str, Any]], passes: list[dict[str, Any]], rounds: int) -> list[dict[str, Any]]:
    """One record per entry: the median process's figures, every process's ratio beside it."""
    records = []
    for e in entries:
        figures = [p["rows"].get(e["name"], {"outcome": "MISSING"}) for p in passes]
        ok = [f for f in figures if f["outcome"] == "OK"]
        record: dict[str, Any] = {
            "problem": "{m}x{n}x{k}".format(**e["problem"]),
            "dtype": e["problem"]["dtype"],
            "config": e["config"],
            "label": e["label"],
            "interleaved": True,
            "rounds": rounds,
            "processes": len(passes),
        }
        if len(ok) < len(figures):  # a kernel that failed in any process has no figure
            bad = next(f for f in figures if f["outcome"] != "OK")
            records.append(
                {
                    **record,
                    "outcome": bad["outcome"],
                    "message": bad.get("message", ""),
                    "tflops": None,
                    "cublas_tflops": None,
                    "ratio": None,
                }
            )
            continue
        median = sorted(ok, key=lambda f: f["ratio"])[len(ok) // 2]
        records.append(
            {
                **record,
                "outcome": "OK",
                "tflops": _tflops(e["problem"], median["ms"]),
                "cublas_tflops": _tflops(e["problem"], median["cublas_ms"]),
                "ratio": median["ratio"],
                "process_ratios": [round(f["ratio"], 4) for f in ok],
                "rel_error": max(f["rel_error"] or 0.0 for f in ok),
                "sm_clock_mhz": median["sm_clock_mhz"],
                "power_w": median["power_w"],
            }
        )
    return records


def from_verify(path: Path, names: list[str], manifest: Path | None = None) -> dict[str, Any]:
    """Records from a bench/verify_template.py JSON (--processes N): its median-process rows for
    the entries named. That protocol alternates kernel and torch.mm in rounds after a cuBLAS
    warm-up, without flushing L2 between repetitions (the same for both)."""
    data = json.loads(path.read_text())
    rows = {r["name"]: r for r in data["rows"]}
    configs = {}
    if manifest is not None:  # the build manifest holds each entry's config as JSON
        configs = {e["name"]: e["config"] for e in json.loads(manifest.read_text())["entries"]}
    records = []
    for name in names:
        r = rows[name]
        p = r["problem"]
        records.append(
            {
                "problem": "{m}x{n}x{k}".format(**p),
                "dtype": p["dtype"],
                "config": configs.get(name) or r.get("config") or r["label"],
                "label": r["label"],
                "outcome": "OK" if r.get("ok") else "FAILED",
                "interleaved": True,
                "processes": len(r.get("process_ratios", [])) or 1,
                "tflops": _tflops(p, r.get("ms")),
                "cublas_tflops": _tflops(p, r.get("cublas_ms")),
                "ratio": r.get("ratio"),
                "process_ratios": r.get("process_ratios", []),
                "rel_error": r.get("rel_err"),
            }
        )
    env = data["env"]
    return {
        "template_version": env.get("template_version"),
        "tvm": "0.27.0.post1",
        "source": str(path),
        "protocol": "bench/verify_template.py --processes 5 --rounds 5 --warm-s 2: kernel and torch.mm alternated "
        "in rounds in one process after 2 s of cuBLAS warm-up, 5 fresh processes, the median "
        "process's row; no L2 flush between repetitions",
        "rounds": 5,
        "processes": max(r["processes"] for r in records),
        "environment": {
            "date": env.get("date"),
            "gpu_name": env.get("gpu"),
            "driver": env.get("driver"),
            "cuda": env.get("cuda_runtime"),
            "torch": env.get("torch"),
        },
        "records": records,
    }


def _markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        f"# Best configs against cuBLAS ({report['template_version']})",
        "",
        f"{env['date']}; {env.get('gpu_name')}, driver {env.get('driver')}, CUDA {env.get('cuda')}, "
        f"torch {env.get('torch')}, TVM {report.get('tvm', '?')}. "
        + report.get(
            "protocol",
            f"Each kernel and cuBLAS (torch.mm) timed interleaved round by round ({report['rounds']} rounds, L2 "
            "flushed before every repetition) in the service's measuring child after its warm-up, in "
            f"{report['processes']} fresh processes; the median process's figures, every process's ratio beside them",
        )
        + ". Ratio = cuBLAS time / kernel time (> 1: faster than cuBLAS).",
        "",
        "| problem | dtype | config | TFLOP/s | cuBLAS TFLOP/s | ratio | per process | rel. error |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in report["records"]:
        if r["outcome"] != "OK":
            lines.append(f"| {r['problem']} | {r['dtype']} | {r['label']} | {r['outcome']} | - | - | - | - |")
            continue
        lines.append(
            f"| {r['problem']} | {r['dtype']} | {r['label']} | {r['tflops']:.1f} | {r['cublas_tflops']:.1f} "
            f"| **{r['ratio']:.3f}** | {', '.join(f'{x:.3f}' for x in r['process_ratios'])} "
            f"| {r['rel_error']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, nargs="?", help="prebuilt winners (manifest.json + .so files)")
    ap.add_argument("--from-verify", type=Path, help="instead: take these rows of a verify_template JSON")
    ap.add_argument("--names", default="", help="with --from-verify: comma-separated entry names")
    ap.add_argument("--manifest", type=Path, help="with --from-verify: the build manifest (configs as JSON)")
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per kernel")
    ap.add_argument("--only", default="", help="comma-separated substrings of entry names")
    ap.add_argument("--exclude", default="", help="comma-separated substrings of entry names to leave out")
    ap.add_argument("--out", type=Path, default=Path("bench/results/kits"))
    args = ap.parse_args()
    if args.from_verify:
        report = from_verify(args.from_verify, [n for n in args.names.split(",") if n], args.manifest)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "best-vs-cublas.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / "best-vs-cublas.md").write_text(_markdown(report))
        print(_markdown(report))
        return
    manifest = json.loads((args.folder / "manifest.json").read_text())
    entries = manifest["entries"]
    if args.only:
        keys = [k for k in args.only.split(",") if k]
        entries = [e for e in entries if any(k in e["name"] for k in keys)]
    if args.exclude:
        keys = [k for k in args.exclude.split(",") if k]
        entries = [e for e in entries if not any(k in e["name"] for k in keys)]
    passes = []
    for i in range(args.processes):
        passes.append(one_process(args.folder, entries, args.rounds, args.timeout))
        print(f"process {i + 1}/{args.processes} done", flush=True)
    info = passes[0]["info"]
    report = {
        "template_version": manifest.get("template_version"),
        "tvm": manifest.get("tvm"),
        "rounds": args.rounds,
        "processes": args.processes,
        "environment": {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "gpu_name": info.get("gpu_name"),
            "driver": info.get("driver"),
            "cuda": info.get("cuda"),
            "torch": info.get("torch"),
        },
        "records": combine(entries, passes, args.rounds),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "best-vs-cublas.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "best-vs-cublas.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    main()
