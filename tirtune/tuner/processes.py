"""The processes below this one, found and stopped through Linux's /proc (Ray's agents outlive
`ray.shutdown()`; see `tirtune.tuner.runtime.stop_ray`)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path

__all__ = ["alive", "descendants", "multiprocessing_helpers", "terminate"]

log = logging.getLogger(__name__)

Processes = dict[int, str]  # pid -> start time (clock ticks after boot): a reused pid differs


def descendants(root: int) -> Processes:
    """Every process below `root` (children, theirs, ...)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = int(stat[1])
    found: Processes = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found and (stat := _stat(pid)) is not None:
                found[pid] = stat[19]
                frontier.append(pid)
    return found


def multiprocessing_helpers(processes: Processes) -> Processes:
    """Those of `processes` that this process's multiprocessing owns: its live children (the
    measuring child, the lowering pool's processes, which their owners end) and its resource
    tracker. Not Ray's, so not for `stop_ray` to kill: a resource tracker killed under a live
    interpreter made it abort at exit (SIGABRT after `tirtune serve`'s clean shutdown, once the
    cubin build path had spawned its lowering processes in the service)."""
    import multiprocessing

    own = {p.pid for p in multiprocessing.active_children() if p.pid is not None}
    return {pid: start for pid, start in processes.items() if pid in own or _is_resource_tracker(pid)}


def _is_resource_tracker(pid: int) -> bool:
    try:
        return b"multiprocessing.resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def alive(processes: Processes) -> Processes:
    """Those still running: a zombie counts as gone, and so does a pid now held by another process."""
    return {
        pid: start
        for pid, start in processes.items()
        if (stat := _stat(pid)) is not None and stat[19] == start and stat[0] != "Z"
    }


def terminate(processes: Processes, grace_s: float) -> Processes:
    """SIGTERM those still running, SIGKILL those left after `grace_s`; returns any that survive."""
    left = alive(processes)
    if left:
        log.info("stopping %d process(es) left behind: %s", len(left), sorted(left))
    for signal_number in (signal.SIGTERM, signal.SIGKILL):
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal_number)
        deadline = time.monotonic() + grace_s
        while (left := alive(left)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not left:
            break
    return left


def _stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (state, ppid, ..., starttime at index 19); the process name
    before them is in parentheses and may hold spaces."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()
