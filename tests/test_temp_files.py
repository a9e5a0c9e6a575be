"""A test run leaves nothing behind: its temp files go when it ends (even a run that only collects),
and nothing is written to the home directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp folder with a short path: Chromium refuses a socket path over 107 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="tt-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _pytest(tmp_path: Path, *args: str) -> tuple[Path, Path]:
    """Run pytest on `args` in a child whose temp dir and home are empty folders of its own; return both."""
    tmp, home = tmp_path / "tmp", tmp_path / "home"
    tmp.mkdir()
    home.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "HOME": str(home)}
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "TIRTUNE_FAULTS_DIR"):
        env.pop(name, None)  # the child's conftest sets its own
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base"),
               *args]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return tmp, home


def _left(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_collecting_the_tests_leaves_no_temp_files(tmp_path: Path) -> None:
    tmp, home = _pytest(tmp_path, "--collect-only", "tests/test_ray_auth.py")
    assert _left(tmp) == [] and _left(home) == []


def test_the_fault_kernels_leave_no_temp_files(tmp_path: Path) -> None:
    """The fault variants of the template are modules written to disk (TVMScript reads a kernel's
    source): a test run keeps them in its own temp folder, removed at the end."""
    pytest.importorskip("ray")
    tmp, home = _pytest(tmp_path, "tests/test_faults.py", "-k", "lower_to_cuda and wrong_result")
    assert _left(tmp) == [] and _left(home) == []


def test_the_browser_tests_write_nothing_to_the_home_directory(short_tmp: Path) -> None:
    """Chromium keeps its crash reports and a dconf cache under $HOME unless told otherwise."""
    pytest.importorskip("playwright")
    tmp, home = _pytest(short_tmp, "tests/test_dashboard_browser.py", "-k", "unknown_problem")
    assert _left(tmp) == [] and _left(home) == []
