"""cuBLAS's kernels (and a kit's) on given GEMMs, one launch each in an NVTX range, for a profiler.

    bash bench/gpu_session.sh gemm-profile [KIT] 3000x5000x2000:float16 4096x4096x4096 ...

For each problem (MxNxK or MxNxK:dtype, fp16 by default): torch.mm(A, B.T) once to warm up, then
once inside the range "cublas MxNxK dtype"; with --kit FOLDER (a `bench/prebuild.py` folder) each
of its kernels built for that problem, checked first by the measuring child's check
(`tirtune.runner.verify`; one it refuses is left out, said on stderr), then launched the same
way in "tirtune MxNxK dtype LABEL". Run under Nsight Compute (`gemm-profile` in
bench/gpu_session.sh) it says which kernel cuBLAS picks (its name carries its tile, e.g.
nvjet_sm90_hsh_256x128_...), its grid and cluster, its time and DRAM traffic, beside ours: where a
problem we lose (3000x5000x2000) differs. Prints the range names in launch order.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from tirtune.core import Problem


def parse(spec: str) -> Problem:
    shape, _, dtype = spec.partition(":")
    return Problem.parse(shape, dtype or "float16")


def kit_kernels(folder: Path, problems: Collection[Problem]) -> list[tuple[str, Problem, Path]]:
    """(label, problem, module) of a prebuilt kit's kernels (manifest.json) built for one of
    `problems`, in the manifest's order."""
    manifest = json.loads((folder / "manifest.json").read_text())
    found = []
    for entry in manifest["entries"]:
        p = entry["problem"]
        problem = Problem(p["m"], p["n"], p["k"], p["dtype"])
        if problem in problems:
            found.append((entry["label"], problem, folder / entry["so"]))
    return found


def launches(torch: Any, problem: Problem, kit: Path | None) -> list[tuple[str, Any]]:
    """(range name, launch) of cuBLAS and of the kit's verified kernels for `problem`."""
    from tirtune.runner.verify import verify

    dtype = getattr(torch, problem.dtype)
    a = torch.randn(problem.m, problem.k, dtype=dtype, device="cuda")
    b = torch.randn(problem.n, problem.k, dtype=dtype, device="cuda")
    found: list[tuple[str, Any]] = [(f"cublas {problem.shape} {problem.dtype}", lambda: torch.mm(a, b.T))]
    if kit is None:
        return found
    from tirtune.runner.launcher import load_artifact

    for label, _, module in kit_kernels(kit, [problem]):
        fn = load_artifact(str(module))
        verdict = verify(lambda d, fn=fn: fn(a, b, d), a, b, problem.dtype)
        if not verdict.ok:
            print(f"left out {label} at {problem}: {verdict.message}", file=sys.stderr)
            continue
        d = torch.empty(problem.m, problem.n, dtype=dtype, device="cuda")
        found.append((f"tirtune {problem.shape} {problem.dtype} {label}", lambda fn=fn, d=d: fn(a, b, d)))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gemm_profile", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("problems", nargs="+", help="MxNxK or MxNxK:dtype (default float16)")
    ap.add_argument("--kit", type=Path, default=None, help="a bench/prebuild.py folder: its kernels too")
    args = ap.parse_args(argv)
    try:
        problems = [parse(p) for p in args.problems]
    except ValueError as e:
        print(f"bad problem: {e}", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("gemm_profile needs a CUDA GPU", file=sys.stderr)
        return 2
    for problem in problems:
        for name, launch in launches(torch, problem, args.kit):
            launch()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push(name)
            launch()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            print(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
