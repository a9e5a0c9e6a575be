"""docker-compose's Ray authentication, on real Ray processes: a head started with the compose file's
Ray auth settings takes a second (CPU-only) node that holds the cluster token, and refuses nodes
with a wrong token or none. No Docker: the same `ray start` commands with the same environment."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tirtune.tuner.processes import Processes, alive, descendants, terminate

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))
RAY_SERVICES = ("ray-head", "gpu-worker", "gpu-node")


def compose_ray_auth() -> dict[str, str]:
    """The Ray auth environment every Ray service of docker-compose.yml gets (one anchor, checked equal)."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    envs = [{k: str(v) for k, v in services[name]["environment"].items() if k.startswith("RAY_AUTH")}
            for name in RAY_SERVICES]
    assert all(env == envs[0] for env in envs), envs
    return envs[0]


def test_compose_sets_ray_token_authentication_explicitly() -> None:
    auth = compose_ray_auth()
    assert auth["RAY_AUTH_MODE"] == "token"
    # Required: compose refuses to start without it instead of running an open cluster.
    assert re.fullmatch(r"\$\{RAY_AUTH_TOKEN:\?.+\}", auth["RAY_AUTH_TOKEN"]), auth


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Head:
    """A head node started by `ray start --block` in a short temp dir (Ray's socket paths are
    limited to 107 bytes), on free loopback ports; `stop()` ends it and everything it started."""

    def __init__(self, env: dict[str, str]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ttray-", dir="/tmp"))
        self.env = {**env, "HOME": str(self.dir)}  # no ~/.ray of the machine's user is read or written
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.blocking: list[subprocess.Popen[bytes]] = []
        self.start_node(self.env, "--head", f"--port={self.port}", f"--temp-dir={self.dir}",
                        "--include-dashboard=false", "--disable-usage-stats")

    def start_node(self, env: dict[str, str], *args: str) -> None:
        log = (self.dir / f"node-{len(self.blocking)}.log").open("wb")
        self.blocking.append(subprocess.Popen(
            [RAY, "start", *args, "--node-ip-address=127.0.0.1", f"--dashboard-agent-listen-port={_free_port()}",
             "--num-cpus=1", "--num-gpus=0", "--block"], env=env, stdout=log, stderr=subprocess.STDOUT))

    def join(self, env: dict[str, str]) -> subprocess.Popen[str]:
        """A node joining without --block: its `ray start` exits 0 once joined, 1 when refused."""
        return subprocess.Popen([RAY, "start", f"--address={self.address}", "--node-ip-address=127.0.0.1",
                                 "--num-cpus=1", "--num-gpus=0"], env={**env, "HOME": str(self.dir)},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def nodes(self) -> list[dict[str, Any]] | None:
        """The cluster's alive nodes, as a driver holding the token sees them; None if unreachable."""
        probe = (f"import json, ray; ray.init(address={self.address!r}, log_to_driver=False); "
                 "print(json.dumps([n for n in ray.nodes() if n['Alive']], default=str))")
        done = subprocess.run([sys.executable, "-c", probe], env=self.env, capture_output=True, text=True,
                              timeout=120)
        return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None

    def wait_for_nodes(self, count: int, timeout_s: float = 120) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while (nodes := self.nodes()) is None or len(nodes) < count:
            assert time.monotonic() < deadline, f"the cluster did not reach {count} node(s): {nodes}"
            time.sleep(1)
        return nodes

    def stop(self) -> None:
        started: Processes = {}
        for proc in self.blocking:
            started |= descendants(proc.pid)
        for proc in self.blocking:
            proc.terminate()
        for proc in self.blocking:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        left = terminate(started, 5)
        shutil.rmtree(self.dir, ignore_errors=True)
        assert not alive(left)


@pytest.fixture
def cluster_env() -> dict[str, str]:
    """The compose file's Ray auth settings with a fresh token in place of ${RAY_AUTH_TOKEN:?...};
    nothing of the test run's own Ray settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, **compose_ray_auth(), "RAY_AUTH_TOKEN": secrets.token_hex(32)}


@pytest.fixture
def head(cluster_env: dict[str, str]) -> Iterator[Head]:
    h = Head(cluster_env)
    try:
        yield h
    finally:
        h.stop()


def test_a_cpu_node_with_the_token_joins_and_nodes_without_it_are_refused(
    head: Head, cluster_env: dict[str, str]
) -> None:
    assert len(head.wait_for_nodes(1)) == 1
    head.start_node(cluster_env, f"--address={head.address}")
    nodes = head.wait_for_nodes(2)
    assert len(nodes) == 2 and all(n["Resources"].get("GPU", 0) == 0 for n in nodes)

    wrong = head.join({**cluster_env, "RAY_AUTH_TOKEN": secrets.token_hex(32)})
    anonymous = head.join({k: v for k, v in cluster_env.items() if not k.startswith("RAY_AUTH")})
    for refused in (wrong, anonymous):  # both at once: each takes Ray ~20 s of retries to give up
        output, _ = refused.communicate(timeout=180)
        assert refused.returncode != 0 and "InvalidAuthToken" in output, output[-2000:]
    assert len(head.wait_for_nodes(2)) == 2  # still the two
