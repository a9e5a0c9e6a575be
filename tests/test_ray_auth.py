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
