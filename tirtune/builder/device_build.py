"""Device code only: TIRx -> (device CUDA source, LaunchSpec) -> cubin, several kernels per nvcc call.

`lower_device` runs the same steps as `tvm.compile(mod, target(host="llvm"), tir_pipeline="tirx")`
(`tvm.tirx.build.build`: bind the target, the tirx pipeline, split host from device, finalize)
but stops before generating the host's machine code: the device module's CUDA source (the same
text as `tvm.compile(...).mod.imports[0].inspect_source("cuda")`, and as the device half of
today's exported file) and the host IR, from which `launch_spec.extract` reads the launch.

`compile_batch` compiles several kernels in one `nvcc -cubin` (C++ headers are parsed once, not
once per kernel): each kernel's source goes into its own namespace with its `extern "C"` entry
renamed to a unique symbol; the headers are first included once at global scope (every later
`#include` of them is a no-op behind its include guard). A batch that fails is split in halves
until the failing kernels stand alone, so one bad kernel never fails its neighbours and each
failure carries its own nvcc output and root cause.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirtune.builder import toolchain
from tirtune.builder.diagnosis import root_cause
from tirtune.builder.launch_spec import extract
from tirtune.core import Config, Problem
from tirtune.core.launch import LaunchSpec

__all__ = ["BatchItem", "ItemResult", "batch_source", "compile_batch", "cubin_command", "lower_device"]

logger = logging.getLogger(__name__)

# TVM's prelude defines max/min for half and bfloat16; inside a namespace those would hide CUDA's
# global max/min(int, int) ... from unqualified lookup (an int max became ambiguous, or could
# silently pick another overload). Bringing the global ones in keeps the single file's overload set.
_GLOBAL_OVERLOADS = ("using ::max;", "using ::min;")
_PREPROCESSOR = re.compile(r"^\s*#\s*(include|if|ifdef|ifndef|elif|else|endif)\b")


def lower_device(
    config: Config, problem: Problem, template: Any = None, arch: str = toolchain.ARCH
) -> tuple[str, LaunchSpec]:
    """(device-only CUDA source, LaunchSpec) of one (config, problem); LoweringError on failure."""
    try:
        import tvm
        from tvm.tirx.build import split_host_device_mods

        from tirtune.builder import tvm_patches

        if template is None:
            from tirtune.kernels import build as template
        with toolchain._TRACE_LOCK, tvm_patches.lowering():
            func = template(config, problem)
            target = tvm.target.Target({"kind": "cuda", "arch": arch}, host="llvm")
            mod = tvm.tirx.transform.BindTarget(target)(tvm.IRModule({"main": func}))
            pipeline, finalize_host, finalize_device = tvm.tirx.get_tir_pipeline("tirx")
            host_mod, device_mods = split_host_device_mods(pipeline(mod))
            spec = extract(host_mod, num_params=len(func.params), operands=tuple(str(v.name) for v in func.params))
            sources = [_codegen(finalize_device()(dev), tgt) for tgt, dev in device_mods.items() if len(dev.functions)]
        if len(sources) != 1:
            raise toolchain.LoweringError(f"expected one device module, got {len(sources)}")
        return sources[0], spec
    except toolchain.LoweringError:
        raise
    except Exception as exc:  # TVM raises many unrelated types; all mean "this kernel failed"
        chain = toolchain._exception_chain(exc)
        raise toolchain.LoweringError(
            f"lowering {config.label()} for {problem} failed:\n{toolchain.tail(chain)}", root=root_cause(chain)
        ) from exc


def _codegen(device_mod: Any, target: Any) -> str:
    import tvm

    build = tvm.get_global_func("target.build." + target.kind.name)
    return str(build(device_mod, target).inspect_source("cuda"))


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One kernel to compile: its device source, the entry symbol in it, and the unique symbol
    it gets in the batch (and in the cubin)."""

    source: str
    kernel: str
    symbol: str


@dataclass(frozen=True, slots=True)
class ItemResult:
    """A batch member's outcome: its cubin (shared with its batch) and ptxas resources, or an error."""

    item: BatchItem
    cubin: Path | None
    resources: toolchain.PtxasResources | None = None
    error: toolchain.NvccError | None = None
    batch_size: int = 1
    seconds: float = 0.0
    timed_out: bool = False


def batch_source(items: Sequence[BatchItem]) -> str:
    """One translation unit holding every item's kernel under its own namespace and symbol."""
    prelude: list[str] = []
    for item in items:  # each source's includes under their own conditions, at global scope
        logical = item.source.replace("\\\n", " ").splitlines()  # join continued directives
        prelude += [line for line in logical if _PREPROCESSOR.match(line)]
        prelude.append("")
    parts = ["// tirtune device batch: headers first at global scope (later includes are no-ops)", *prelude]
    for i, item in enumerate(items):
        body = re.sub(rf"\b{re.escape(item.kernel)}\b", item.symbol, item.source)
        parts += [f"namespace tirtune_k{i} {{", *_GLOBAL_OVERLOADS, body, f"}}  // namespace tirtune_k{i}", ""]
    return "\n".join(parts)


def cubin_command(cu_path: Path, cubin_path: Path, arch: str = toolchain.ARCH) -> list[str]:
    """The project's nvcc flags (toolchain.nvcc_command's, less the host side), to a cubin."""
    return [
        toolchain.nvcc_path(),
        "-std=c++17",
        "-O3",
        "-cubin",
        toolchain.gencode(arch),
        *toolchain._QUIET,
        "-Xptxas",
        "-v",
        str(cu_path),
        "-o",
        str(cubin_path),
    ]


def compile_batch(
    items: Sequence[BatchItem], work: Path, arch: str = toolchain.ARCH, timeout_s: float | None = None
) -> list[ItemResult]:
    """Compile `items` into cubins under `work`, splitting failed or hung batches; one result per
    item, in order. `timeout_s` bounds each nvcc call (a batch's, then its halves')."""
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, ItemResult] = {}
    _compile(list(items), work, arch, timeout_s, results, tag="b")
    return [results[item.symbol] for item in items]


def _compile(
    items: list[BatchItem], work: Path, arch: str, timeout_s: float | None, results: dict[str, ItemResult], tag: str
) -> None:
    started = time.perf_counter()
    cu, cubin = work / f"{tag}.cu", work / f"{tag}.cubin"
    # A lone kernel compiles as generated (no namespace): the same text the old path compiled.
    cu.write_text(
        batch_source(items)
        if len(items) > 1
        else re.sub(rf"\b{re.escape(items[0].kernel)}\b", items[0].symbol, items[0].source)
    )
    code, output = _run(cubin_command(cu, cubin, arch), timeout_s)
    seconds = time.perf_counter() - started
    if code == 0:
        per_kernel = _ptxas_by_kernel(output)
        for item in items:
            results[item.symbol] = ItemResult(
                item, cubin, per_kernel.get(item.symbol), None, len(items), seconds / len(items)
            )
        return
    if len(items) == 1:
        if code is None:
            error = toolchain.NvccError(
                f"nvcc timed out after {timeout_s:g}s: killed\n{toolchain.tail(output)}",
                root=f"nvcc timed out after {timeout_s:g}s",
            )
        else:
            error = toolchain.NvccError(f"nvcc exited with {code}:\n{toolchain.tail(output)}", root=root_cause(output))
        results[items[0].symbol] = ItemResult(items[0], None, None, error, 1, seconds, timed_out=code is None)
        return
    # A failed (or hung) batch: halves, until the culprits stand alone.
    logger.info("batch %s of %d kernels failed (exit %s); splitting", tag, len(items), code)
    half = len(items) // 2
    _compile(items[:half], work, arch, timeout_s, results, tag + "0")
    _compile(items[half:], work, arch, timeout_s, results, tag + "1")


def _run(cmd: list[str], timeout_s: float | None) -> tuple[int | None, str]:
    """Run `cmd` in its own process group; (None, output) when it ran past `timeout_s`: then the
    whole group (nvcc, cicc, ptxas) is killed."""
    proc = subprocess.Popen(
        toolchain.niced(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, output or ""
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return None, output or ""


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")


def _ptxas_by_kernel(output: str) -> dict[str, toolchain.PtxasResources]:
    """ptxas -v resource lines split per entry function."""
    found: dict[str, toolchain.PtxasResources] = {}
    starts = [(m.start(), m.group(1)) for m in _ENTRY.finditer(output)]
    for i, (pos, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(output)
        resources = toolchain.ptxas_resources(output[pos:end])
        if resources is not None:
            found[name] = resources
    return found
