"""Persistent lowering processes: TVM imported once per process, each lowering still killable.

A `LoweringPool` keeps `processes` spawned children, each of which imports TVM and the template
once and then lowers one (config, problem) at a time (`device_build.lower_device`: device CUDA +
LaunchSpec). The parent hands work to idle children and watches a deadline per lowering: a child
that runs past it is killed (SIGKILL) and replaced, its candidate a TIMEOUT; a child that dies is
replaced, its candidate a COMPILE_ERROR. Nothing a candidate does takes the pool down.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from tirtune.core import Candidate, Config, Outcome, Problem
from tirtune.core.launch import LaunchSpec

__all__ = ["Lowered", "LoweringPool"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Lowered:
    """One candidate's lowering: the device source and launch spec, or why there is none."""

    candidate: Candidate
    outcome: Outcome
    source: str = ""
    spec: LaunchSpec | None = None
    message: str = ""
    seconds: float = 0.0
    cpu_s: float = 0.0  # the child's CPU time for this lowering


def _serve(conn: Any, template: str, arch: str) -> None:
    """Child: import once (at BUILD_NICENESS: it yields to a measuring child), then lower until EOF."""
    from tirtune.builder import toolchain

    toolchain.lower_priority()
    import tvm  # noqa: F401  (once per process: the point of the pool)

    from tirtune.builder import device_build
    from tirtune.kernels.gemm import load
    from tirtune.space.branches import branch

    table = branch(arch).knobs

    build = load(template)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            config_json, problem_json = conn.recv()
        except EOFError:
            return
        cpu = time.process_time()
        try:
            config, problem = Config.from_json(config_json, table), Problem(**problem_json)
            source, spec = device_build.lower_device(config, problem, build, arch)
            conn.send(("ok", source, spec.to_json(), time.process_time() - cpu))
        except toolchain.ToolchainError as exc:
            conn.send(("error", f"lowering failed: {exc.root}\n{exc}", "", time.process_time() - cpu))


class _Child:
    def __init__(self, template: str, arch: str, start_timeout_s: float) -> None:
        ctx = mp.get_context("spawn")  # no fork of a process that may hold threads or TVM state
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, template, arch), daemon=True, name="tirtune-lower")
        self.proc.start()
        child.close()
        self.start_timeout_s = start_timeout_s
        self.job: tuple[int, float] | None = None  # (index in the batch, deadline)

    def ready(self) -> _Child:
        """Wait for the child's import of TVM (started in __init__, so children start together)."""
        if not self.conn.poll(self.start_timeout_s):
            self.kill()
            raise RuntimeError(f"lowering process did not start within {self.start_timeout_s:.0f}s")
        self.conn.recv()
        return self

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=10)
        self.conn.close()


class LoweringPool:
    """`lower(batch)`: one Lowered per candidate, in order. `close()` ends the children."""

    def __init__(
        self,
        processes: int = 2,
        timeout_s: float = 180.0,
        template: str | None = None,
        arch: str | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        from tirtune.space.branches import BRANCHES, DEFAULT_ARCH, branch_for_template

        self.template = template or BRANCHES[DEFAULT_ARCH].template
        self.arch = arch or branch_for_template(self.template).arch
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        # All started before any is waited for: each imports TVM for seconds, and 32 in a row took
        # minutes on the 32-core H200 host.
        starting = [_Child(self.template, self.arch, self.start_timeout_s) for _ in range(max(1, processes))]
        try:
            self.children = [c.ready() for c in starting]
        except RuntimeError:
            for c in starting:
                c.kill()
            raise
        self.replaced = 0

    def _spawn(self) -> _Child:
        return _Child(self.template, self.arch, self.start_timeout_s).ready()

    def lower(
        self, batch: Sequence[Candidate], on_result: Callable[[int, Lowered], None] | None = None
    ) -> list[Lowered]:
        """One Lowered per candidate, in order; `on_result(index, lowered)` is called (in this
        thread) as each arrives, so a caller can compile the first while the rest still lower."""
        results: list[Lowered | None] = [None] * len(batch)
        queue = list(range(len(batch)))
        started: dict[int, float] = {}
        while queue or any(c.job for c in self.children):
            for child in self.children:
                if child.job is None and queue:
                    i = queue.pop(0)
                    started[i] = time.monotonic()
                    child.conn.send((batch[i].config.to_json(), batch[i].problem.to_json()))
                    child.job = (i, started[i] + self.timeout_s)
            busy = [c for c in self.children if c.job]
            nearest = min(c.job[1] for c in busy if c.job)
            ready = wait([c.conn for c in busy], timeout=max(0.0, nearest - time.monotonic()))
            for slot, child in enumerate(list(self.children)):
                if child.job is None:
                    continue
                i, deadline = child.job
                if child.conn in ready:
                    done = self._receive(child, batch[i], time.monotonic() - started[i], slot)
                elif time.monotonic() >= deadline:
                    done = Lowered(
                        batch[i],
                        Outcome.TIMEOUT,
                        message=f"lowering timed out after {self.timeout_s:g}s: killed",
                        seconds=time.monotonic() - started[i],
                    )
                    self._replace(slot)
                else:
                    continue
                results[i] = done
                if on_result is not None:
                    on_result(i, done)
        return [r for r in results if r is not None]

    def _receive(self, child: _Child, candidate: Candidate, seconds: float, slot: int) -> Lowered:
        try:
            status, payload, spec, cpu_s = child.conn.recv()
        except (EOFError, OSError):
            code = child.proc.exitcode
            self._replace(slot)
            return Lowered(
                candidate, Outcome.COMPILE_ERROR, message=f"lowering process died (exit code {code})", seconds=seconds
            )
        child.job = None
        if status == "ok":
            return Lowered(candidate, Outcome.OK, payload, LaunchSpec.from_json(spec), seconds=seconds, cpu_s=cpu_s)
        return Lowered(candidate, Outcome.COMPILE_ERROR, message=payload, seconds=seconds, cpu_s=cpu_s)

    def _replace(self, slot: int) -> None:
        self.children[slot].kill()
        self.replaced += 1
        self.children[slot] = self._spawn()

    def pids(self) -> list[int]:
        return [c.proc.pid for c in self.children if c.proc.pid is not None]

    def close(self) -> None:
        for child in self.children:
            child.kill()
        self.children = []

    def __enter__(self) -> LoweringPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
