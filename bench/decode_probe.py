"""Hand-written GEMV-shaped decode probes beside cuBLAS and the template's decode kernels (M <= 16).

    nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a \
         -o .build/probes/decode_probe.so bench/probes/decode_probe.cu          # here
    python -m bench.decode_probe --so .build/probes/decode_probe.so --kit .build/decode-best \
         --out $OUT/decode-probe                                               # on the H200

The question it answers (docs/perf-notes.md, "Decode", "GEMV-shaped probes"): at M <= 16 the
template's TMA/wgmma kernels stream the weights at ~2.3 TB/s under the suite's flush; would a
kernel that reads whole contiguous rows a warp with register loads, multiplying with mma.sync
(`bench/probes/decode_probe.cu`), stream faster, and which of its launch shapes? The probes are
measurement only, never served: a result here is hand-picked, not a suite result.

Per problem, in one process: cuBLAS (torch.mm), the kit's kernels for that problem (a
`bench/prebuild.py` folder) and every probe, each checked first by the measuring child's check
(`tirtune.runner.verify`; a read-only probe is not checked: it computes nothing) and, where triton
is installed, `bench/stream_read.py`'s plain read of the weights (1024 and 4096 programs), then timed in
interleaved rounds with the suite's protocol (`tirtune.runner.measure.timed_events`: a 256 MiB
zeroing flush before every launch, CUDA events, launches queued behind a held GPU). Each case's
ratio of a round is that round's cuBLAS median over the case's; the table gives the median ratio
and its p10-p90 over rounds, the median time and the bandwidth over the bytes a GEMM must move (A,
B and D once). Writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.decode_ceiling import stack, time_fields, write
from bench.filing import dated
from bench.gemm_profile import kit_kernels
from tirtune.core import Problem
from tirtune.runner.measure import timed_events
from tirtune.runner.verify import verify

FLUSH_BYTES = 256 << 20
PROBLEMS = (
    Problem(16, 4096, 4096, "float16"),
    Problem(16, 4096, 4096, "bfloat16"),
    Problem(1, 4096, 4096, "float16"),
    Problem(8, 4096, 4096, "float16"),
    Problem(16, 14336, 4096, "float16"),
    Problem(16, 4096, 14336, "float16"),
)


def select(only: Sequence[str] | None) -> tuple[Problem, ...]:
    """PROBLEMS, or those named in `only` (MxNxK:dtype); a name that is none of them is an error."""
    if not only:
        return PROBLEMS
    named = {f"{p.shape}:{p.dtype}": p for p in PROBLEMS}
    unknown = [name for name in only if name not in named]
    if unknown:
        raise SystemExit(f"decode_probe: no such problem {', '.join(unknown)}; known: {', '.join(named)}")
    return tuple(p for p in PROBLEMS if f"{p.shape}:{p.dtype}" in only)


class Probes:
    """The probe library's kernels (bench/probes/decode_probe.cu's C entry points)."""

    def __init__(self, path: Path) -> None:
        self.lib = ctypes.CDLL(str(path))
        self.lib.probe_name.restype = ctypes.c_char_p
        self.lib.probe_launch.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4 + [ctypes.c_void_p]

    def names(self) -> list[tuple[int, str, bool]]:
        return [(i, self.lib.probe_name(i).decode(), bool(self.lib.probe_computes(i)))
                for i in range(self.lib.probe_count())]

    def launcher(self, torch: Any, index: int, a: Any, b: Any) -> Callable[[Any], None]:
        bf16 = int(a.dtype == torch.bfloat16)
        m, k = a.shape
        n = b.shape[0]

        def run(d: Any) -> None:
            rc = self.lib.probe_launch(index, a.data_ptr(), b.data_ptr(), d.data_ptr(), m, n, k, bf16,
                                       torch.cuda.current_stream().cuda_stream)
            if rc != 0:
                raise RuntimeError(f"probe {index} launch failed: {rc}")
        return run


Cases = dict[str, Callable[[], Any]]


def problem_cases(torch: Any, problem: Problem, probes: Probes | None, kit: Path | None,
                  log: Callable[[str], None], streams: bool = True) -> tuple[Cases, dict[str, float | None]]:
    """name -> launch (cuBLAS first), and each checked case's relative error."""
    dtype = getattr(torch, problem.dtype)
    a = torch.randn(problem.m, problem.k, dtype=dtype, device="cuda")
    b = torch.randn(problem.n, problem.k, dtype=dtype, device="cuda")
    d = torch.empty(problem.m, problem.n, dtype=dtype, device="cuda")
    cases: dict[str, Callable[[], Any]] = {"cublas": lambda: torch.mm(a, b.T, out=d)}
    errors: dict[str, float | None] = {"cublas": None}
    runs: list[tuple[str, Callable[[Any], None], bool]] = []
    if kit is not None:
        from tirtune.runner.launcher import load_artifact

        for label, _, module in kit_kernels(kit, [problem]):
            fn = load_artifact(str(module))
            runs.append((f"tirx {label}", lambda out, fn=fn: fn(a, b, out), True))
    if streams:  # Triton's plain read of the weights (bench/stream_read.py): the read ceiling, same run
        from bench.stream_read import VARIANTS, stream_sum

        sums = torch.empty(max(v.programs for v in VARIANTS), dtype=torch.float32, device="cuda")
        for v in VARIANTS:
            if v.programs in (1024, 4096) and b.numel() % (v.programs * v.block) == 0:
                runs.append((v.label, lambda out, v=v: stream_sum(b, sums, v), False))
    if probes is not None:
        for index, name, computes in probes.names():
            runs.append((f"probe {name}", probes.launcher(torch, index, a, b), computes))
    for name, run, computes in runs:
        if computes:
            verdict = verify(run, a, b, problem.dtype)
            if not verdict.ok:
                log(f"{problem.shape} {problem.dtype}: left out {name}: {verdict.message}")
                continue
            errors[name] = verdict.rel_error
        else:
            errors[name] = None
        cases[name] = lambda run=run: run(d)
    return cases, errors


def measure_problem(torch: Any, problem: Problem, probes: Probes | None, kit: Path | None, rounds: int, reps: int,
                    flush: Any, log: Callable[[str], None], streams: bool) -> list[dict[str, Any]]:
    cases, errors = problem_cases(torch, problem, probes, kit, log, streams)
    times: dict[str, list[float]] = {name: [] for name in cases}
    ratios: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for r in range(rounds):
        block: dict[str, list[float]] = {}
        for j in range(len(names)):  # the starting case rotates: none always follows cuBLAS
            name = names[(j + r) % len(names)]
            block[name] = timed_events(torch, cases[name], flush, reps)
            times[name] += block[name]
        ref = statistics.median(block["cublas"])
        for name in names:
            ratios[name].append(ref / statistics.median(block[name]))
    moved = 2 * (problem.m * problem.k + problem.n * problem.k + problem.m * problem.n)
    rows = []
    for name in names:
        q = sorted(ratios[name])
        rows.append({
            "problem": problem.shape, "dtype": problem.dtype, "case": name, **time_fields(times[name], moved),
            "ratio": round(statistics.median(q), 3), "ratio_p10": round(q[len(q) // 10], 3),
            "ratio_p90": round(q[(9 * len(q)) // 10], 3), "rel_error": errors.get(name),
        })
    return rows


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Decode probes: GEMV-shaped kernels beside cuBLAS and the template's decode kernels",
        "",
        f"{report['date']}; {report['gpu']}, driver {report['driver']}, CUDA {report['cuda']}, torch "
        f"{report['torch']}; {report['rounds']} interleaved rounds x {report['reps']} launches a case, each after "
        "the suite's 256 MiB zeroing flush; ratio = same-round cuBLAS median / the case's (median and p10-p90 over "
        "rounds); GB/s over A, B and D moved once. `probe` rows are hand-written CUDA (bench/probes/), measurement "
        "only; `tirx` rows are the template's kernels from a prebuilt kit.",
        "",
        "| problem | dtype | case | median us | p10-p90 us | GB/s | ratio | ratio p10-p90 | rel. error |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in report["rows"]:
        err = f"{r['rel_error']:.1e}" if r["rel_error"] is not None else "-"
        lines.append(f"| {r['problem']} | {r['dtype']} | {r['case']} | {r['median_us']} | {r['p10_us']}-{r['p90_us']} "
                     f"| {r['gbs']} | {r['ratio']} | {r['ratio_p10']}-{r['ratio_p90']} | {err} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.decode_probe", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--so", type=Path, default=None, help="the probe library (bench/probes/decode_probe.cu built)")
    ap.add_argument("--kit", type=Path, default=None, help="a bench/prebuild.py folder: its kernels for these problems")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--only", nargs="*", default=None, help="problems (MxNxK:dtype) to run, default all")
    ap.add_argument("--out", type=Path, default=None,
                    help="OUT.json and OUT.md (default: bench/results/decode/<date>-probes)")
    args = ap.parse_args(argv)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    probes = Probes(args.so) if args.so else None
    problems = select(args.only)
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    warm = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
    for _ in range(200):  # a warm card: a cold one flatters the first timings
        torch.mm(warm, warm)
    torch.cuda.synchronize()

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    streams = importlib.util.find_spec("triton") is not None  # Triton's plain read, where triton is installed
    rows: list[dict[str, Any]] = []
    for problem in problems:
        rows += measure_problem(torch, problem, probes, args.kit, args.rounds, args.reps, flush, log, streams)
        log(f"done {problem.shape} {problem.dtype}")
    report = {**stack(torch), "rounds": args.rounds, "reps": args.reps, "rows": rows}
    write(args.out or dated("decode", "probes"), report, markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
