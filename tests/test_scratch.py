"""Scratch folders named for their owner: swept once the owner has ended, never while it runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tirtune.runner.scratch import owned_folder, sweep

PREFIX = "tirtune-scratch-test-"
MAKE = "import sys; from pathlib import Path; from tirtune.runner.scratch import owned_folder; " \
       "print(owned_folder(sys.argv[1], Path(sys.argv[2])))"


def test_only_the_folders_of_ended_owners_are_swept(tmp_path: Path) -> None:
    mine = owned_folder(PREFIX, tmp_path)
    (mine / "staged.so").write_bytes(b"x")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    made = subprocess.run([sys.executable, "-c", MAKE, PREFIX, str(tmp_path)], capture_output=True, text=True,
                          check=True, env=env)
    theirs = Path(made.stdout.strip())  # its owner has exited
    recycled = tmp_path / f"{PREFIX}{os.getpid()}-1-abc"  # this pid, another start time: an earlier process's
    recycled.mkdir()
    unrelated = tmp_path / f"{PREFIX}unnamed"
    unrelated.mkdir()
    assert theirs.is_dir() and theirs.parent == tmp_path
    assert sorted(sweep(PREFIX, tmp_path)) == sorted([theirs, recycled])
    assert mine.is_dir() and (mine / "staged.so").exists() and unrelated.is_dir()
