"""tirtune.tuner.processes: which of this process's descendants stop_ray may stop."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from multiprocessing import resource_tracker

from tirtune.tuner.processes import descendants, multiprocessing_helpers, terminate


def test_this_process_multiprocessing_children_and_resource_tracker_are_not_rays() -> None:
    """stop_ray stops every descendant that outlives ray.shutdown(), except what multiprocessing
    owns here: a child process (its owner ends it) and the resource tracker (killing it made
    `tirtune serve` abort at exit). A plain subprocess, like Ray's agents, is left to stop."""
    child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(30,), daemon=True)
    child.start()
    resource_tracker.ensure_running()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        below = descendants(os.getpid())
        assert child.pid in below and other.pid in below
        helpers = multiprocessing_helpers(below)
        assert child.pid in helpers and other.pid not in helpers
        assert any(b"resource_tracker" in open(f"/proc/{pid}/cmdline", "rb").read() for pid in helpers)
    finally:
        assert terminate({other.pid: below[other.pid]}, 5.0) == {}
        other.wait(5)
        child.kill()
        child.join(5)
