"""Stand-ins for the measuring child, at our own seam (its entry point): they misbehave the way
broken kernels do (hang, kill the process, poison the context, kill the GPU actor that owns the
child) without needing a GPU."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from tirtune.workers.measure import MeasureReply, MeasureRequest, RemeasureReply, RemeasureRequest

__all__ = ["dying_child", "gpu_less_child", "misbehaving_child"]


def misbehaving_child(conn: Any) -> None:
    conn.send({"ready": True, "info": {"gpu_name": "stand-in", "pid": os.getpid()}})
    while True:
        try:
            request: MeasureRequest | RemeasureRequest = conn.recv()
        except EOFError:
            return
        if isinstance(request, RemeasureRequest):
            conn.send(RemeasureReply(tuple(_ok(rounds=request.rounds) for _ in request.artifacts)))
            continue
        if request.artifact == "kill-actor":  # the actor (our parent) dies, as by an OOM kill
            os.kill(os.getppid(), signal.SIGKILL)
            os._exit(9)
        if request.artifact == "hang":
            time.sleep(3600)
        if request.artifact == "crash":
            os._exit(7)
        if request.artifact == "poison":
            conn.send(MeasureReply("LAUNCH_ERROR", "illegal memory access", fatal=True))
            os._exit(3)
        conn.send(_ok())


def _ok(**info: Any) -> MeasureReply:
    return MeasureReply("OK", times_ms=(1.0, 1.1), cublas_times_ms=(1.2,), info={"pid": os.getpid(), **info})


def gpu_less_child(conn: Any) -> None:
    conn.send({"ready": False, "error": "RuntimeError: no CUDA device visible"})


def dying_child(conn: Any) -> None:
    os._exit(4)  # dies before announcing itself (a broken driver, a missing library)
