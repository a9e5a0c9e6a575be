"""Stand-ins for the measuring child, at our own seam (its entry point): they misbehave the way
broken kernels do (hang, kill the process, poison the context) without needing a GPU."""

from __future__ import annotations

import os
import time
from typing import Any

from tirtune.workers.measure import MeasureReply, MeasureRequest

__all__ = ["gpu_less_child", "misbehaving_child"]


def misbehaving_child(conn: Any) -> None:
    conn.send({"ready": True, "info": {"gpu_name": "stand-in", "pid": os.getpid()}})
    while True:
        try:
            request: MeasureRequest = conn.recv()
        except EOFError:
            return
        if request.artifact == "hang":
            time.sleep(3600)
        if request.artifact == "crash":
            os._exit(7)
        if request.artifact == "poison":
            conn.send(MeasureReply("LAUNCH_ERROR", "illegal memory access", fatal=True))
            os._exit(3)
        conn.send(MeasureReply("OK", times_ms=(1.0, 1.1), cublas_times_ms=(1.2,), info={"pid": os.getpid()}))


def gpu_less_child(conn: Any) -> None:
    conn.send({"ready": False, "error": "RuntimeError: no CUDA device visible"})
