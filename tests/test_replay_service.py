"""A replay can only tune what was recorded: a problem with no recording is refused up front (CLI,
POST /tune) or, if queued elsewhere, fails with that one reason; never DONE with 0 trials."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from rich.console import Console
from sqlalchemy.orm import Session, sessionmaker

from tirtune.api import create_app
from tirtune.cli import main, service_app
from tirtune.db import JobRecord, JobState, migrate, open_database, repo, transaction
from tirtune.runner.errors import WorkerError
from tirtune.settings import Settings, get_settings
from tirtune.space import Problem
from tirtune.tuner.runtime import make_workers, replay_space
from tirtune.tuner.service import JobService

DATA = Path(__file__).resolve().parents[1] / "bench" / "data"
RECORDED = {"4096x4096x4096 float16", "8192x8192x1024 float16", "4096x14336x4096 bfloat16",
            "1000x1000x1000 float16", "48x4096x2048 bfloat16"}  # hopper-gemm/3 in bench/data


@pytest.fixture
def url(tmp_path: Path) -> str:
    database = f"sqlite:///{tmp_path / 'replay.db'}"
    migrate.upgrade(database)
    return database


@pytest.fixture
def env(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("TIRTUNE_CACHE_DIR", str(tmp_path / "cache"))
    get_settings.cache_clear()
    yield url
    get_settings.cache_clear()


def jobs(url: str) -> int:
    with transaction(open_database(url)) as s:
        return repo.count_jobs(s)


def test_cli_a_missing_replay_path_is_one_line(env: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "4096x4096x4096", "--replay", "/nonexistent/recording"]) == 2
    err = capsys.readouterr().err
    assert "/nonexistent/recording: no such file or folder" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_cli_a_problem_nobody_recorded_is_refused_naming_what_is(env: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "1024x1024x1024", "--replay", str(DATA), "--trials", "4"]) == 2
    captured = capsys.readouterr()
    assert "nothing is recorded for 1024x1024x1024 float16" in captured.err
    assert all(p in captured.err for p in RECORDED) and "on None" not in captured.out + captured.err
    assert jobs(env) == 0  # refused before a job exists


def test_post_tune_on_a_replaying_service_refuses_unrecorded_problems(url: str) -> None:
    settings = Settings(database_url=url, replay=DATA)
    app = create_app(settings, start_workers=False, replay_space=replay_space(settings))
    with TestClient(app) as client:
        refused = client.post("/tune", json={"m": 1024, "n": 1024, "k": 1024})
        assert refused.status_code == 422 and len(refused.content) < 2048
        error = refused.json()["error"]
        assert error["code"] == "not_recorded" and "TIRTUNE_REPLAY" in error["message"]
        assert all(p in error["message"] for p in RECORDED)
        assert client.post("/tune", json={"m": 4096, "n": 14336, "k": 4096, "dtype": "bf16"}).status_code == 202
        assert client.get("/jobs").json()["total"] == 1


def test_best_on_a_replaying_service_invites_post_tune_only_for_recorded_problems(url: str) -> None:
    settings = Settings(database_url=url, replay=DATA)
    app = create_app(settings, start_workers=False, replay_space=replay_space(settings))
    with TestClient(app) as client:
        asked = {"predict": "false"}  # the 404's words, not the cost model's prediction
        unrecorded = client.get("/best", params={"shape": "1024x1024x1024", **asked}).json()["error"]["message"]
        assert "POST /tune to start" not in unrecorded and "POST /tune would refuse it" in unrecorded, unrecorded
        assert "nothing is recorded for 1024x1024x1024 float16" in unrecorded
        recorded = client.get("/best", params={"shape": "4096x4096x4096", **asked}).json()["error"]["message"]
        assert recorded.endswith("POST /tune to start"), recorded
        assert client.post("/tune", json={"m": 4096, "n": 4096, "k": 4096}).status_code == 202  # as invited


def test_the_cli_hands_a_replaying_service_the_space_of_its_recordings(
    env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API never imports the workers that read recordings: `tirtune serve` (service_app) hands it in."""
    monkeypatch.setenv("TIRTUNE_REPLAY", str(DATA))
    get_settings.cache_clear()
    space = service_app().state.replay_space
    assert space is not None and space.problem_violations(Problem(4096, 4096, 4096)) == []
    refused = space.problem_violations(Problem(1024, 1024, 1024))
    assert "nothing is recorded for 1024x1024x1024 float16" in refused[0].reason
    monkeypatch.delenv("TIRTUNE_REPLAY")
    get_settings.cache_clear()
    assert service_app().state.replay_space is None


def test_a_service_with_an_unreadable_replay_does_not_start(
    env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIRTUNE_REPLAY", str(tmp_path / "missing"))
    get_settings.cache_clear()
    with pytest.raises(WorkerError, match="no such file or folder"):
        service_app()
    (tmp_path / "bad.jsonl").write_text('{"template_version": "x"}\n')
    monkeypatch.setenv("TIRTUNE_REPLAY", str(tmp_path / "bad.jsonl"))
    get_settings.cache_clear()
    with pytest.raises(WorkerError, match=r"bad.jsonl:1: not a recorded measurement"):
        service_app()


def test_a_queued_unrecorded_job_fails_with_the_reason(url: str) -> None:
    """Queued where nobody checked (another API, a job from before): the worker fails it, saying why."""
    settings = Settings(database_url=url, replay=DATA)
    sessions = open_database(url)
    with transaction(sessions) as s:
        job = repo.create_job(s, Problem(1024, 1024, 1024), "sm_90a", 8)
    service = JobService(settings, sessions, workers=make_workers(settings), poll_s=0.05)
    service.start()
    try:
        deadline = time.monotonic() + 30
        while (done := _job(sessions, job.id)).state in (JobState.QUEUED, JobState.RUNNING):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        service.stop()
    assert done.state is JobState.FAILED and done.trials_done == 0
    assert "nothing is recorded for 1024x1024x1024 float16" in done.message and "\n" not in done.message


def _job(sessions: sessionmaker[Session], job_id: int) -> JobRecord:
    with transaction(sessions) as s:
        return repo.get_job(s, job_id)


def test_a_summary_with_nothing_measured_names_no_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    from tirtune.tuner.tune_command import _print_table, summarize

    def serve(_choice: object) -> dict[str, object]:
        raise AssertionError("nothing measured: no best to render")

    _print_table(Console(stderr=True), summarize(Problem(64, 64, 64), [], job_id=1, elapsed_s=0.0, serve=serve))
    out = capsys.readouterr()
    assert "None" not in out.out + out.err and "nothing measured" in out.out


def test_the_service_runs_jobs_at_once_when_told(db_url: str) -> None:
    """TIRTUNE_CONCURRENT_JOBS=2: two queued jobs run side by side (their RUNNING spans overlap)
    over the one set of workers, each to its own full budget, on SQLite and on PostgreSQL."""
    settings = Settings(database_url=db_url, replay=DATA, concurrent_jobs=2)
    sessions = open_database(db_url)
    with transaction(sessions) as s:
        ids = [repo.create_job(s, Problem(4096, 4096, 4096), "sm_90a", 12).id,
               repo.create_job(s, Problem(1000, 1000, 1000), "sm_90a", 12).id]
    service = JobService(settings, sessions, workers=make_workers(settings), poll_s=0.05)
    service.start()
    try:
        deadline = time.monotonic() + 120
        while any(_job(sessions, i).state in (JobState.QUEUED, JobState.RUNNING) for i in ids):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        service.stop()
    first, second = (_job(sessions, i) for i in ids)
    assert [first.state, second.state] == [JobState.DONE, JobState.DONE], (first.message, second.message)
    assert first.trials_done == second.trials_done == 12
    assert first.started_at and second.started_at and first.finished_at and second.finished_at
    assert second.started_at < first.finished_at and first.started_at < second.finished_at


def test_a_replay_has_no_recording_of_a_fused_problem_and_still_replays_the_plain_one() -> None:
    """The recordings are of plain GEMMs: the same shape and config with an epilogue is another
    kernel, not recorded (as an unknown problem is), and the plain one replays as recorded."""
    from tirtune.core import BuildResult, Candidate, Outcome
    from tirtune.runner.replay_runner import NOT_RECORDED, ReplayRunner

    runner = ReplayRunner([DATA])
    plain = Problem.parse("4096x4096x4096", "float16")
    config = next(c for c in runner.configs(plain) if (runner.recorded(plain, c) or {}).get("outcome") == "OK")
    fused = Problem.parse("4096x4096x4096", "float16", "bias+residual")
    builds = [BuildResult(Candidate(config, p, runner.template_version), Outcome.OK) for p in (plain, fused)]
    replayed, unknown = runner.run(builds)
    assert replayed.outcome is Outcome.OK and replayed.time_ms and replayed.cublas_ms
    assert unknown.outcome is Outcome.LAUNCH_ERROR and unknown.message == NOT_RECORDED
    assert fused not in runner.problems()
