"""A signal's action kept across code that installs its own, at the C level.

Ray's core worker, started in this process by `ray.init`, installs Abseil's failure-signal handler,
for SIGTERM as well as for crashes: on SIGTERM it prints a stack dump ("*** SIGTERM received at
time=... PC: @ ... epoll_wait", ten lines) and then hands the signal on, so a clean shutdown of
`tirtune serve` read like a crash. Python's `signal` module cannot see or restore a C handler (and
works only in the main thread, while Ray starts in a thread of its own), so the action is saved and
put back with sigaction(2) itself; libc's `struct sigaction` is copied whole without being read.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["action_kept"]

log = logging.getLogger(__name__)

_SIGACTION_BYTES = 1024  # larger than any libc's struct sigaction (glibc's is 152 bytes on 64-bit Linux)


@contextmanager
def action_kept(signum: int) -> Iterator[None]:
    """The process's action for `signum` is, after the block, what it was before it, whatever the
    block installed. From any thread; a libc that refuses is logged, and the action left as is."""
    libc = ctypes.CDLL(None, use_errno=True)
    saved = ctypes.create_string_buffer(_SIGACTION_BYTES)
    kept = libc.sigaction(signum, None, saved) == 0
    if not kept:
        log.warning("cannot read the action of signal %d: %s", signum, os.strerror(ctypes.get_errno()))
    try:
        yield
    finally:
        if kept and libc.sigaction(signum, saved, None) != 0:
            log.warning("cannot restore the action of signal %d: %s", signum, os.strerror(ctypes.get_errno()))
