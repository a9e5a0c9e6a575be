"""Scratch folders owned by a process: removed by their owner when it ends, and otherwise by the next
process that sweeps for them (a SIGKILLed owner, an actor Ray killed, a crashed test run).

The owner is written into the folder's name, `<prefix><pid>-<start>-<random>`, with its start time
(`/proc/<pid>/stat`, clock ticks after boot) so that a recycled pid never passes for the owner.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

__all__ = ["owned_folder", "owner_alive", "sweep"]

log = logging.getLogger(__name__)


def owned_folder(prefix: str, parent: Path | None = None) -> Path:
    """A new, empty folder in `parent` (the temp dir by default) named for this process."""
    pid = os.getpid()
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{pid}-{_started(pid)}-", dir=parent))


def sweep(prefix: str, parent: Path | None = None) -> list[Path]:
    """Remove the folders `owned_folder(prefix)` made for processes that have ended; the removed."""
    folder = Path(parent or tempfile.gettempdir())
    named = re.compile(rf"{re.escape(prefix)}(\d+)-(\d+)-")
    removed = []
    for path in folder.glob(f"{prefix}*"):
        owner = named.match(path.name)
        if owner is None or not path.is_dir() or owner_alive(int(owner[1]), owner[2]):
            continue
        shutil.rmtree(path, ignore_errors=True)  # another sweeper may be removing it too
        removed.append(path)
    if removed:
        log.info("removed %d scratch folder(s) of ended processes: %s", len(removed), [p.name for p in removed])
    return removed


def owner_alive(pid: int, started: str) -> bool:
    """Whether process `pid` runs and is the one that started at `started`."""
    return _started(pid) == started


def _started(pid: int) -> str:
    """The process's start time in clock ticks after boot ('' when it does not run)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # Field 22; the command name (field 2) is in parentheses and may hold spaces.
    return stat.rsplit(")", 1)[1].split()[19]
