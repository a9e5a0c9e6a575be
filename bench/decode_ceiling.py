"""How fast can a decode GEMM's weights stream in, under the suite's protocol? (M = 16)

    python -m bench.decode_ceiling                  # on the H200: bench/results/decode/<date>-ceiling
    bash bench/gpu_session.sh decode-ceiling        # the same, on the GPU host's step runner

The suite times every GEMM right after zeroing a 256 MiB buffer (the L2 flush), so the L2 starts
full of dirty lines. The best decode kernel (16x4096x4096, 64x16x128 s8 swap, evict_first on the
weights) moves the 33.5 MB of weights in ~15 us, 2.2-2.3 TB/s, where a device copy reaches ~4.1
TB/s (read + write) and the decode target is 1.3x cuBLAS (~14.6 us). Whether the rest is the kernel's
or the protocol's is what this measures, with nothing of tirtune's in the way: in one process,
rounds interleaved, each repetition after a flush, CUDA events with the launches queued behind a
held GPU (`tirtune.runner.measure.timed_events`), medians over rounds:

- `cublas`: torch.mm(x, W.T) at M = 1 and 16 (the suite's reference);
- `read`: W.sum(dtype=float32), a pure stream of the 33.5 MB (torch's reduction, one tiny output);
- `read_after_clean_flush`: the same after a flush that reads 256 MiB instead of writing it (the
  L2 then holds clean lines: no write-back under the stream);
- `cublas_after_clean_flush`: torch.mm after that clean flush;
- `copy`: W copied to another buffer (2 x 33.5 MB), for the bandwidth a copy reaches at this size;
- `stream P=.. B=.. W=..` (where triton is installed; `bench/stream_read.py`): a plain streaming
  read of W, P programs each summing one contiguous share with evict_first loads, after either
  flush: the read ceiling, a GEMM's least work at M = 16, without torch's reduction's overheads;
- with `--kit FOLDER` (a `bench/prebuild.py` folder, e.g. `--set decode-best`): each of its kernels
  for these weights (N = K = 4096, M 1 or 16, the dtype) after either flush, `tirtune_m16 LABEL`
  and `tirtune_after_clean_flush_m16 LABEL`, checked first by the measuring child's check
  (`tirtune.runner.verify`; a kernel it refuses is left out, said on stderr), so our kernel and cuBLAS are seen
  under both protocols side by side.

With `--profile` each fp16 case is launched once, no flush and no timing, inside an NVTX range
named after it, for a profiler run over the process (`bash bench/gpu_session.sh decode-profile KIT`:
Nsight Compute, which flushes the caches itself before every kernel): where a decode kernel's
microseconds go (DRAM bytes and throughput, L2 traffic, SM activity, grid) beside cuBLAS's.

If `read` after the zeroing flush is near the decode kernel's 2.3 TB/s and the clean flush lifts
it well above, the dirty L2 (the protocol) is the ceiling, and cuBLAS meets the same one. Writes
OUT.json and OUT.md: {"date", "gpu", "driver", "cuda", "torch", "weights_bytes", "rows":
[{"case", "m", "dtype", "median_us", "p10_us", "p90_us", "gbs"}]}.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.filing import dated
from bench.gemm_profile import kit_kernels as built_for
from bench.stream_read import VARIANTS as STREAMS
from bench.stream_read import stream_sum
from tirtune.core import Problem
from tirtune.runner.measure import timed_events
from tirtune.runner.verify import verify

FLUSH_BYTES = 256 << 20
N = K = 4096


class ReadFlush:
    """A flush that reads FLUSH_BYTES instead of zeroing them (timed_events calls `zero_()`): the
    L2 ends full of clean lines of this buffer."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.buf = torch.ones(FLUSH_BYTES // 4, dtype=torch.float32, device=device)

    def zero_(self) -> None:
        self.buf.sum()


def kit_kernels(folder: Path, dtype: str) -> list[tuple[str, int, Path]]:
    """(label, M, module) of the kernels of a prebuilt kit (manifest.json) for these weights:
    N = K = 4096, M 1 or 16, in `dtype`."""
    return [(label, p.m, module) for label, p, module in built_for(folder, {Problem(m, N, K, dtype) for m in (1, 16)})]


def cases(torch: Any, dtype: Any, device: Any,
          kernels: Sequence[tuple[str, int, Path]] = ()) -> dict[str, tuple[Callable[[], Any], str, int, int]]:
    """name -> (launch, flush kind, M, bytes moved)."""
    w = torch.randn(N, K, dtype=dtype, device=device)
    dst = torch.empty_like(w)
    out: dict[str, tuple[Callable[[], Any], str, int, int]] = {}
    size = w.numel() * w.element_size()
    xs = {m: torch.randn(m, K, dtype=dtype, device=device) for m in (1, 16)}
    for m, x in xs.items():
        out[f"cublas_m{m}"] = (lambda x=x: torch.mm(x, w.T), "zero", m, size)
        out[f"cublas_after_clean_flush_m{m}"] = (lambda x=x: torch.mm(x, w.T), "read", m, size)
    out["read"] = (lambda: w.sum(dtype=torch.float32), "zero", 0, size)
    out["read_after_clean_flush"] = (lambda: w.sum(dtype=torch.float32), "read", 0, size)
    out["copy"] = (lambda: dst.copy_(w), "zero", 0, 2 * size)
    if importlib.util.find_spec("triton") is not None:  # a GPU host's package (and the test extras')
        sums = torch.empty(max(v.programs for v in STREAMS), dtype=torch.float32, device=device)
        for v in STREAMS:
            out[v.label] = (lambda v=v: stream_sum(w, sums, v), "zero", 0, size)
            out[f"{v.label} after_clean_flush"] = (lambda v=v: stream_sum(w, sums, v), "read", 0, size)
    if kernels:
        from tirtune.runner.launcher import load_artifact

        name = str(dtype).removeprefix("torch.")
        for label, m, module in kernels:
            fn, x = load_artifact(str(module)), xs[m]
            verdict = verify(lambda d, fn=fn, x=x: fn(x, w, d), x, w, name)  # the measuring child's check
            if not verdict.ok:
                print(f"left out {label} (M = {m}): {verdict.message}", file=sys.stderr)
                continue
            d = torch.empty(m, N, dtype=dtype, device=device)
            launch = lambda fn=fn, x=x, d=d: fn(x, w, d)  # noqa: E731
            out[f"tirtune_m{m} {label}"] = (launch, "zero", m, size)
            out[f"tirtune_after_clean_flush_m{m} {label}"] = (launch, "read", m, size)
    return out


def measure(torch: Any, dtype: Any, rounds: int, reps: int, kit: Path | None = None) -> list[dict[str, Any]]:
    device = torch.device("cuda")
    flushes = {"zero": torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device=device),
               "read": ReadFlush(torch, device)}
    kernels = kit_kernels(kit, str(dtype).removeprefix("torch.")) if kit else []
    table = cases(torch, dtype, device, kernels)
    times: dict[str, list[float]] = {name: [] for name in table}
    for _ in range(rounds):
        for name, (launch, flush, _m, _b) in table.items():
            times[name] += timed_events(torch, launch, flushes[flush], reps)
    return [{"case": name, "m": m, "dtype": str(dtype).removeprefix("torch."), **time_fields(times[name], moved)}
            for name, (_launch, _flush, m, moved) in table.items()]


def time_fields(times_ms: list[float], moved: int) -> dict[str, float]:
    """A case's row figures: median and p10 / p90 of its launch times (us), and the bandwidth of
    `moved` bytes at the median (GB/s)."""
    t = sorted(times_ms)
    med = statistics.median(t)
    return {"median_us": round(med * 1e3, 2), "p10_us": round(t[len(t) // 10] * 1e3, 2),
            "p90_us": round(t[(9 * len(t)) // 10] * 1e3, 2), "gbs": round(moved / (med * 1e-3) / 1e9, 1)}


def stack(torch: Any) -> dict[str, Any]:
    """The report's provenance: date, GPU and driver (nvidia-smi), CUDA and torch versions."""
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, check=False).stdout.strip().splitlines()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "gpu": smi[0].split(", ")[0] if smi else None, "driver": smi[0].split(", ")[1] if smi else None,
        "cuda": torch.version.cuda, "torch": torch.__version__,
    }


def write(out: Path, report: dict[str, Any], markdown: str) -> None:
    """OUT.json and OUT.md, and the table on stdout."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown)
    print(markdown)


def _markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Decode ceiling: the weights' stream under the suite's flush",
        "",
        f"{report['date']}; {report['gpu']}, driver {report['driver']}, CUDA {report['cuda']}, torch "
        f"{report['torch']}; weights {report['weights_bytes'] / 1e6:.1f} MB; each repetition after a flush "
        "(zeroing 256 MiB, or reading it: 'clean'), medians over interleaved rounds.",
        "",
        "| case | dtype | M | median us | p10-p90 us | GB/s |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| {r['case']} | {r['dtype']} | {r['m'] or '-'} | {r['median_us']} | {r['p10_us']}-{r['p90_us']} "
              f"| {r['gbs']} |" for r in report["rows"]]
    return "\n".join(lines) + "\n"


def profile(torch: Any, dtype: Any, kit: Path | None = None, zero_first: bool = False) -> list[str]:
    """Each case launched once (after one warm-up launch outside any range), in an NVTX range of
    its name; the names in launch order. `zero_first`: the suite's zeroing flush right before each
    profiled launch (for a profiler that leaves the caches alone: the DRAM write-back of the
    flush's dirty lines during the kernel shows); else the profiler's own cache control applies."""
    device = torch.device("cuda")
    kernels = kit_kernels(kit, str(dtype).removeprefix("torch.")) if kit else []
    table = cases(torch, dtype, device, kernels)
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device=device) if zero_first else None
    done = []
    for name, (launch, kind, _m, _b) in table.items():
        if kind != "zero":  # the clean-flush twin of a case launches the same kernel
            continue
        launch()
        if flush is not None:
            flush.zero_()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(name)
        launch()
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        done.append(name)
    return done


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.decode_ceiling", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--out", type=Path, default=None,
                    help="OUT.json and OUT.md (default: bench/results/decode/<date>-ceiling)")
    ap.add_argument("--kit", type=Path, default=None,
                    help="a bench/prebuild.py folder: its kernels for these weights are timed too")
    ap.add_argument("--profile", action="store_true",
                    help="launch each fp16 case once in an NVTX range named after it, for a profiler; no timing")
    ap.add_argument("--profile-after-zeroing", action="store_true",
                    help="with --profile: the suite's zeroing flush right before each profiled launch")
    args = ap.parse_args(argv)
    import torch

    if args.profile:
        for name in profile(torch, torch.float16, args.kit, zero_first=args.profile_after_zeroing):
            print(name)
        return 0

    provenance = stack(torch)
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        rows += measure(torch, dtype, args.rounds, args.reps, args.kit)
    report = {**provenance, "weights_bytes": N * K * 2, "rows": rows}
    write(args.out or dated("decode", "ceiling"), report, _markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
