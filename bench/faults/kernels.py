"""Test-only variants of the Hopper GEMM kernel, each with exactly one defect.

None of this is reachable from the product: the search space knows only
`tirtune.kernels.hopper:build`; these are selected explicitly with
`TirxBuilder(template="bench.faults.kernels:<kind>")`. Each variant is the real kernel package
(`tirtune/kernels/hopper/`) with one textual edit in one of its modules (checked to apply exactly
once, so a kernel change that moves the edited line fails loudly instead of silently building a
healthy kernel), written as a package of its own under `$TIRTUNE_FAULTS_DIR`, or
`tirtune-faults` in the temp dir (the TVMScript parser reads a kernel's source from its file), and
imported from there.

    kind            defect                                              expected outcome
    deadlock        producer waits on the wrong initial `empty` phase  TIMEOUT (watchdog kill)
    out_of_bounds   epilogue writes one tile (blk_m rows) too low       WRONG_RESULT (guard bands)
    illegal_address epilogue writes 2^18 rows past D (unmapped memory)  LAUNCH_ERROR (CUDA fault)
    wrong_result    the last k16 step of every K tile is skipped        WRONG_RESULT (tolerance)
    ptxas_error     the store helper holds an instruction ptxas lacks   COMPILE_ERROR (nvcc/ptxas)
    smem_overflow   the smem rule is skipped: 5 x 48 KiB stages         LAUNCH_ERROR (launch refused)

Two more misbehave on the builder's side only (CI tests, no GPU): `hang_lowering` never returns
(compile TIMEOUT) and `kill_build_worker` kills the Ray worker that runs the compile.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.faults import FAULTS_DIR_ENV
from tirtune.core import Config, Problem
from tirtune.kernels import hopper
from tirtune.space.hopper.knobs import config as hopper_config

__all__ = ["FAULTS", "PACKAGE", "Fault", "patched_sources"]

PACKAGE = Path(hopper.__file__).parent  # the real kernel package the variants edit
FAR_ROWS = 1 << 18  # 2 GiB past D at N=4096 fp16, and (row + FAR_ROWS) * N still fits in int32


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    defect: str
    edits: tuple[tuple[str, str, str], ...]  # (module of the package, old text, new text)
    config: Config  # a config that shows the defect (the smem one breaks a rule on purpose)
    expected: str  # Outcome value
    message_has: str  # a fragment the result's message must contain


_WS = hopper_config(blk_m=128, blk_n=256, blk_k=64, stages=4, consumers=2, warp_specialized=True)
# The plain paired store (its next line names the fused value; swiglu's paired store has the same
# first line and multiplies two registers instead).
_NEXT = "\n                                                        fuse(acc[2 * q], row, col),"
_STORE = "T.evaluate(T.cuda.func_call(store2_name, D.ptr_to([row, col])," + _NEXT

FAULTS: dict[str, Fault] = {f.kind: f for f in (
    Fault("deadlock", "producer waits for the `empty` barrier's phase 0 to complete on a fresh barrier",
          (("loads.py", "empty.wait(ring.slot(j), ring.free_phase(j))", "empty.wait(ring.slot(j), ring.phase(j))"),),
          _WS, "TIMEOUT", "killed"),
    Fault("out_of_bounds", "epilogue stores every row blk_m rows too low (past the end of D for the last tiles)",
          (("epilogue.py", _STORE, "T.evaluate(T.cuda.func_call(store2_name, D.ptr_to([row + p.blk_m, col])," + _NEXT),),
          _WS, "WRONG_RESULT", "out-of-bounds write"),
    Fault("illegal_address", f"epilogue stores {FAR_ROWS} rows past D, into unmapped memory",
          (("epilogue.py", _STORE, f"T.evaluate(T.cuda.func_call(store2_name, D.ptr_to([row + {FAR_ROWS}, col]),"
                            + _NEXT),),
          _WS, "LAUNCH_ERROR", ""),
    Fault("wrong_result", "the k loop of each tile stops one k16 step early",
          (("mma.py", "mma_steps(acc0, desc_a, desc_b, s, c * ROW_BASE, steps, False)",
            "mma_steps(acc0, desc_a, desc_b, s, c * ROW_BASE, steps - 1, False)"),
           ("mma.py", "mma_steps(acc1, desc_a, desc_b, s, c * ROW_BASE + WGMMA_M, steps, False)",
            "mma_steps(acc1, desc_a, desc_b, s, c * ROW_BASE + WGMMA_M, steps - 1, False)")),
          _WS, "WRONG_RESULT", "relative error"),
    Fault("ptxas_error", "the epilogue's store helper carries an instruction that does not exist",
          (("epilogue.py", 'f"  *reinterpret_cast<{pair}*>(dst)',
            'f"  asm volatile(\\"tirtune.no_such_instruction.b32 %0;\\" :: \\"r\\"(0));\\n"\n'
            '              f"  *reinterpret_cast<{pair}*>(dst)'),),
          _WS, "COMPILE_ERROR", "ptxas"),
    Fault("smem_overflow", "the shared-memory rule is skipped: 5 stages of (128+256)x64 fp16 need 240 KiB > 227 KiB",
          (("plan.py", "    refuse_if_broken(TEMPLATE_NAME, config, problem, PROBLEM_RULES, config_rules)\n",
            "    pass  # fault injection: no rule may refuse\n"),),
          hopper_config(blk_m=128, blk_n=256, blk_k=64, stages=5, consumers=2, warp_specialized=True),
          "LAUNCH_ERROR", ""),
)}


def patched_sources(kind: str) -> dict[str, str]:
    """The kernel package's modules (file name -> source) with the fault's edits; ValueError unless
    each edit applies exactly once in its module."""
    sources = {path.name: path.read_text() for path in sorted(PACKAGE.glob("*.py"))}
    for module, old, new in FAULTS[kind].edits:
        count = sources[module].count(old)
        if count != 1:
            raise ValueError(f"fault {kind}: the edited text occurs {count} times in {module}, not once: {old!r}")
        sources[module] = sources[module].replace(old, new)
    return sources


def _module(kind: str) -> ModuleType:
    sources = patched_sources(kind)
    digest = hashlib.sha256("".join(f"{n}\0{s}\0" for n, s in sources.items()).encode()).hexdigest()[:12]
    name = f"tirtune_fault_{kind}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    folder = Path(os.environ.get(FAULTS_DIR_ENV) or Path(tempfile.gettempdir()) / "tirtune-faults") / name
    if not folder.exists():
        # A copy of the package under its own name: its modules import each other by that name.
        tmp = folder.with_name(f".{name}.{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        for file, source in sources.items():
            (tmp / file).write_text(source.replace(f"{hopper.__name__}.", f"{name}."))
        try:
            os.replace(tmp, folder)  # parallel builds never read half a package
        except OSError:  # another process put it there first
            shutil.rmtree(tmp, ignore_errors=True)
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its modules, and dataclasses, look the package up there
    spec.loader.exec_module(module)
    return module


def _variant(kind: str) -> Any:
    def build(config: Config, problem: Problem) -> Any:
        return _module(kind).build(config, problem)

    build.__name__ = kind
    return build


deadlock = _variant("deadlock")
out_of_bounds = _variant("out_of_bounds")
illegal_address = _variant("illegal_address")
wrong_result = _variant("wrong_result")
ptxas_error = _variant("ptxas_error")
smem_overflow = _variant("smem_overflow")


def hang_lowering(config: Config, problem: Problem) -> Any:
    """A template that never returns: the builder's timeout must kill the compile."""
    time.sleep(3600)


def kill_build_worker(config: Config, problem: Problem) -> Any:
    """Kill the process that runs this compile's Ray task, as an OOM kill or a crash would."""
    os.kill(os.getppid(), signal.SIGKILL)
    os._exit(9)
