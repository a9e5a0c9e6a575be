"""`tirtune serve` on a machine without a GPU, as a new user runs it: the job says how to replay
(TIRTUNE_REPLAY, since serve takes no --replay) without starting Ray, and SIGTERM stops the server
and every Ray process it started (GCS, raylet, dashboard and runtime-env agents, workers) within
seconds."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
from sqlalchemy.orm import Session, sessionmaker

from tirtune.core import BuildResult, RunResult
from tirtune.db import JobState, open_database, repo, transaction
from tirtune.runner.errors import WorkerError
from tirtune.runner.replay_runner import ReplayBuilder, ReplayRunner
from tirtune.settings import Settings
from tirtune.space import Problem, space_for
from tirtune.tuner.processes import alive, descendants
from tirtune.tuner.runtime import Workers
from tirtune.tuner.service import JobService

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "hopper-gemm-3-4096x4096x4096-float16.jsonl"
# `tirtune serve` on a machine whose driver reports one GPU (a stand-in at our own seam, the probe),
# so that the service starts a local Ray; Ray itself finds none and the job fails, saying so.
SERVE_WITH_A_REPORTED_GPU = (
    "import sys; import tirtune.runner.gpu_probe as probe; "
    "probe.visible_gpus = lambda: probe.VisibleGpus(1, ''); "
    "from tirtune.cli import main; sys.exit(main(['serve', '--port', sys.argv[1]]))"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@contextmanager
def _serving(tmp_path: Path, command: list[str]) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    """A serve on a free port with its own database, no GPU visible; killed if the test left it running."""
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'serve.db'}", "TIRTUNE_RAY_NUM_CPUS": "1",
           "TIRTUNE_CACHE_DIR": str(tmp_path / "cache"), "CUDA_VISIBLE_DEVICES": ""}
    env.pop("TIRTUNE_REPLAY", None)
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen([*command, str(port)], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            _wait(lambda: _up(base), 60, "the API")
            yield server, base, log_path
        finally:
            if server.poll() is None:
                server.kill()
                server.wait(10)


def _failed_job(base: str) -> str:
    """Queue a job and wait for it to fail (no GPU); its message."""
    job = httpx.post(f"{base}/tune", json={"m": 256, "n": 256, "k": 256}).json()["id"]
    _wait(lambda: httpx.get(f"{base}/jobs/{job}").json()["state"] == "FAILED", 120, "the job to fail")
    message: str = httpx.get(f"{base}/jobs/{job}").json()["message"]
    return message


def test_serve_without_a_gpu_explains_the_replay_setting_without_starting_ray(tmp_path: Path) -> None:
    with _serving(tmp_path, [sys.executable, "-m", "tirtune", "serve", "--port"]) as (server, base, log):
        message = _failed_job(base)
        assert "no NVIDIA GPU visible" in message, message
        assert "TIRTUNE_REPLAY=bench/data" in message and "--replay" not in message, message
        names = {_name(pid) for pid in descendants(server.pid)}
        assert not any("raylet" in n or "gcs_server" in n for n in names), names
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    assert server.returncode in (0, -signal.SIGTERM), log.read_text()[-3000:]
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]  # a refusal, not a crash


def test_sigterm_stops_serve_and_every_ray_process_it_started(tmp_path: Path) -> None:
    with _serving(tmp_path, [sys.executable, "-c", SERVE_WITH_A_REPORTED_GPU]) as (server, base, log):
        message = _failed_job(base)
        assert "Ray sees 0 GPU(s)" in message and "TIRTUNE_REPLAY=bench/data" in message, message

        ray = descendants(server.pid)
        names = {_name(pid) for pid in ray}
        assert any("raylet" in n for n in names) and any("gcs_server" in n for n in names), names
        assert any("Agent" in n for n in names), names  # ray::DashboardAgent, ray::RuntimeEnvAgent

        server.send_signal(signal.SIGTERM)
        server.wait(30)
        _wait(lambda: not alive(ray), 10, f"Ray processes to stop: {sorted(_name(p) for p in alive(ray))}")
    # uvicorn shuts down cleanly, then re-raises the signal it caught (exit by SIGTERM)
    assert server.returncode in (0, -signal.SIGTERM), log.read_text()[-3000:]
    said = log.read_text()
    assert "Shutting down" in said and "SIGTERM received" not in said and "PC: @" not in said, said[-3000:]


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:120]
    except OSError:
        return "(gone)"


class _RayGoneWhenStopping(ReplayRunner):
    """Replays, until the service is told to stop: then fails as the GPU runner does once its Ray is gone."""

    service: JobService | None = None

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        assert self.service is not None
        if self.service._stop.wait(0.2):
            raise WorkerError("Ray is shut down")
        return super().run(batch)


def test_a_job_cut_short_by_a_stopping_service_stays_running_to_resume(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'stop.db'}"
    sessions = open_database(url)
    with transaction(sessions) as s:
        job = repo.create_job(s, Problem(4096, 4096, 4096), "sm_90a", 64)
    runner = _RayGoneWhenStopping([DATA])
    workers = Workers(ReplayBuilder(), runner, batch_size=1, space=runner.restrict(space_for(runner.template_version)))
    service = runner.service = JobService(Settings(database_url=url), sessions, workers=workers, poll_s=0.05)
    service.start()
    _wait(lambda: _state(sessions, job.id) == JobState.RUNNING, 30, "the job to start")
    service.stop()
    assert _state(sessions, job.id) is JobState.RUNNING  # not FAILED: the service's end is not the job's fault
    with transaction(sessions) as s:
        assert repo.requeue_running(s) == 1  # what the next service does first


def _state(sessions: sessionmaker[Session], job_id: int) -> JobState:
    with transaction(sessions) as s:
        return repo.get_job(s, job_id).state
