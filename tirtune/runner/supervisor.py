"""Owns the measuring child process: starts it, feeds it, and kills it when it hangs or dies.

A hung kernel is killed with SIGKILL after the watchdog's deadline (TIMEOUT); a child that dies
or reports a poisoned CUDA context is replaced by a fresh one before the next candidate
(LAUNCH_ERROR). Nothing a candidate does can take the parent down.

With `spare=True` a second child is kept waiting beside the measuring one: it has done its slow
imports (`prepare`, torch for the real child: seconds) but holds no CUDA context and runs nothing
on the GPU until it is given the go (`Go`) to become the measuring child. Replacing a child (after a
hang or a crash, or for a re-measurement's next fresh process) then costs its CUDA start and
warm-up instead of a whole process start.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tirtune.runner.errors import WorkerError
from tirtune.runner.measure import MeasureReply, MeasureRequest, RemeasureReply, RemeasureRequest, serve

__all__ = ["ChildSupervisor", "Go"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Go:
    """What a spare child is told when it becomes the measuring child: `warm_s`, the seconds of
    GEMMs that warm the card first (None: the child's own default)."""

    warm_s: float | None = None


def _child_main(target: Callable[..., None], prepare: Callable[[], None] | None, conn: Any, spare: bool) -> None:
    """Every child's entry: the measuring child at once, or a spare that prepares and waits for its Go."""
    if not spare:
        target(conn)
        return
    if prepare is not None:
        prepare()
    try:
        go: Go = conn.recv()
    except EOFError:  # retired without ever measuring
        return
    if go.warm_s is None:
        target(conn)
    else:
        target(conn, warm_s=go.warm_s)


def _prepare_measuring() -> None:
    """The real child's slow part that needs no GPU: importing torch."""
    import torch  # noqa: F401


class ChildSupervisor:
    def __init__(
        self,
        run_timeout_s: float = 60.0,
        start_timeout_s: float = 180.0,
        *,
        target: Callable[..., None] = serve,
        spare: bool = False,
        prepare: Callable[[], None] | None = None,
    ) -> None:
        """`target`: the child's entry point (tests substitute misbehaving ones), called as
        `target(conn)`, or `target(conn, warm_s=...)` when a spare is started with a warm-up of its
        own. `spare`: keep a prepared child waiting (module docstring); `prepare`: what a spare
        does before it waits (default: import torch when the target is the real child)."""
        self.target = target
        self.run_timeout_s = run_timeout_s
        self.start_timeout_s = start_timeout_s
        self.keep_spare = spare
        if prepare is None and target is serve:
            prepare = _prepare_measuring
        self.prepare = prepare
        self._proc: Any = None
        self._conn: Any = None
        self._spare: tuple[Any, Any] | None = None  # (process, parent end of its pipe)
        self.info: dict[str, Any] = {}
        self.restarts = 0
        self.spares_used = 0

    def _spawn(self, spare: bool) -> tuple[Any, Any]:
        ctx = mp.get_context("spawn")  # never fork a process that may hold a CUDA context
        parent, child = ctx.Pipe()
        proc = ctx.Process(
            target=_child_main,
            args=(self.target, self.prepare, child, spare),
            daemon=True,
            name="tirtune-measure-spare" if spare else "tirtune-measure",
        )
        proc.start()
        child.close()
        return proc, parent

    def start(self, warm_s: float | None = None) -> dict[str, Any]:
        """Start the child if none is alive (the spare, when one waits, given `warm_s`); return
        what it reported about its device. A fresh child warms the card for its own default."""
        if self._proc is not None and self._proc.is_alive():
            return self.info
        self._reap()
        spare, self._spare = self._spare, None
        if spare is not None and spare[0].is_alive():
            self._proc, self._conn = spare
            try:
                self._conn.send(Go(warm_s))
                self.spares_used += 1
            except (BrokenPipeError, OSError):  # it died just now: start one the slow way
                self._kill()
                self._proc, self._conn = self._spawn(spare=False)
        else:
            if spare is not None:
                _end(*spare)
            self._proc, self._conn = self._spawn(spare=False)
        parent = self._conn
        if not parent.poll(self.start_timeout_s):
            self._kill()
            raise WorkerError(f"measuring process did not start within {self.start_timeout_s:.0f}s")
        try:
            hello = parent.recv()
        except (EOFError, OSError) as exc:  # it died before saying hello
            code = self._exitcode()
            self._kill()
            raise WorkerError(f"measuring process died while starting (exit code {code})") from exc
        if not hello.get("ready"):
            self._kill()
            raise WorkerError(f"measuring process cannot use the GPU: {hello.get('error')}")
        self.info = hello["info"]
        if self.keep_spare:
            self._spare = self._spawn(spare=True)
        return self.info

    def measure(
        self, request: MeasureRequest | RemeasureRequest, timeout_s: float | None = None
    ) -> MeasureReply | RemeasureReply:
        """The child's reply, or a TIMEOUT / LAUNCH_ERROR MeasureReply when it hung or died.

        `timeout_s` overrides the watchdog's deadline for this request (a re-measurement of
        several kernels takes longer than one measurement)."""
        self.start()
        began = time.monotonic()
        deadline = self.run_timeout_s if timeout_s is None else timeout_s
        try:
            self._conn.send(request)
            if not self._conn.poll(deadline):
                self._kill()
                self.restarts += 1
                return MeasureReply("TIMEOUT", f"no answer within {deadline:.0f}s: killed (hang or deadlock)")
            reply: MeasureReply | RemeasureReply = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            code = self._exitcode()
            self._kill()
            self.restarts += 1
            return MeasureReply(
                "LAUNCH_ERROR",
                f"measuring process died (exit code {code}) after {time.monotonic() - began:.1f}s",
                fatal=True,
            )
        if reply.fatal:
            self._kill()
            self.restarts += 1
        return reply

    @property
    def spare_pid(self) -> int | None:
        """The waiting spare's process id (None when none waits)."""
        return None if self._spare is None else self._spare[0].pid

    def retire(self) -> None:
        """End the measuring child (the next request starts another: the spare, if one waits)."""
        self._kill()

    def close(self) -> None:
        """End the measuring child and the spare."""
        self._kill()
        spare, self._spare = self._spare, None
        if spare is not None:
            _end(*spare)

    def _exitcode(self) -> int | None:
        if self._proc is None:
            return None
        self._proc.join(timeout=5)
        code: int | None = self._proc.exitcode
        return code

    def _kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        self._reap()

    def _reap(self) -> None:
        if self._proc is not None:
            self._proc.join(timeout=10)
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None


def _end(proc: Any, conn: Any) -> None:
    """Kill a spare (it holds nothing worth a clean exit) and reap it."""
    if proc.is_alive():
        proc.kill()
    proc.join(timeout=10)
    conn.close()
