"""Owns the measuring child process: starts it, feeds it, and kills it when it hangs or dies.

A hung kernel is killed with SIGKILL after the watchdog's deadline (TIMEOUT); a child that dies
or reports a poisoned CUDA context is replaced by a fresh one before the next candidate
(LAUNCH_ERROR). Nothing a candidate does can take the parent down.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from collections.abc import Callable
from typing import Any

from tirtune.workers.errors import WorkerError
from tirtune.workers.measure import MeasureReply, MeasureRequest, RemeasureReply, RemeasureRequest, serve

__all__ = ["ChildSupervisor"]

log = logging.getLogger(__name__)


class ChildSupervisor:
    def __init__(self, run_timeout_s: float = 60.0, start_timeout_s: float = 180.0, *,
                 target: Callable[[Any], None] = serve) -> None:
        self.target = target  # the child's entry point; tests substitute misbehaving ones
        self.run_timeout_s = run_timeout_s
        self.start_timeout_s = start_timeout_s
        self._proc: Any = None
        self._conn: Any = None
        self.info: dict[str, Any] = {}
        self.restarts = 0

    def start(self) -> dict[str, Any]:
        """Start the child if none is alive; return what it reported about its device."""
        if self._proc is not None and self._proc.is_alive():
            return self.info
        self._reap()
        ctx = mp.get_context("spawn")  # never fork a process that may hold a CUDA context
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=self.target, args=(child,), daemon=True, name="tirtune-measure")
        self._proc.start()
        child.close()
        self._conn = parent
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
        return self.info

    def measure(self, request: MeasureRequest | RemeasureRequest,
                timeout_s: float | None = None) -> MeasureReply | RemeasureReply:
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
            return MeasureReply("LAUNCH_ERROR", f"measuring process died (exit code {code}) after "
                                f"{time.monotonic() - began:.1f}s", fatal=True)
        if reply.fatal:
            self._kill()
            self.restarts += 1
        return reply

    def close(self) -> None:
        self._kill()

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
