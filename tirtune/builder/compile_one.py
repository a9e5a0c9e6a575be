"""Compile one candidate into a directory: `python -m tirtune.builder.compile_one ...`.

Runs in its own process (so a builder can kill a hung compile by its process group) and writes
into `--out`:

    kernel.cu    the exported CUDA source
    kernel.so    the shared library for the template's arch (its branch in tirtune.space.branches)
    build.log    lowering and nvcc output
    build.json   what was built, with timings and ptxas resources (written last)

Exit status: 0 built, 2 lowering failed, 3 nvcc failed, 1 anything else. The error goes to stderr,
where the builder picks it up: first a `ROOT_CAUSE_MARK` line with the one-line root cause
(`diagnosis.root_cause` of the tool's whole output, which the tail may have cut), then its tail.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tirtune.builder import toolchain
from tirtune.core import Config, Problem
from tirtune.core.artifacts import DIGEST_FIELD, sha256_hex
from tirtune.kernels.gemm import load
from tirtune.space.branches import BRANCHES, DEFAULT_ARCH, branch_for_template

__all__ = ["DEFAULT_TEMPLATE", "EXIT_LOWERING", "EXIT_NVCC", "ROOT_CAUSE_MARK", "load_template", "main"]

DEFAULT_TEMPLATE = BRANCHES[DEFAULT_ARCH].template
EXIT_LOWERING = 2
EXIT_NVCC = 3
ROOT_CAUSE_MARK = "tirtune-root-cause: "


def load_template(spec: str) -> Callable[[Config, Problem], Any]:
    """Resolve "package.module:function" to the template's build function."""
    return load(spec)


def compile_into(out: Path, config: Config, problem: Problem, template: str, cache_dir: Path) -> dict[str, Any]:
    """Lower and compile into `out`; raises toolchain errors. Returns the build.json record."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / "build.log"
    started = time.perf_counter()
    try:
        build = load_template(template)
    except (ImportError, AttributeError, ValueError) as exc:
        raise toolchain.LoweringError(f"cannot load template {template!r}: {exc}") from exc
    # The registry names the target of the template's branch (sm_100a for the Blackwell module).
    arch = branch_for_template(template).arch
    source = toolchain.lower_to_cuda(config, problem, build, arch=arch)
    lowered = time.perf_counter()
    (out / "kernel.cu").write_text(source)
    try:
        nvcc_output = toolchain.nvcc_shared_library(
            out / "kernel.cu", out / "kernel.so", cache_dir=cache_dir, arch=arch
        )
    except toolchain.NvccError as exc:
        log.write_text(f"lowering: {lowered - started:.2f} s\n{exc}\n")
        raise
    finished = time.perf_counter()
    resources = toolchain.ptxas_resources(nvcc_output)
    log.write_text(f"lowering: {lowered - started:.2f} s\nnvcc: {finished - lowered:.2f} s\n{nvcc_output}")
    return {
        "config": config.to_json(),
        "problem": problem.to_json(),
        "template": template,
        "arch": arch,
        "lower_s": round(lowered - started, 3),
        "nvcc_s": round(finished - lowered, 3),
        "ptxas": resources.to_json() if resources else None,
        "so_bytes": (out / "kernel.so").stat().st_size,
        # What loaders and GET /kernels check the module against (tirtune.core.artifacts).
        DIGEST_FIELD: sha256_hex((out / "kernel.so").read_bytes()),
    }


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tirtune.builder.compile_one", description=__doc__)
    parser.add_argument("--config", required=True, help="Config as JSON")
    parser.add_argument("--problem", required=True, help="Problem as JSON ({m, n, k, dtype})")
    parser.add_argument("--out", required=True, type=Path, help="directory to write into")
    parser.add_argument("--cache-dir", required=True, type=Path, help="where the libcuda link stub lives")
    parser.add_argument("--template", default=DEFAULT_TEMPLATE)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    config = Config.from_json(json.loads(args.config), branch_for_template(args.template).knobs)
    problem = Problem(**json.loads(args.problem))
    try:
        record = compile_into(args.out, config, problem, args.template, args.cache_dir)
    except toolchain.LoweringError as exc:
        sys.stderr.write(f"{ROOT_CAUSE_MARK}{exc.root}\n{exc}\n")
        return EXIT_LOWERING
    except toolchain.NvccError as exc:
        sys.stderr.write(f"{ROOT_CAUSE_MARK}{exc.root}\n{exc}\n")
        return EXIT_NVCC
    # Written last: its presence says the directory holds a complete build.
    (args.out / "build.json").write_text(json.dumps(record, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
