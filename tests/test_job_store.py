"""The job loop's database, `tirtune.tuner.job_store.JobStore`: each method round-trips on SQLite
and PostgreSQL; a job spends a bounded number of transactions on each stored row (counted on a
real SQLite database); and the loop opens no transaction of its own."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session, sessionmaker

from tirtune.core import Candidate, Outcome, Source
from tirtune.db import open_database, repo, transaction
from tirtune.runner.replay_runner import ReplayBuilder, ReplayRunner
from tirtune.space import HOPPER_V1, Problem
from tirtune.tuner.job import JobLoop
from tirtune.tuner.job_store import JobStore

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "hopper-4096x4096x4096-float16.jsonl"
P = Problem(4096, 4096, 4096, "float16")


@pytest.fixture
def sessions(db_url: str) -> Iterator[sessionmaker[Session]]:
    factory = open_database(db_url)
    yield factory
    factory.kw["bind"].dispose()


def _new_job(sessions: sessionmaker[Session], trials: int) -> int:
    with transaction(sessions) as s:
        job = repo.create_job(s, P, HOPPER_V1.arch, trials)
        repo.claim_job(s, job.id)
    return job.id


def test_the_store_round_trips_a_job(sessions: sessionmaker[Session]) -> None:
    runner = ReplayRunner([DATA])
    stack = runner.stack()
    store = JobStore(sessions, Source.REPLAY)
    first, second = _new_job(sessions, 4), _new_job(sessions, 4)
    assert store.job(first).gpu_name is None
    assert store.start_job(first, stack).gpu_name == stack.gpu_name == store.job(first).gpu_name

    good, other, refused = (Candidate(c, P, HOPPER_V1.template_version) for c in runner.configs(P)[:3])
    assert store.measured_before(good.measurement_key(stack)) is None
    invalid = store.refuse(first, 7, refused, refused.measurement_key(stack), "smem_fits: too big")
    assert invalid.outcome is Outcome.INVALID and invalid.trial_number == 7 and invalid.source is Source.REPLAY

    builds = ReplayBuilder().build([good, other])
    results = runner.run(builds)
    a = store.record(first, 0, good, good.measurement_key(stack), results[0].outcome, results[0].message,
                     results[0], builds[0].seconds)
    b = store.record(first, 1, other, other.measurement_key(stack), results[1].outcome, results[1].message,
                     results[1], builds[1].seconds)
    assert a.record.outcome is Outcome.OK and a.trials_done == 1 and a.best == a.record
    assert b.trials_done == 2 and b.best == max((a.record, b.record), key=lambda r: r.ratio or 0)

    previous = store.measured_before(good.measurement_key(stack))
    assert previous == a.record
    again = store.reuse(second, 3, previous)
    assert (again.record.job_id, again.record.trial_number, again.record.ratio) == (second, 3, a.record.ratio)
    assert again.trials_done == 1 and again.best == again.record

    recalled = store.recall(first)
    assert [r.id for r in recalled.rows] == [b.record.id, a.record.id, invalid.id]  # newest first
    assert (recalled.trials_done, recalled.best) == (2, b.best)
    assert [r.id for r in store.measurements(first, Outcome.OK)] == [b.record.id, a.record.id]

    top = [a.record, b.record]
    assert store.remeasured([r.key for r in top]) == {}
    figures = store.record_remeasurements(first, 3, list(zip(top, runner.remeasure(builds, 3), strict=True)))
    assert [(f.measurement_id, f.rounds) for f in figures] == [(a.record.id, 3), (b.record.id, 3)]
    assert store.remeasured([r.key for r in top]) == {f.key: f for f in figures}

    finished = store.finish(first, P)
    assert finished.choice is not None and finished.choice.best.trial.id in {a.record.id, b.record.id}
    assert store.job(first).best_measurement_id == finished.choice.best.trial.id
    assert [r.id for r in finished.rows] == [b.record.id, a.record.id, invalid.id]


def test_a_job_without_an_ok_row_names_no_best(sessions: sessionmaker[Session]) -> None:
    store = JobStore(sessions, Source.GPU)
    job_id = _new_job(sessions, 2)
    finished = store.finish(job_id, P)
    assert finished.choice is None and finished.rows == []
    assert store.job(job_id).best_measurement_id is None


def test_a_job_spends_a_bounded_number_of_transactions_on_each_row(tmp_path: Path) -> None:
    """At most two transactions a stored row (the look-up of an earlier measurement of its key,
    then the row and the progress read back with it), plus a few a job: reading, starting and
    recalling it, the start configs, the top trials, their re-measurements, naming the best."""
    url = f"sqlite:///{tmp_path / 'tirtune.db'}"
    sessions = open_database(url)
    began: list[int] = []

    def count(connection: Connection) -> None:
        began.append(1)

    job_id = _new_job(sessions, 12)
    sa.event.listen(sessions.kw["bind"], "begin", count)
    summary = JobLoop(sessions, url, HOPPER_V1, ReplayBuilder(), ReplayRunner([DATA]), batch_size=4).run(job_id)
    sa.event.remove(sessions.kw["bind"], "begin", count)
    with transaction(sessions) as s:
        rows = repo.list_measurements(s, job_id=job_id, limit=10_000)
    sessions.kw["bind"].dispose()
    assert summary.trials == 12 and summary.remeasured
    refused = sum(r.outcome is Outcome.INVALID for r in rows)
    assert 0 < len(began) <= 2 * (len(rows) - refused) + refused + 8, (len(began), len(rows), refused)


def test_the_loop_opens_no_transaction_of_its_own() -> None:
    """tirtune/tuner/job.py speaks to the database only through its JobStore."""
    tree = ast.parse((ROOT / "tirtune" / "tuner" / "job.py").read_text())
    imported = {(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert not {("tirtune.db", "repo"), ("tirtune.db", "transaction")} & imported
    assert not any(module == "tirtune.db.repo" or module == "tirtune.db.session" for module, _ in imported)
