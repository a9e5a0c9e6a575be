"""Energy per GEMM: prebuilt kernels and cuBLAS at steady state, from NVML's energy counter.

    python -m bench.energy .build/v4 --only 4096x4096x4096 --seconds 2 --rounds 3   # OUT/energy.{json,md}

The question it answers: is a kernel's speed against cuBLAS set by the board's power limit? For
each problem, every kernel and cuBLAS (`torch.mm`) run back to back for `--seconds` each, in
`--rounds` interleaved rounds, on the same inputs (warm L2 for both: a steady state, not the
L2-flushed timing of bench/best_vs_cublas.py). Per run: joules per GEMM from
nvmlDeviceGetTotalEnergyConsumption (millijoules since the driver loaded) before and after, the
elapsed time from CUDA events, mean board power, and the SM clock sampled mid-run. If both run
at the power limit, time per GEMM = energy per GEMM / power, so the time ratio follows the
energy ratio, and a kernel beats cuBLAS by x% only by spending x% less energy per GEMM.
Correctness is not checked here (bench/best_vs_cublas.py verifies the same .so files).
Needs torch, tvm_ffi and pynvml on the GPU host, not TVM.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tirtune.core import Problem
from tirtune.runner.measure import Nvml


def steady(torch: Any, nvml: Nvml, launch: Any, seconds: float) -> dict[str, float]:
    """Run `launch` back to back for about `seconds`: joules and milliseconds per call, watts, MHz."""
    pynvml, handle = nvml.pynvml, nvml.handle
    launch()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < 0.2:  # calls per batch: about 50 ms of work
        launch()
        n += 1
    torch.cuda.synchronize()
    batch = max(1, int(n * 0.05 / (time.perf_counter() - t0)))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    clocks: list[float] = []
    calls = 0
    e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    start.record()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(batch):
            launch()
        calls += batch
        torch.cuda.synchronize()
        clocks.append(float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)))
    end.record()
    torch.cuda.synchronize()
    e1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    ms = start.elapsed_time(end)
    joules = (e1 - e0) / 1000.0
    return {
        "calls": calls,
        "ms_per_call": ms / calls,
        "joules_per_call": joules / calls,
        "watts": joules / (ms / 1000.0),
        "sm_clock_mhz": statistics.median(clocks[len(clocks) // 4 :] or clocks),
    }


def _kernel_launch(tvm_ffi: Any, fn: Any, a: Any, b: Any, d: Any) -> Any:
    def launch() -> None:
        with tvm_ffi.use_torch_stream():
            fn(a, b, d)

    return launch


def _cublas_launch(torch: Any, a: Any, b: Any, d: Any) -> Any:
    def launch() -> None:
        torch.mm(a, b.T, out=d)

    return launch


def measure(
    folder: Path, entries: list[dict[str, Any]], seconds: float, rounds: int, nvml: Nvml
) -> list[dict[str, Any]]:
    import torch
    import tvm_ffi

    by_problem: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        by_problem[json.dumps(e["problem"], sort_keys=True)].append(e)
    records = []
    for group in by_problem.values():
        p = group[0]["problem"]
        dtype = getattr(torch, p["dtype"])
        a = torch.randn(p["m"], p["k"], device="cuda", dtype=dtype)
        b = torch.randn(p["n"], p["k"], device="cuda", dtype=dtype)
        d = torch.empty(p["m"], p["n"], device="cuda", dtype=dtype)
        fns = {e["name"]: tvm_ffi.load_module(str(folder / e["so"]))["main"] for e in group}
        launches = {name: _kernel_launch(tvm_ffi, fn, a, b, d) for name, fn in fns.items()}
        launches["cublas"] = _cublas_launch(torch, a, b, d)
        steady(torch, nvml, launches["cublas"], 2.0)  # warm the card to its steady clock
        runs: dict[str, list[dict[str, float]]] = defaultdict(list)
        for _ in range(rounds):
            for name, launch in launches.items():
                runs[name].append(steady(torch, nvml, launch, seconds))
        flop = float(Problem(**p).flops)  # 2 x M x gemm_n x K: both products with swiglu
        base = {k: statistics.median(r[k] for r in runs["cublas"]) for k in runs["cublas"][0]}
        labels = {e["name"]: e["label"] for e in group} | {"cublas": "cuBLAS (torch.mm)"}
        for name in launches:
            med = {k: statistics.median(r[k] for r in runs[name]) for k in runs[name][0]}
            records.append(
                {
                    "problem": "{m}x{n}x{k}".format(**p),
                    "dtype": p["dtype"],
                    "name": name,
                    "label": labels[name],
                    "tflops": flop / (med["ms_per_call"] * 1e-3) / 1e12,
                    "joules_per_gemm": med["joules_per_call"],
                    "watts": med["watts"],
                    "sm_clock_mhz": med["sm_clock_mhz"],
                    "time_ratio": base["ms_per_call"] / med["ms_per_call"],
                    "energy_ratio": base["joules_per_call"] / med["joules_per_call"],
                    "rounds": [r["ms_per_call"] for r in runs[name]],
                }
            )
    return records


def _markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "# Energy per GEMM at steady state",
        "",
        f"{env['date']}; {env['gpu_name']}, driver {env['driver']}, CUDA {env['cuda']}, torch {env['torch']}, "
        f"kernels built with TVM {report['tvm']} ({report['template_version']}). Each kernel and cuBLAS "
        f"back to back for {report['seconds']} s, {report['rounds']} interleaved rounds, medians; warm L2 for both. "
        "time ratio = cuBLAS time / kernel time; energy ratio = cuBLAS joules / kernel joules per GEMM.",
        "",
        "| problem | kernel | TFLOP/s | J/GEMM | W | SM MHz | time ratio | energy ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in report["records"]:
        lines.append(
            f"| {r['problem']} {r['dtype']} | {r['label']} | {r['tflops']:.1f} | {r['joules_per_gemm']:.4f} | "
            f"{r['watts']:.0f} | {r['sm_clock_mhz']:.0f} | {r['time_ratio']:.3f} | {r['energy_ratio']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="prebuilt kernels (manifest.json + .so files)")
    ap.add_argument("--only", default="", help="comma-separated substrings of entry names")
    ap.add_argument("--exclude", default="", help="comma-separated substrings of entry names to leave out")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("bench/results/kits"))
    ap.add_argument("--name", default="energy")
    args = ap.parse_args()
    import torch

    manifest = json.loads((args.folder / "manifest.json").read_text())
    wanted = [s for s in args.only.split(",") if s]
    entries = [e for e in manifest["entries"] if not wanted or any(s in e["name"] for s in wanted)]
    unwanted = [s for s in args.exclude.split(",") if s]
    entries = [e for e in entries if not any(s in e["name"] for s in unwanted)]
    nvml = Nvml(torch)  # the measuring child's NVML handle (the GPU torch sees as device 0)
    if nvml.handle is None:
        raise SystemExit("energy.py needs NVML (pynvml) and the GPU's handle")
    records = measure(args.folder, entries, args.seconds, args.rounds, nvml)
    report = {
        "template_version": manifest.get("template_version"),
        "tvm": manifest.get("tvm"),
        "seconds": args.seconds,
        "rounds": args.rounds,
        "environment": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "gpu_name": torch.cuda.get_device_name(0),
            "driver": nvml.driver(),
            "cuda": torch.version.cuda,
            "torch": torch.__version__,
        },
        "records": records,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    main()
