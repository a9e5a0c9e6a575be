"""kill -9 of the service in the middle of a job, then a restart: the job continues to exactly
its budget, no config is measured twice in it, and the Optuna trials the dead process left
RUNNING are failed and asked again. The real `tirtune worker` process, on SQLite and on
PostgreSQL, measuring with the replay runner slowed to GPU-like pace (TIRTUNE_REPLAY_DELAY_S).

Where the kill lands is a race; the state that matters most (a trial stored in the database that
the dead process never told Optuna) is also built by hand, so that its resume is tested on every
run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import optuna
import sqlalchemy as sa
from optuna.trial import TrialState

from tirtune.core import BuildResult, Candidate, Config, Outcome, RunResult
from tirtune.db import JobState, normalize_url, open_database, repo, transaction
from tirtune.runner.replay_runner import ReplayBuilder, ReplayRunner
from tirtune.space import HOPPER, Problem, space_for
from tirtune.tuner.job import JobLoop

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "hopper-4096x4096x4096-float16.jsonl"
P = Problem(4096, 4096, 4096, "float16")
TRIALS = 12


def _worker(db_url: str, tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    # A replaying service writes to the replay database: this test names the job's database for it.
    env = {**os.environ, "TIRTUNE_REPLAY_DATABASE_URL": db_url, "TIRTUNE_REPLAY": str(DATA),
           "TIRTUNE_REPLAY_DELAY_S": "0.3", "TIRTUNE_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    log = (tmp_path / f"{name}.log").open("wb")
    return subprocess.Popen([sys.executable, "-m", "tirtune", "-v", "worker"], env=env, stdout=log,
                            stderr=subprocess.STDOUT, cwd=tmp_path)


def _wait(what: str, check: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_kill_9_mid_job_then_restart_finishes_it_exactly(db_url: str, tmp_path: Path) -> None:
    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, HOPPER.arch, TRIALS)

    # Polled on a plain engine: a reader in WAL mode never waits for (or starves behind) the
    # worker's writes, as the service's BEGIN IMMEDIATE sessions could.
    poll = sa.create_engine(normalize_url(db_url))

    def job_row() -> tuple[int, str]:
        with poll.connect() as c:
            row = c.execute(sa.text("SELECT trials_done, state FROM tirtune_jobs WHERE id = :id"), {"id": job.id}).one()
            return int(row[0]), str(row[1])

    def trials_done() -> int:
        return job_row()[0]

    first = _worker(db_url, tmp_path, "first")
    try:
        _wait("the first trials", lambda: trials_done() >= 5)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    study = optuna.load_study(study_name=job.study_name, storage=db_url)
    left_running = [t for t in study.get_trials(deepcopy=False) if t.state is TrialState.RUNNING]
    before, state = job_row()
    assert state == JobState.RUNNING.value  # nobody said otherwise
    assert 5 <= before < TRIALS and left_running, "killed with a batch in flight"

    second = _worker(db_url, tmp_path, "second")
    try:
        _wait("the resumed job to finish", lambda: job_row()[1] not in ("QUEUED", "RUNNING"))
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)

    with transaction(sessions) as s:
        final = repo.get_job(s, job.id)
        rows = repo.list_measurements(s, job_id=job.id, limit=10_000)
        again = repo.job_remeasurements(s, job.id)
    trials = [r for r in rows if r.outcome is not Outcome.INVALID]
    assert final.state is JobState.DONE, final.message
    assert final.trials_done == len(trials) == TRIALS
    assert len({r.key for r in trials}) == TRIALS, "no config measured twice in one job"
    assert len(again) == 5 and final.best_measurement_id in {r.id for r in trials}

    study = optuna.load_study(study_name=job.study_name, storage=db_url)
    states = {t.number: t.state for t in study.get_trials(deepcopy=False)}
    assert TrialState.RUNNING not in states.values()
    assert all(states[t.number] is TrialState.FAIL for t in left_running)
    later = [json.dumps(t.params, sort_keys=True) for t in study.get_trials(deepcopy=False)
             if t.number > max(x.number for x in left_running)]
    assert all(json.dumps(t.params, sort_keys=True) in later for t in left_running), "stale trials asked again"
    sessions.kw["bind"].dispose()
    poll.dispose()


class CountingRunner(ReplayRunner):
    """The replay runner, noting each config it measures."""

    def __init__(self) -> None:
        super().__init__([DATA])
        self.measured: list[Config] = []

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        self.measured += [b.candidate.config for b in batch]
        return super().run(batch)


def test_a_resume_answers_a_trial_the_study_was_never_told_from_the_database(db_url: str) -> None:
    """The state a kill between storing a trial and telling it leaves: the job's row counts the
    trial and the database holds its result, while its Optuna trial is still RUNNING. The resumed
    job fails that trial, is handed its config again, and answers it from the stored row: it is
    neither measured nor stored a second time, and the job still spends exactly its budget."""
    sessions = open_database(db_url)
    runner = CountingRunner()
    space = space_for(runner.template_version)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, space.arch, TRIALS)
        job = repo.claim_job(s, job.id)
    loop = JobLoop(sessions, db_url, space, ReplayBuilder(), runner, batch_size=4)

    # The process that dies: it asks a batch, measures and stores the first config, and is gone.
    asked = loop.proposer_factory(job).ask(4)
    untold = asked[0].config
    candidate = Candidate(untold, P, space.template_version)
    [result] = runner.run(ReplayBuilder().build([candidate]))
    assert result.outcome is Outcome.OK
    with transaction(sessions) as s:
        repo.record_measurement(s, job_id=job.id, trial_number=asked[0].trial,
                                key=candidate.measurement_key(runner.stack()), candidate=candidate,
                                outcome=result.outcome, message="", result=result)
    runner.measured.clear()

    summary = loop.run(job.id)  # the restart

    with transaction(sessions) as s:
        final = repo.get_job(s, job.id)
        rows = repo.list_measurements(s, job_id=job.id, limit=10_000)
    trials = [r for r in rows if r.outcome is not Outcome.INVALID]
    assert untold not in runner.measured, "the stored trial was measured again"
    assert [r.config for r in trials].count(untold) == 1, "the stored trial was stored again"
    assert len({r.key for r in trials}) == len(trials) == final.trials_done == summary.trials == TRIALS
    assert len(runner.measured) == TRIALS - 1
    study = optuna.load_study(study_name=job.study_name, storage=db_url)
    again = [t for t in study.get_trials(deepcopy=False) if t.params == study.trials[asked[0].trial].params]
    assert [t.state for t in again] == [TrialState.FAIL, TrialState.COMPLETE], (
        "the dead process's trial is failed and its config asked again, answered from the database")
    assert again[1].value == next(r.ratio for r in trials if r.config == untold)
    sessions.kw["bind"].dispose()
