"""Ray's token authentication in the tests: the token lives in the run's temp dir, never in ~/.ray."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

INIT = "import ray; ray.init(num_cpus=1, include_dashboard=False); ray.shutdown()"


def test_a_local_ray_writes_no_token_into_the_home_directory(ray_auth_token: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "RAY_ADDRESS": ""}
    done = subprocess.run([sys.executable, "-c", INIT], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (home / ".ray").exists(), "Ray wrote into the home directory"
    assert os.environ["RAY_AUTH_MODE"] == "token"  # authentication stays on, with the run's own token
    assert Path(os.environ["RAY_AUTH_TOKEN_PATH"]) == ray_auth_token and ray_auth_token.stat().st_size == 64


def test_a_local_ray_tirtune_starts_keeps_its_token_in_the_tirtune_folder(tmp_path: Path) -> None:
    """With no token configured (a new user), Ray 2.60 would make ~/.ray/auth_token (mode 0644):
    tirtune gives the Ray it starts a token of its own, in ~/.tirtune, readable by its owner only."""
    home = tmp_path / "home"
    home.mkdir()
    env = {name: value for name, value in os.environ.items() if not name.startswith(("TIRTUNE_", "RAY_"))}
    env.update({"HOME": str(home), "TIRTUNE_RAY_NUM_CPUS": "1"})
    start = ("from tirtune.settings import get_settings; from tirtune.tuner.runtime import start_ray, stop_ray; "
             "start_ray(get_settings()); stop_ray()")
    done = subprocess.run([sys.executable, "-c", start], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Token authentication is enabled" not in done.stderr  # Ray's warning when it picks the mode itself
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == [".tirtune", ".tirtune/ray_auth_token"]
    token = home / ".tirtune" / "ray_auth_token"
    assert token.stat().st_mode & 0o777 == 0o600 and len(token.read_text().strip()) >= 32
