"""CPU seconds per build, today's .so path against the device-only cubin path, and SASS sameness.

    python -m bench.build_speed [--configs 12] [--batch 6] [--jobs 2] [--keep DIR]
    python -m bench.build_speed --set proof --keep .build/paths --out .build/paths-speed   # the GPU kit

Old path: one `python -m tirtune.builder.compile_one` process per candidate (Python + TVM import,
lowering, nvcc of the whole file to a host `.so`), `--jobs` at once, as the builder runs today.
New path: a `LoweringPool` of `--jobs` persistent processes lowers every candidate (device CUDA +
LaunchSpec), then `compile_batch` compiles `--batch` kernels per `nvcc -cubin`, `--jobs` batches
at once. CPU seconds are process CPU (user + system) of this process and all its children
(nvcc, cicc, ptxas, the pool's processes, their start included), not wall time.

SASS: each kernel's `cuobjdump -sass` text from the old `.so` and from the new cubin, with the
kernel's name, addresses and the `.text` section names normalised; instructions and their
encodings compared. Writes OUT/build-speed.{json,md} (default OUT: bench/results/builds, filed there
as <date>-build-speed.{json,md}); `--keep` keeps the built kernels
(the cubin path's launch.json + cubin, the .so) for bench/build_paths.py on the GPU host.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import resource
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tirtune.builder import toolchain
from tirtune.builder.build_pool import LoweringPool
from tirtune.builder.device_build import BatchItem, compile_batch
from tirtune.builder.tirx_builder import compile_candidate
from tirtune.core import Candidate, Config, Outcome, Problem
from tirtune.space import TEMPLATE_VERSION

logger = logging.getLogger("build_speed")
RESULTS = Path(__file__).parent / "results"


def proof_set() -> list[tuple[Config, Problem]]:
    """Configs over every launch variant: the v3 tails (clusters, ping-pong, thread loader), the v4
    tails (epilogue warpgroup, four consumers), then v5 draws (swap_ab, split_k, bf16, L2 knobs)."""
    from bench.prebuild import SET_V4_TAILS, SETS, _fuzz_v5

    entries = [*SETS["v3-tails"](), *SET_V4_TAILS, *_fuzz_v5(40, seed=6)]
    return [(e[-2], e[-1]) for e in entries]


def speed_set(count: int) -> list[tuple[Config, Problem]]:
    """`count` configs spread evenly over the proof set."""
    every = proof_set()
    step = max(1, len(every) // count)
    return every[::step][:count]


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def build_old(pairs: list[tuple[Config, Problem]], cache: Path, jobs: int) -> list[Any]:
    def one(pair: tuple[Config, Problem]) -> Any:
        return compile_candidate(Candidate(pair[0], pair[1], TEMPLATE_VERSION), str(cache), 900.0)

    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(one, pairs))


def build_new(
    pairs: list[tuple[Config, Problem]], work: Path, jobs: int, batch: int
) -> tuple[list[Any], dict[str, Any]]:
    """(per pair: (Lowered, ItemResult | None)), figures of the stages."""
    candidates = [Candidate(c, p, TEMPLATE_VERSION) for c, p in pairs]
    started = _cpu()
    with LoweringPool(processes=jobs, timeout_s=600) as pool:
        lowered = pool.lower(candidates)
    lowered_cpu = _cpu()  # the pool's children count once they have ended: start-up included
    items = [BatchItem(low.source, low.spec.kernel, f"tk_{i}") if low.outcome is Outcome.OK and low.spec else None
             for i, low in enumerate(lowered)]
    chunks = [[it for it in items[i:i + batch] if it] for i in range(0, len(items), batch)]
    with ThreadPoolExecutor(jobs) as nvcc_pool:
        done = list(nvcc_pool.map(lambda ch: compile_batch(ch[1], work / f"batch{ch[0]}", timeout_s=900),
                                  enumerate(chunks)))
    compiled = {r.item.symbol: r for results in done for r in results}
    finished = _cpu()
    out = [(low, compiled.get(f"tk_{i}")) for i, low in enumerate(lowered)]
    # Steady state: what one more candidate costs a warm pool (its lowering in a child that has
    # imported TVM and lowered before, its share of a batch's nvcc), start-up amortised away.
    warm = [low.cpu_s for low in lowered[jobs:]] or [low.cpu_s for low in lowered]
    nvcc_per_kernel = (finished - lowered_cpu) / max(1, len(compiled))
    figures = {
        "lower_stage_cpu_s": round(lowered_cpu - started, 2),
        "lower_cpu_s_per_kernel_warm": round(sum(warm) / len(warm), 3),
        "nvcc_cpu_s_per_kernel": round(nvcc_per_kernel, 3),
        "steady_cpu_s_per_build": round(sum(warm) / len(warm) + nvcc_per_kernel, 2),
        "batch": batch,
    }
    return out, figures


_ADDRESS = re.compile(r"/\*[0-9a-f]{4,}\*/")
_ENCODING = re.compile(r"/\* (0x[0-9a-f]{16}) \*/")


def kernel_sass(text: str, name: str) -> tuple[list[str], list[str]]:
    """(instructions, encodings) of `name`'s SASS in cuobjdump's output, addresses dropped."""
    blocks = re.split(r"\n\s*Function : ", text)
    block = next((b for b in blocks[1:] if b.split("\n", 1)[0].strip() == name), None)
    if block is None:
        raise KeyError(f"no function {name} in the SASS")
    instructions, encodings = [], []
    for line in block.split("\n")[1:]:
        found = _ENCODING.findall(line)
        encodings += found
        code = _ENCODING.sub("", _ADDRESS.sub("", line)).strip()
        if code and not code.startswith(".") and "Fatbin" not in code and "===" not in code:
            instructions.append(re.sub(r"\s+", " ", code.replace(name, "KERNEL")))
    return instructions, encodings


def compare_sass(so: Path, cubin: Path, symbol: str) -> dict[str, Any]:
    old_text, new_text = toolchain.sass(so), toolchain.sass(cubin)
    old, old_enc = kernel_sass(old_text, "main_kernel")
    new, new_enc = kernel_sass(new_text, symbol)
    same = old == new
    record: dict[str, Any] = {"instructions": len(new), "identical": same, "encodings_identical": old_enc == new_enc}
    if not same:
        # Module-scope statics (serial split-K's workspace) are reached through the global-address
        # slots of constant bank 4; a batch cubin holds its neighbours' statics too, so the slots move.
        slots = re.compile(r"c\[0x4\]\[[^\]]*\]")
        record["identical_but_global_slots"] = [slots.sub("c[0x4][G]", x) for x in old] == [
            slots.sub("c[0x4][G]", x) for x in new]
    if not same:
        diff = [(i, a, b) for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b]
        record["old_instructions"] = len(old)
        record["first_differences"] = [{"at": i, "old": a, "new": b} for i, a, b in diff[:5]]
    return record


def _machine() -> str:
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} CPUs ({model or platform.processor()}), {platform.system()} {platform.release()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", type=int, default=12)
    parser.add_argument("--set", choices=("spread", "proof"), default="spread",
                        help="spread: --configs of the proof set, evenly; proof: all of it (the GPU kit)")
    parser.add_argument("--batch", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None, help="copy the built kernels here")
    parser.add_argument("--out", type=Path, default=RESULTS / "builds")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    pairs = proof_set() if args.set == "proof" else speed_set(args.configs)
    work = Path(tempfile.mkdtemp(prefix="build-speed-"))
    try:
        t0, w0 = _cpu(), time.perf_counter()
        old = build_old(pairs, work / "old", args.jobs)
        t1, w1 = _cpu(), time.perf_counter()
        new, figures = build_new(pairs, work / "new", args.jobs, args.batch)
        t2, w2 = _cpu(), time.perf_counter()
        logger.info("old %.1f CPU s (%.0f s wall), new %.1f CPU s (%.0f s wall)", t1 - t0, w1 - w0, t2 - t1, w2 - w1)
        rows = _rows(pairs, old, new)
        if args.keep:
            _keep(args.keep, pairs, old, new)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    built_old = sum(1 for r in old if r.ok)
    built_new = sum(1 for _, item in new if item is not None and item.cubin is not None)
    sass_same = sum(1 for r in rows if r.get("sass", {}).get("identical"))
    sass_slots = sum(1 for r in rows if r.get("sass", {}).get("identical_but_global_slots"))
    record = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "gpu": None,
        "cpu_s_per_build": {
            "old": round((t1 - t0) / len(pairs), 2), "new": round((t2 - t1) / len(pairs), 2),
            "configs": len(pairs), "machine": _machine(), "jobs": args.jobs,
            "built": {"old": built_old, "new": built_new},
            "wall_s": {"old": round(w1 - w0, 1), "new": round(w2 - w1, 1)},
            "new_stages": figures,
            # Both paths lower through tirtune/builder/tvm_patches.py (TVMScript's parser lookup without
            # inspect.getouterframes): 16.46 (old) and 3.31 (new) CPU s per build before it, 69 configs.
            "tvm_patches": "parser lookup by frame walk, doc trees kept per source, prim_func's caller frames "
                           "without getframeinfo (tirtune/builder/tvm_patches.py)",
        },
        "sass": {"identical": sass_same, "identical_but_global_slots": sass_slots,
                 "compared": sum(1 for r in rows if "sass" in r)},
        "kernels": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "build-speed.json").write_text(json.dumps(record, indent=1) + "\n")
    (args.out / "build-speed.md").write_text(_markdown(record))
    logger.info("wrote %s", args.out / "build-speed.json")
    return 0


def _rows(pairs: list[tuple[Config, Problem]], old: list[Any], new: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for i, ((config, problem), built, (low, item)) in enumerate(zip(pairs, old, new, strict=True)):
        row: dict[str, Any] = {"config": config.label(), "problem": str(problem), "old": built.outcome.value,
                               "new": "OK" if item is not None and item.cubin is not None else
                               (low.outcome.value if low.outcome is not Outcome.OK else "COMPILE_ERROR")}
        if built.ok and item is not None and item.cubin is not None:
            row["sass"] = compare_sass(Path(built.artifact), item.cubin, f"tk_{i}")
        elif item is not None and item.error is not None:
            row["new_error"] = item.error.root
        rows.append(row)
    return rows


def _keep(folder: Path, pairs: list[tuple[Config, Problem]], old: list[Any], new: list[Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    manifest = []
    for i, ((config, problem), built, (low, item)) in enumerate(zip(pairs, old, new, strict=True)):
        if not built.ok or item is None or item.cubin is None or low.spec is None:
            continue
        name = f"k{i:03d}"
        shutil.copy(built.artifact, folder / f"{name}.so")
        # The static symbol table only (tvm-ffi finds its entry in the dynamic one): the upload is capped.
        subprocess.run(["strip", "--strip-unneeded", str(folder / f"{name}.so")], check=False)
        shutil.copy(item.cubin, folder / f"{name}.cubin")
        (folder / f"{name}.launch.json").write_text(low.spec.renamed(f"tk_{i}").dumps())
        manifest.append({"name": name, "config": config.to_json(), "problem": problem.to_json()})
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))


def _markdown(record: dict[str, Any]) -> str:
    cpu = record["cpu_s_per_build"]
    lines = [
        "# Build speed: the .so path against the device-only cubin path", "",
        f"{record['date']}, {cpu['machine']}, {cpu['configs']} configs, {cpu['jobs']} at once "
        "(process CPU seconds of everything, children included; not wall).", "",
        "| path | CPU s per build | wall s (all) | built |", "| --- | --- | --- | --- |",
        f"| old: a process per candidate, nvcc to a host .so | {cpu['old']} | {cpu['wall_s']['old']} "
        f"| {cpu['built']['old']} |",
        f"| new: persistent lowering pool, {cpu['new_stages']['batch']} kernels per nvcc -cubin | {cpu['new']} "
        f"| {cpu['wall_s']['new']} | {cpu['built']['new']} |", "",
        f"New path's stages: {json.dumps(cpu['new_stages'])}", "",
        f"Both paths lower with {cpu.get('tvm_patches', 'TVM unpatched')} (before it, over 69 configs: "
        "16.46 CPU s per build old, 3.31 new; bench/results/archive/builds/2026-11-30-build-speed-proof-set.md).",
        "",
        f"SASS identical (instructions, addresses and kernel name normalised): {record['sass']['identical']} of "
        f"{record['sass']['compared']}; identical but for the constant-bank-4 slots of module-scope statics "
        f"(serial split-K's workspace: the batch cubin also holds its neighbours'): "
        f"{record['sass']['identical_but_global_slots']}.", "",
        "| config | problem | old | new | SASS instructions | identical | encodings identical |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in record["kernels"]:
        sass = row.get("sass", {})
        lines.append(f"| {row['config']} | {row['problem']} | {row['old']} | {row['new']} | "
                     f"{sass.get('instructions', '')} | {sass.get('identical', '')} | "
                     f"{sass.get('encodings_identical', '')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
