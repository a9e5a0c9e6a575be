"""Repository functions on SQLite and PostgreSQL (see the db_factory fixture in conftest.py)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from tirtune.core import Candidate, Outcome, Provenance, RunResult, Source, Stack
from tirtune.db import (
    DbError,
    JobState,
    NotFound,
    make_engine,
    migrate,
    normalize_url,
    open_database,
    repo,
    transaction,
)
from tirtune.db.models import Measurement
from tirtune.db.records import MeasurementRecord
from tirtune.space import TEMPLATE_VERSION, Config, Problem
from tirtune.space.hopper.knobs import config as hopper_config

Factory = sessionmaker[Session]
P = Problem(4096, 4096, 4096, "float16")
H200 = Stack("NVIDIA H200", "570.1", "12.8", "0.27.0", "9.0")


def candidate(problem: Problem = P, blk_n: int = 128, stages: int = 4) -> Candidate:
    return Candidate(hopper_config(blk_n=blk_n, stages=stages), problem, TEMPLATE_VERSION)


def ok_result(c: Candidate, time_ms: float, stack: Stack = H200) -> RunResult:
    return RunResult(
        candidate=c, outcome=Outcome.OK, time_ms=time_ms, time_p10_ms=time_ms * 0.98,
        time_p90_ms=time_ms * 1.02, repetitions=100, cublas_ms=1.0, rel_error=1e-3,
        provenance=Provenance(stack, TEMPLATE_VERSION, torch="2.6", sm_clock_mhz=1980.0, power_w=650.0),
    )


def record_ok(s: Session, time_ms: float, *, job_id: int | None = None, key: str = "k",
              stack: Stack = H200, problem: Problem = P, blk_n: int = 128) -> int:
    c = candidate(problem, blk_n)
    r = repo.record_measurement(
        s, job_id=job_id, trial_number=None, key=key, candidate=c, outcome=Outcome.OK,
        message="", result=ok_result(c, time_ms, stack), build_seconds=12.5,
    )
    return r.id


def record_failure(s: Session, *, job_id: int | None = None, outcome: Outcome = Outcome.COMPILE_ERROR) -> int:
    c = candidate(stages=6)
    r = repo.record_measurement(
        s, job_id=job_id, trial_number=7, key="bad", candidate=c, outcome=outcome,
        message="nvcc: ptxas error", result=None,
    )
    return r.id


def new_job(factory: Factory, problem: Problem = P, arch: str = "sm_90a") -> int:
    with transaction(factory) as s:
        return repo.create_job(s, problem, arch, max_trials=16, time_budget_s=None).id


# --- jobs -------------------------------------------------------------------------------------


def test_create_and_get_job(db_factory: Factory) -> None:
    with transaction(db_factory) as s:
        job = repo.create_job(s, P, "sm_90a", max_trials=32, time_budget_s=600.0)
    with transaction(db_factory) as s:
        again = repo.get_job(s, job.id)
    assert again == job
    assert job.state is JobState.QUEUED and job.trials_done == 0 and job.message == ""
    assert job.study_name.startswith(f"tirtune-{job.id}-4096x4096x4096-float16-sm_90a-")
    assert job.problem == P and job.time_budget_s == 600.0
    assert job.created_at.tzinfo is UTC and job.started_at is None


def test_get_missing_job_is_not_found(db_factory: Factory) -> None:
    with pytest.raises(NotFound, match="job 999 not found"), transaction(db_factory) as s:
        repo.get_job(s, 999)


def test_create_job_refuses_zero_trials(db_factory: Factory) -> None:
    with pytest.raises(DbError, match="max_trials"), transaction(db_factory) as s:
        repo.create_job(s, P, "sm_90a", max_trials=0, time_budget_s=None)


FUSED = Problem.parse("4096x4096x4096", "float16", "residual+bias")  # stored as "bias+residual"


def test_plain_and_fused_problems_of_one_shape_are_stored_and_read_apart(db_factory: Factory) -> None:
    """The epilogue keys a problem everywhere a query does: the jobs, the active-job lookup, the
    trials, the best, the rankings, the dashboard's problems, the tuned problems and GPUs."""
    plain_job, fused_job = new_job(db_factory, P), new_job(db_factory, FUSED)
    with transaction(db_factory) as s:
        record_ok(s, 2.0, job_id=plain_job, key="plain", problem=P, blk_n=128)  # ratio 0.5
        record_ok(s, 0.5, job_id=fused_job, key="fused", problem=FUSED, blk_n=256)  # ratio 2.0: must not leak
    with transaction(db_factory) as s:
        fused = repo.get_job(s, fused_job)
        assert fused.epilogue == "bias+residual" and fused.problem == FUSED and fused.problem != P
        assert "-4096x4096x4096-float16-bias+residual-sm_90a-" in fused.study_name
        assert repo.get_job(s, plain_job).problem == P
        assert repo.find_active_job(s, P, "sm_90a").id == plain_job  # type: ignore[union-attr]
        assert repo.find_active_job(s, FUSED, "sm_90a").id == fused_job  # type: ignore[union-attr]
        assert repo.find_active_job(s, Problem.parse("4096x4096x4096", "fp16", "bias"), "sm_90a") is None
        assert [m.key for m in repo.list_measurements(s, problem=P)] == ["plain"]
        assert [m.key for m in repo.list_measurements(s, problem=FUSED)] == ["fused"]
        assert [m.problem for m in repo.list_measurements(s, problem=FUSED)] == [FUSED]
        assert [m.key for m in repo.list_measurements(s, epilogue=FUSED.epilogue)] == ["fused"]
        assert repo.count_measurements(s, problem=P) == repo.count_measurements(s, problem=FUSED) == 1
        assert [m.key for m in repo.problem_measurements(s, FUSED)] == ["fused"]
        plain_best, fused_best = repo.best_of(s, P), repo.best_of(s, FUSED)
        assert plain_best is not None and plain_best.best.trial.key == "plain" and plain_best.runner_up is None
        assert fused_best is not None and fused_best.best.trial.key == "fused"
        assert [r.trial.key for r in repo.ranked(s, P)] == ["plain"]
        assert {(st.problem, st.measurements) for st in repo.problem_stats(s)} == {(P, 1), (FUSED, 1)}
        assert repo.count_problems(s) == 2
        assert repo.tuned_problems(s, "float16", epilogue=P.epilogue) == [P]
        assert repo.tuned_problems(s, "float16", epilogue=FUSED.epilogue) == [FUSED]
        assert set(repo.tuned_problems(s, "float16", epilogue=None)) == {P, FUSED}
        assert repo.tuned_gpus(s, FUSED) == ["NVIDIA H200"]
        assert repo.tuned_gpus(s, Problem.parse("4096x4096x4096", "float16", "bias")) == []
        # The cost model's features do not see an epilogue: it learns from plain GEMMs only.
        samples, _ = repo.training_samples(s, "NVIDIA H200", TEMPLATE_VERSION.split("/")[0])
        assert [sample.problem for sample in samples] == [P]


def test_list_and_count_jobs_paginate_newest_first(db_factory: Factory) -> None:
    ids = [new_job(db_factory, Problem(128 * (i + 1), 256, 512)) for i in range(7)]
    with transaction(db_factory) as s:
        repo.finish_job(s, ids[0], JobState.CANCELLED)
        first = repo.list_jobs(s, limit=3)
        last = repo.list_jobs(s, limit=3, offset=6)
        queued = repo.list_jobs(s, state=JobState.QUEUED, limit=100)
        assert repo.count_jobs(s) == 7
        assert repo.count_jobs(s, JobState.QUEUED) == 6
        assert repo.count_jobs(s, "CANCELLED") == 1
    assert [j.id for j in first] == ids[::-1][:3]
    assert [j.id for j in last] == [ids[0]]
    assert [j.id for j in queued] == ids[:0:-1]


def test_claim_takes_oldest_queued_job(db_factory: Factory) -> None:
    first, second = new_job(db_factory), new_job(db_factory, Problem(64, 64, 64))
    with transaction(db_factory) as s:
        claimed = repo.claim_next_job(s)
    assert claimed is not None and claimed.id == first
    assert claimed.state is JobState.RUNNING and claimed.started_at is not None
    with transaction(db_factory) as s:
        assert repo.claim_next_job(s).id == second  # type: ignore[union-attr]
        assert repo.claim_next_job(s) is None


def test_claim_never_hands_one_job_to_two_claimers(db_factory: Factory) -> None:
    ids = {new_job(db_factory, Problem(64 * (i + 1), 64, 64)) for i in range(24)}
    claimed: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def claimer() -> None:
        start.wait()
        while True:
            with transaction(db_factory) as s:
                job = repo.claim_next_job(s)
            if job is None:
                return
            with lock:
                claimed.append(job.id)

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(claimed) == sorted(ids)  # every job exactly once


def test_finish_unfinished_and_gpu(db_factory: Factory) -> None:
    a, b, c = (new_job(db_factory, Problem(64 * i, 64, 64)) for i in (1, 2, 3))
    with transaction(db_factory) as s:
        repo.claim_next_job(s)
        done = repo.finish_job(s, c, JobState.DONE, "finished 16 trials")
        gpu = repo.set_job_gpu(s, a, "NVIDIA H200")
        unfinished = repo.unfinished_jobs(s)
    assert done.state is JobState.DONE and done.finished_at is not None
    assert done.message == "finished 16 trials"
    assert gpu.gpu_name == "NVIDIA H200"
    assert [(j.id, j.state) for j in unfinished] == [(a, JobState.RUNNING), (b, JobState.QUEUED)]


def test_claim_job_by_id(db_factory: Factory) -> None:
    first, second = new_job(db_factory), new_job(db_factory, Problem(64, 64, 64))
    with transaction(db_factory) as s:
        claimed = repo.claim_job(s, second)
        assert claimed.state is JobState.RUNNING and claimed.started_at is not None
        assert repo.claim_next_job(s).id == first  # type: ignore[union-attr]
    with pytest.raises(DbError, match="is RUNNING, not QUEUED"), transaction(db_factory) as s:
        repo.claim_job(s, second)


def test_requeue_running_resumes_jobs_of_a_dead_service(db_factory: Factory) -> None:
    a, b = new_job(db_factory), new_job(db_factory, Problem(64, 64, 64))
    with transaction(db_factory) as s:
        repo.claim_next_job(s)
        repo.claim_next_job(s)
        repo.finish_job(s, b, JobState.DONE)
        assert repo.requeue_running(s) == 1
        again = repo.get_job(s, a)
        assert repo.requeue_running(s) == 0
    assert again.state is JobState.QUEUED and again.started_at is None


def test_finish_job_wants_a_final_state(db_factory: Factory) -> None:
    job = new_job(db_factory)
    with pytest.raises(DbError, match="not a final job state"), transaction(db_factory) as s:
        repo.finish_job(s, job, JobState.RUNNING)


def test_find_active_job(db_factory: Factory) -> None:
    job = new_job(db_factory)
    with transaction(db_factory) as s:
        assert repo.find_active_job(s, P, "sm_90a").id == job  # type: ignore[union-attr]
        assert repo.find_active_job(s, Problem(4096, 4096, 4096, "bf16"), "sm_90a") is None
        assert repo.find_active_job(s, P, "sm_100a") is None
        repo.claim_next_job(s)
        assert repo.find_active_job(s, P, "sm_90a") is not None  # RUNNING is active too
        repo.finish_job(s, job, JobState.FAILED, "boom")
        assert repo.find_active_job(s, P, "sm_90a") is None


def test_identical_requests_queue_one_job(db_factory: Factory) -> None:
    start = threading.Barrier(4)

    def request() -> None:
        start.wait()
        with transaction(db_factory) as s:
            repo.lock_problem(s, P, "sm_90a")
            if repo.find_active_job(s, P, "sm_90a") is None:
                repo.create_job(s, P, "sm_90a", max_trials=8, time_budget_s=None)

    threads = [threading.Thread(target=request) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    with transaction(db_factory) as s:
        assert repo.count_jobs(s) == 1


def test_jobs_version_moves_with_every_change_of_a_job(db_factory: Factory) -> None:
    """Whatever changes what GET /jobs shows (a new job, its state, trials, best, message) moves
    the version the API's answer cache watches."""
    def version() -> tuple[int, int, int]:
        with transaction(db_factory) as s:
            return repo.jobs_version(s)

    seen = [version()]
    job = new_job(db_factory)
    changes = [
        lambda s: repo.claim_next_job(s),
        lambda s: record_ok(s, 1.0, job_id=job),
        lambda s: record_failure(s, job_id=job),
        lambda s: repo.reuse_measurement(s, repo.get_measurement(s, record_ok(s, 2.0)), job_id=job, trial_number=3),
        lambda s: repo.set_job_gpu(s, job, "NVIDIA H200"),
        lambda s: repo.set_job_best(s, job, record_ok(s, 0.5)),
        lambda s: repo.requeue_running(s),
        lambda s: repo.claim_job(s, job),
        lambda s: repo.finish_job(s, job, JobState.DONE, "done"),
    ]
    seen.append(version())
    for change in changes:
        with transaction(db_factory) as s:
            change(s)
        seen.append(version())
    assert len(set(seen)) == len(seen), seen
    with transaction(db_factory) as s:
        record_ok(s, 3.0)  # a measurement of no job leaves the jobs alone
    assert version() == seen[-1]


@pytest.mark.postgres
def test_jobs_version_sees_a_writer_that_commits_after_a_later_one(empty_pg_url: str) -> None:
    """Two writers, the earlier one committing last: the version read between the two commits
    moves again at the second (the newest `updated_at` would not: it was already the later
    writer's). PostgreSQL only: SQLite's writers exclude each other."""
    migrate.upgrade(empty_pg_url)
    engine = make_engine(empty_pg_url)
    factory = sessionmaker(engine, expire_on_commit=False)
    try:
        first, second = new_job(factory), new_job(factory)
        with factory.begin() as early:
            repo.finish_job(early, first, JobState.CANCELLED)  # updated, not yet committed
            with factory.begin() as late:
                repo.finish_job(late, second, JobState.CANCELLED)
            with transaction(factory) as s:
                between = repo.jobs_version(s)
        with transaction(factory) as s:
            assert repo.jobs_version(s) != between
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_one_job_per_problem_the_second_request_waits_for_the_first(empty_pg_url: str) -> None:
    """PostgreSQL: two sessions run POST /tune's steps for one problem (lock it, find its active
    job, else create one). While the first holds its transaction the second waits in lock_problem
    (seen in pg_locks: an advisory lock not granted), so it finds the first's job once that commits."""
    migrate.upgrade(empty_pg_url)
    engine = make_engine(empty_pg_url)
    factory = sessionmaker(engine, expire_on_commit=False)

    def waiting_for_advisory_locks() -> int:
        with engine.connect() as c:
            waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            return int(c.execute(sa.text(waiting)).scalar_one())

    def request() -> int:
        with transaction(factory) as s:
            repo.lock_problem(s, P, "sm_90a")
            job = repo.find_active_job(s, P, "sm_90a") or repo.create_job(s, P, "sm_90a", 8, None)
            return job.id

    try:
        with transaction(factory) as first:
            repo.lock_problem(first, P, "sm_90a")
            with transaction(factory) as other:  # another problem is not held up
                repo.lock_problem(other, Problem(64, 64, 64), "sm_90a")
                repo.lock_problem(other, P, "sm_100a")
            created = repo.create_job(first, P, "sm_90a", 8, None).id
            with ThreadPoolExecutor(1) as pool:
                second = pool.submit(request)
                deadline = time.monotonic() + 30
                while waiting_for_advisory_locks() == 0:  # the second request is waiting on the lock
                    assert not second.done(), "the second request did not wait for the first's lock"
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
                assert not second.done()
                first.commit()
                assert second.result(timeout=30) == created
        with transaction(factory) as s:
            assert repo.count_jobs(s) == 1
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_the_problem_lock_is_held_until_the_transaction_ends(empty_pg_url: str) -> None:
    """No thread: with a lock timeout the second session's lock_problem gives up while the first
    holds the problem, and takes it once the first has committed."""
    migrate.upgrade(empty_pg_url)
    engine = make_engine(empty_pg_url)
    factory = sessionmaker(engine, expire_on_commit=False)

    def try_lock() -> None:
        with factory.begin() as s:
            s.execute(sa.text("SET LOCAL lock_timeout = '200ms'"))
            repo.lock_problem(s, P, "sm_90a")

    try:
        with factory.begin() as first:
            repo.lock_problem(first, P, "sm_90a")
            with pytest.raises(sa.exc.OperationalError, match="lock timeout"):
                try_lock()
        try_lock()
    finally:
        engine.dispose()


def test_sqlite_serializes_whole_write_transactions_instead(tmp_path: object) -> None:
    """SQLite: lock_problem does nothing; every transaction begins IMMEDIATE (tirtune.db.engine),
    so a second one cannot begin while the first is open: it waits for the busy timeout (30 s;
    0.2 s here), then fails."""
    url = f"sqlite:///{tmp_path}/serial.db"
    migrate.upgrade(url)
    engine, impatient = make_engine(url), make_engine(url)
    sa.event.listen(impatient, "connect", lambda dbapi, _record: dbapi.execute("PRAGMA busy_timeout=200"))
    try:
        with transaction(sessionmaker(engine)) as first:
            repo.lock_problem(first, P, "sm_90a")
            assert repo.find_active_job(first, P, "sm_90a") is None  # the transaction has begun
            with pytest.raises(DbError, match="database is locked"), transaction(sessionmaker(impatient)) as second:
                repo.find_active_job(second, P, "sm_90a")
            repo.create_job(first, P, "sm_90a", 8, None)
        with transaction(sessionmaker(impatient)) as second:
            assert repo.find_active_job(second, P, "sm_90a") is not None
    finally:
        engine.dispose()
        impatient.dispose()


def test_transaction_rolls_back_on_error(db_factory: Factory) -> None:
    with pytest.raises(RuntimeError), transaction(db_factory) as s:
        repo.create_job(s, P, "sm_90a", max_trials=4, time_budget_s=None)
        raise RuntimeError("abort")
    with transaction(db_factory) as s:
        assert repo.count_jobs(s) == 0


def test_transaction_turns_database_faults_into_db_error() -> None:
    engine = make_engine("postgresql://nobody@127.0.0.1:1/nothing")
    try:
        with pytest.raises(DbError, match="database error"), transaction(sessionmaker(engine)) as s:
            repo.ping(s)
    finally:
        engine.dispose()


# --- measurements -----------------------------------------------------------------------------


def test_record_measurement_round_trip(db_factory: Factory) -> None:
    job = new_job(db_factory)
    c = candidate(blk_n=256)
    result = ok_result(c, 0.25)
    with transaction(db_factory) as s:
        r = repo.record_measurement(
            s, job_id=job, trial_number=3, key="abc", candidate=c, outcome=Outcome.OK,
            message="", result=result, build_seconds=11.0,
        )
    assert r.config == c.config and r.problem == P and r.outcome is Outcome.OK
    assert r.tflops == pytest.approx(P.tflops(0.25)) and r.ratio == pytest.approx(4.0)
    assert r.cublas_tflops == pytest.approx(P.tflops(1.0))
    assert r.stack == H200 and r.gpu_name == "NVIDIA H200" and r.compute_capability == "9.0"
    assert r.stack == H200 and r.torch_version == "2.6" and r.sm_clock_mhz == 1980.0
    assert r.template_version == TEMPLATE_VERSION and r.config_digest == c.config.digest()
    assert r.build_seconds == 11.0 and r.repetitions == 100 and not r.stale
    assert r.created_at.tzinfo is UTC
    with transaction(db_factory) as s:
        assert repo.get_measurement(s, r.id) == r


def test_failures_are_stored_with_their_message(db_factory: Factory) -> None:
    job = new_job(db_factory)
    with transaction(db_factory) as s:
        mid = record_failure(s, job_id=job)
        r = repo.get_measurement(s, mid)
        j = repo.get_job(s, job)
    assert r.outcome is Outcome.COMPILE_ERROR and r.message == "nvcc: ptxas error"
    assert r.time_ms is None and r.tflops is None and r.gpu_name == ""
    assert j.trials_done == 1 and j.best_measurement_id is None


def test_job_best_follows_fastest_ok(db_factory: Factory) -> None:
    job = new_job(db_factory)
    with transaction(db_factory) as s:
        slow = record_ok(s, 2.0, job_id=job)
        assert repo.get_job(s, job).best_measurement_id == slow
        fast = record_ok(s, 1.0, job_id=job)
        record_ok(s, 1.5, job_id=job)
        record_failure(s, job_id=job, outcome=Outcome.WRONG_RESULT)
        j = repo.get_job(s, job)
    assert j.best_measurement_id == fast and j.trials_done == 4
    with transaction(db_factory) as s:
        record_failure(s, job_id=job, outcome=Outcome.INVALID)
        j = repo.get_job(s, job)
    assert j.trials_done == 4, "a config refused by a rule costs no trial"


def test_concurrent_records_lose_no_trial(db_factory: Factory) -> None:
    job = new_job(db_factory)

    def recorder(offset: int) -> None:
        for i in range(5):
            with transaction(db_factory) as s:
                record_ok(s, 1.0 + offset + i / 10, job_id=job)

    threads = [threading.Thread(target=recorder, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    with transaction(db_factory) as s:
        j = repo.get_job(s, job)
        best = repo.get_measurement(s, j.best_measurement_id)  # type: ignore[arg-type]
    assert j.trials_done == 20
    assert best.time_ms == 1.0


def test_find_measurement_newest_non_stale(db_factory: Factory) -> None:
    with transaction(db_factory) as s:
        assert repo.find_measurement(s, "k") is None
        record_ok(s, 1.0, key="k")
        newer = record_ok(s, 1.1, key="k")
        record_ok(s, 0.5, key="other")
        assert repo.find_measurement(s, "k").id == newer  # type: ignore[union-attr]
        repo.mark_stale(s, keep_stack=Stack(H200.gpu_name, "999.0", H200.cuda, H200.tvm))
        assert repo.find_measurement(s, "k") is None


def test_reuse_measurement_copies_it_into_the_job(db_factory: Factory) -> None:
    job = new_job(db_factory)
    with transaction(db_factory) as s:
        earlier = repo.get_measurement(s, record_ok(s, 1.0, key="same"))
        reused = repo.reuse_measurement(s, earlier, job_id=job, trial_number=5)
        j = repo.get_job(s, job)
    assert reused.id != earlier.id and (reused.job_id, reused.trial_number) == (job, 5)
    assert (reused.key, reused.tflops, reused.stack, reused.created_at) == (
        earlier.key, earlier.tflops, earlier.stack, earlier.created_at)
    assert j.trials_done == 1 and j.best_measurement_id == reused.id


def test_best_of(db_factory: Factory) -> None:
    h100 = Stack("NVIDIA H100", "570.1", "12.8", "0.27.0")

    def best(**kwargs: object) -> int | None:
        with transaction(db_factory) as s:
            choice = repo.best_of(s, P, **kwargs)  # type: ignore[arg-type]
        return None if choice is None else choice.best.trial.id

    assert best() is None
    with transaction(db_factory) as s:
        record_ok(s, 2.0)
        fastest = record_ok(s, 1.0, blk_n=256)
        record_ok(s, 0.5, problem=Problem(4096, 4096, 4096, "bfloat16"))
        h100_best = record_ok(s, 1.5, stack=h100)
        record_failure(s)
    assert best() == fastest
    assert best(gpu_name="NVIDIA H100") == h100_best
    assert best(gpu_name="NVIDIA B200") is None
    with transaction(db_factory) as s:
        repo.mark_stale(s, keep_stack=Stack(H200.gpu_name, "580.0", H200.cuda, H200.tvm))
    assert best() == h100_best


def test_list_and_count_measurements(db_factory: Factory) -> None:
    job = new_job(db_factory)
    other = Problem(1024, 1024, 1024)
    with transaction(db_factory) as s:
        ids = [record_ok(s, 1.0 + i, job_id=job) for i in range(5)]
        failed = record_failure(s, job_id=job)
        record_ok(s, 1.0, problem=other)
        assert repo.count_measurements(s) == 7
        assert repo.count_measurements(s, job_id=job) == 6
        assert repo.count_measurements(s, problem=other) == 1
        assert repo.count_measurements(s, job_id=job, outcome=Outcome.OK) == 5
        assert repo.count_measurements(s, outcome="COMPILE_ERROR") == 1
        page = repo.list_measurements(s, job_id=job, limit=2, offset=1)
        failures = repo.list_measurements(s, outcome=Outcome.COMPILE_ERROR)
        assert repo.list_measurements(s, job_id=job, offset=10) == []
    assert [r.id for r in page] == [ids[4], ids[3]]  # newest first: the failure is newest
    assert [r.id for r in failures] == [failed]


def test_listed_measurements_are_the_records_the_orm_reads(db_factory: Factory) -> None:
    """list_measurements reads plain rows (no ORM objects): the same records, enums and configs
    as MeasurementRecord.from_row, the source included (GET /trials finds re-measurements by it)."""
    job = new_job(db_factory)
    with transaction(db_factory) as s:
        record_ok(s, 1.0, job_id=job, blk_n=256)
        record_failure(s, job_id=job)
        listed = repo.list_measurements(s, job_id=job)
        rows = s.scalars(sa.select(Measurement).where(Measurement.job_id == job).order_by(Measurement.id.desc()))
        assert listed == [MeasurementRecord.from_row(row) for row in rows]
    for record in listed:
        assert type(record.source) is Source and type(record.outcome) is Outcome and type(record.config) is Config


def test_mark_stale(db_factory: Factory) -> None:
    h100 = Stack("NVIDIA H100", "560.0", "12.4", "0.26.0")
    with transaction(db_factory) as s:
        record_ok(s, 1.0)
        record_ok(s, 1.0, stack=h100)
        new_stack = Stack(H200.gpu_name, H200.driver, "13.0", H200.tvm)
        assert repo.mark_stale(s, keep_stack=new_stack) == 1
        assert repo.mark_stale(s, keep_stack=new_stack) == 0  # already stale
        record_ok(s, 1.0, stack=new_stack)
        assert repo.mark_stale(s, keep_stack=new_stack) == 0
        assert repo.mark_stale(s, keep_stack=new_stack, template_version="hopper-gemm/next") == 1
        by_gpu = {r.gpu_name: r.stale for r in repo.list_measurements(s) if not r.stale}
    assert by_gpu == {"NVIDIA H100": False}


def test_measurement_survives_its_job(db_factory: Factory) -> None:
    job = new_job(db_factory)
    with transaction(db_factory) as s:
        mid = record_ok(s, 1.0, job_id=job)
    with transaction(db_factory) as s:  # no repository function deletes jobs; the schema allows it
        s.execute(sa.text("DELETE FROM tirtune_jobs WHERE id = :id"), {"id": job})
    with transaction(db_factory) as s:
        assert repo.get_measurement(s, mid).job_id is None


# --- engine -----------------------------------------------------------------------------------


def test_sqlite_engine_setup(tmp_path: object) -> None:
    path = f"{tmp_path}/deep/er/tirtune.db"
    engine = make_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as connection:
            pragmas = [connection.exec_driver_sql(f"PRAGMA {p}").scalar() for p in
                       ("foreign_keys", "journal_mode", "busy_timeout")]
    finally:
        engine.dispose()
    assert pragmas == [1, "wal", 30_000]


def test_open_database_migrates_sqlite(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/new.db"
    factory = open_database(url)
    try:
        with transaction(factory) as s:
            assert repo.count_jobs(s) == 0
        assert migrate.current(url) == migrate.head()
    finally:
        factory.kw["bind"].dispose()


@pytest.mark.postgres
def test_open_database_refuses_postgres_behind(empty_pg_url: str) -> None:
    with pytest.raises(DbError, match="migrate it with `tirtune db upgrade --database "):
        open_database(empty_pg_url)


def test_bare_postgresql_url_means_psycopg() -> None:
    assert normalize_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("sqlite:///x.db").drivername == "sqlite"
