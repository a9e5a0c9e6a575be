"""The compile pipeline as plain functions: TIRx -> CUDA source -> sm_90a (or sm_100a) binary -> SASS.

`lower_to_cuda` runs the TIRx pipeline and exports one standalone CUDA C++ file (the kernel plus
a tvm-ffi host wrapper that encodes the TMA tensor maps and launches). `nvcc_shared_library`
turns it into a `.so` that needs only `libtvm_ffi.so` and `libcuda.so.1` at run time;
`nvcc_cubin` compiles the kernel alone (no host wrapper: a third of the time) for static checks.
Every step takes the target `arch` ("sm_90a" by default, "sm_100a" for the Blackwell branch).

No GPU is needed anywhere here. Linking needs a `libcuda.so`; CUDA images with a driver stub
provide one, and elsewhere a tiny stub with soname `libcuda.so.1` is built once into the cache
(the real driver is what the loader finds on the GPU host).

Every failure raises a `ToolchainError` subclass whose message carries the useful tail of the
compiler's output; builders turn those into COMPILE_ERROR results.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirtune.builder.diagnosis import root_cause
from tirtune.builder.errors import WorkerError
from tirtune.core import Config, Problem
from tirtune.space.branches import BRANCHES, DEFAULT_ARCH

__all__ = [
    "ARCH",
    "LoweringError",
    "NvccError",
    "PtxasResources",
    "ToolchainError",
    "cuobjdump_path",
    "libcuda_link_dir",
    "lower_priority",
    "lower_to_cuda",
    "gencode",
    "nvcc_command",
    "nvcc_cubin",
    "nvcc_path",
    "nvcc_shared_library",
    "niced",
    "ptxas_resources",
    "sass",
    "tail",
]

logger = logging.getLogger(__name__)

# The targets are the registry's (tirtune.space.branches): one per template branch.
ARCH = DEFAULT_ARCH
GENCODE = BRANCHES[ARCH].gencode
ARCHS = tuple(BRANCHES)


# Builds run this much nicer than the rest (nvcc and the lowering processes): a GPU runner's
# measuring child then gets a core at once on a host whose builders fill every core.
BUILD_NICENESS = 10


def niced(cmd: list[str]) -> list[str]:
    """`cmd` run at BUILD_NICENESS (through nice(1) where the host has it)."""
    nice = shutil.which("nice")
    return [nice, "-n", str(BUILD_NICENESS), *cmd] if nice else cmd


def lower_priority() -> None:
    """This process at BUILD_NICENESS (a build process's first step); a host that refuses is left as it is."""
    try:
        raise_by = BUILD_NICENESS - os.nice(0)
        if raise_by > 0:
            os.nice(raise_by)
    except OSError:
        pass


def gencode(arch: str = ARCH) -> str:
    """nvcc's -gencode flag for one architecture-specific target ("sm_100a" -> compute_100a/sm_100a)."""
    if arch not in BRANCHES:
        raise ToolchainError(f"unknown target arch {arch!r}; known: {', '.join(ARCHS)}")
    return BRANCHES[arch].gencode


# Unused-function and unused-variable remarks from the generated helpers drown real diagnostics.
_QUIET = ("-diag-suppress=174,177,550",)
# Driver API symbols the exported host wrapper may call. The stub only has to satisfy the link
# and carry the soname; at run time the real libcuda.so.1 provides the implementations.
_DRIVER_SYMBOLS = (
    "cuGetErrorString",
    "cuGetErrorName",
    "cuTensorMapEncodeTiled",
    "cuTensorMapEncodeIm2col",
    "cuTensorMapReplaceAddress",
    "cuDriverGetVersion",
    "cuInit",
    "cuLaunchKernelEx",
    "cuFuncSetAttribute",
    "cuGetProcAddress",
)
_STUB_DIRS = ("/usr/local/cuda/targets/x86_64-linux/lib/stubs", "/usr/local/cuda/lib64/stubs")
TAIL_CHARS = 4000


class ToolchainError(WorkerError):
    """A stage of the compile pipeline failed; the message holds the tool's output tail and
    `root` the one line that says why (`diagnosis.root_cause` of the tool's whole output)."""

    def __init__(self, message: str, root: str | None = None) -> None:
        super().__init__(message)
        self.root = root or root_cause(message)


class LoweringError(ToolchainError):
    """TIRx tracing or lowering rejected the kernel."""


class NvccError(ToolchainError):
    """nvcc, ptxas or the linker rejected the generated CUDA."""


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    """The last `limit` characters: compilers put the decisive line last."""
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _exception_chain(exc: BaseException) -> str:
    # The TVMScript parser re-raises with "run with TVM_BACKTRACE=1" and keeps the real cause
    # in __context__; show every link, innermost last.
    parts: list[str] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        parts.append(f"{type(cur).__name__}: {cur}")
        cur = cur.__cause__ or cur.__context__
    return "\n-- caused by --\n".join(parts)


# The TVMScript parser builds Python ASTs (when tracing a template, and again when lowering
# dispatches tile ops written in TVMScript), and CPython 3.11's ast module is not thread-safe
# ("SystemError: AST constructor recursion depth mismatch" when two threads parse at once): one
# lowering at a time per process. Builders use child processes, so this only serializes threads.
_TRACE_LOCK = threading.Lock()


def lower_to_cuda(config: Config, problem: Problem, template: Any = None, arch: str = ARCH) -> str:
    """Standalone CUDA C++ (kernel + tvm-ffi host wrapper) for one (config, problem).

    `template` is a `build(config, problem) -> PrimFunc` callable; the Hopper GEMM by default.
    TVM does not check that the kernel suits `arch` (a tcgen05 kernel lowers for sm_90a): ptxas does.
    """
    try:
        import tvm

        from tirtune.builder import tvm_patches

        if template is None:
            from tirtune.kernels import build as template
        with _TRACE_LOCK, tvm_patches.lowering():
            func = template(config, problem)
            target = tvm.target.Target({"kind": "cuda", "arch": arch}, host="cuda_host")
            executable = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline="tirx")
            return str(tvm.backend.cuda.export_cuda_host(executable.mod))
    except Exception as exc:  # TVM raises many unrelated types; all mean "this kernel failed"
        what = f"lowering {config.label()} for {problem} failed"
        chain = _exception_chain(exc)
        raise LoweringError(f"{what}:\n{tail(chain)}", root=root_cause(chain)) from exc


def nvcc_path() -> str:
    found = os.environ.get("TIRTUNE_NVCC") or shutil.which("nvcc")
    if found is None and Path("/usr/local/cuda/bin/nvcc").exists():
        found = "/usr/local/cuda/bin/nvcc"
    if found is None:
        raise ToolchainError("nvcc not found: put it on PATH or set TIRTUNE_NVCC")
    return found


def _tvm_ffi_dirs() -> tuple[list[str], str]:
    import tvm_ffi.libinfo as libinfo

    includes = list(dict.fromkeys([*libinfo.include_paths(), libinfo.find_dlpack_include_path()]))
    return includes, str(Path(libinfo.find_libtvm_ffi()).parent)


def libcuda_link_dir(cache_dir: Path, cc: str | None = None) -> str:
    """A directory holding a linkable libcuda.so: the CUDA stubs, or a stub built once here."""
    for candidate in _STUB_DIRS:
        if (Path(candidate) / "libcuda.so").exists():
            return candidate
    stub_dir = Path(cache_dir) / "libcuda-stub"
    stub = stub_dir / "libcuda.so"
    if stub.exists():
        return str(stub_dir)
    stub_dir.mkdir(parents=True, exist_ok=True)
    # Several builders may race to make it: one builds under the lock, the others find it done.
    with open(stub_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stub.exists():
            _build_libcuda_stub(stub, cc or shutil.which("cc") or shutil.which("gcc") or "gcc")
    return str(stub_dir)


def _build_libcuda_stub(stub: Path, cc: str) -> None:
    source = "".join(f"int {name}(void) {{ return 999; }}\n" for name in _DRIVER_SYMBOLS)
    with tempfile.TemporaryDirectory(dir=stub.parent) as tmp:
        c_file = Path(tmp) / "libcuda_stub.c"
        c_file.write_text(source)
        out = Path(tmp) / "libcuda.so"
        cmd = [cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", str(c_file), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ToolchainError(f"building the libcuda link stub failed:\n{tail(proc.stderr)}")
        os.replace(out, stub)  # atomic: a reader never sees half a library
    logger.info("built libcuda link stub %s", stub)


def nvcc_command(
    cu_path: Path, so_path: Path, cache_dir: Path, verbose_ptxas: bool = True, arch: str = ARCH
) -> list[str]:
    includes, ffi_lib = _tvm_ffi_dirs()
    cmd = [nvcc_path(), "-std=c++17", "-O3", "-shared", "-Xcompiler", "-fPIC", gencode(arch), *_QUIET]
    if verbose_ptxas:
        cmd += ["-Xptxas", "-v"]
    cmd += [f"-I{d}" for d in includes]
    cmd += [str(cu_path), "-o", str(so_path), f"-L{ffi_lib}", "-ltvm_ffi", f"-L{libcuda_link_dir(cache_dir)}", "-lcuda"]
    return cmd


def nvcc_shared_library(
    cu_path: Path | str,
    so_path: Path | str,
    timeout_s: float | None = None,
    cache_dir: Path | str | None = None,
    arch: str = ARCH,
) -> str:
    """Compile `cu_path` into `so_path`; returns nvcc's output (ptxas -v resource lines included).

    Raises NvccError with the output tail on failure, subprocess.TimeoutExpired on timeout.
    """
    cu_path, so_path = Path(cu_path), Path(so_path)
    if cache_dir is None:
        from tirtune.settings import get_settings

        cache_dir = get_settings().cache_dir
    cmd = nvcc_command(cu_path, so_path, Path(cache_dir), arch=arch)
    return _run_nvcc(cmd, timeout_s)


def nvcc_cubin(cu_path: Path | str, cubin_path: Path | str, arch: str = ARCH, timeout_s: float | None = None) -> str:
    """Compile only the device code of `cu_path` into a cubin (`nvcc -cubin`, ptxas -v output returned).

    The host wrapper is parsed but not compiled to machine code, which saves most of the time; the
    result can be read by `sass` but not loaded by tvm-ffi.
    """
    includes, _ = _tvm_ffi_dirs()
    cmd = [
        nvcc_path(),
        "-std=c++17",
        "-O3",
        "-cubin",
        gencode(arch),
        *_QUIET,
        "-Xptxas",
        "-v",
        *[f"-I{d}" for d in includes],
        str(cu_path),
        "-o",
        str(cubin_path),
    ]
    return _run_nvcc(cmd, timeout_s)


def _run_nvcc(cmd: list[str], timeout_s: float | None) -> str:
    logger.debug("running %s", " ".join(cmd))
    proc = subprocess.run(niced(cmd), capture_output=True, text=True, timeout=timeout_s, check=False)
    output = (proc.stdout or "") + (proc.stderr or "")
    if proc.returncode != 0:
        raise NvccError(f"nvcc exited with {proc.returncode}:\n{tail(output)}", root=root_cause(output))
    return output


def cuobjdump_path() -> str:
    """cuobjdump from PATH, the CUDA install, or the nvidia-cuda-cuobjdump wheel."""
    found = os.environ.get("TIRTUNE_CUOBJDUMP") or shutil.which("cuobjdump")
    if found:
        return found
    candidates = [Path(nvcc_path()).parent / "cuobjdump"]
    try:
        import nvidia

        for root in nvidia.__path__:
            candidates += sorted(Path(root).glob("cu*/bin/cuobjdump"))
    except ImportError:
        pass
    candidates.append(
        Path(sys.prefix)
        / "lib"
        / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        / "site-packages"
        / "nvidia"
        / "cu13"
        / "bin"
        / "cuobjdump"
    )
    for path in candidates:
        if path.exists():
            return str(path)
    raise ToolchainError("cuobjdump not found: pip install nvidia-cuda-cuobjdump or set TIRTUNE_CUOBJDUMP")


def sass(binary_path: Path | str, timeout_s: float = 120.0) -> str:
    """The SASS of every kernel in a .so, .cubin or executable (cuobjdump -sass; needs nvdisasm,
    e.g. from the nvidia-cuda-nvdisasm wheel)."""
    tool = cuobjdump_path()
    env = dict(os.environ)
    # cuobjdump shells out to nvdisasm; the wheels install it beside cuobjdump, off PATH.
    if not shutil.which("nvdisasm") and (Path(tool).parent / "nvdisasm").exists():
        env.setdefault("NVDISASM_PATH", str(Path(tool).parent))
    proc = subprocess.run(
        [tool, "-sass", str(binary_path)], capture_output=True, text=True, timeout=timeout_s, check=False, env=env
    )
    if proc.returncode != 0:
        raise ToolchainError(f"cuobjdump -sass {binary_path} failed:\n{tail(proc.stderr + proc.stdout)}")
    return proc.stdout


@dataclass(frozen=True, slots=True)
class PtxasResources:
    """What ptxas reported for one kernel (from `-Xptxas -v`)."""

    registers: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    smem_bytes: int = 0

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0

    def to_json(self) -> dict[str, int]:
        return {
            "registers": self.registers,
            "spill_stores": self.spill_stores,
            "spill_loads": self.spill_loads,
            "stack_bytes": self.stack_bytes,
            "smem_bytes": self.smem_bytes,
        }


_REGS = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_SMEM = re.compile(r"(\d+) bytes smem")


def ptxas_resources(nvcc_output: str) -> PtxasResources | None:
    """Parse the device kernel's lines of `-Xptxas -v` output; None if there are none."""
    regs = _REGS.findall(nvcc_output)
    spill = _SPILL.findall(nvcc_output)
    if not regs or not spill:
        return None
    smem = _SMEM.findall(nvcc_output)
    stack, stores, loads = (int(x) for x in spill[-1])
    return PtxasResources(
        registers=int(regs[-1]),
        spill_stores=stores,
        spill_loads=loads,
        stack_bytes=stack,
        smem_bytes=int(smem[-1]) if smem else 0,
    )
