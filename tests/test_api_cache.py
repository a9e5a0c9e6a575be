"""The API's answer cache (GET /best, /trials, /jobs): dropped when the measurements or the jobs change,
checked once per interval."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker
from test_api import measure

from tirtune.api import create_app
from tirtune.api.cache import ResponseCache
from tirtune.core import Stack
from tirtune.db import JobState, repo, transaction
from tirtune.settings import Settings
from tirtune.space import Problem

BEST = {"shape": "4096x4096x4096", "dtype": "float16", "predict": "false"}  # a measurement or 404


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_check_per_interval_and_a_new_version_drops_everything() -> None:
    clock = Clock()
    cache = ResponseCache(1.0, clock=clock)
    assert cache.claim_check() and not cache.claim_check()  # one checker at a time
    cache.checked((5, 0))
    cache.put("a", b"1", cache.generation)
    clock.now += 0.5
    assert not cache.claim_check() and cache.get("a") == b"1"
    clock.now += 0.5
    assert cache.claim_check()
    cache.checked((5, 0))  # unchanged: kept
    assert cache.get("a") == b"1"
    clock.now += 1
    assert cache.claim_check()
    cache.checked((6, 0))  # a new measurement: dropped
    assert cache.get("a") is None


def test_a_read_that_raced_an_invalidation_is_not_stored() -> None:
    cache = ResponseCache(1.0, clock=Clock())
    assert cache.claim_check()
    cache.checked((1, 0))
    generation = cache.generation  # a miss starts reading ...
    cache.clear()  # ... the data changes meanwhile
    cache.put("a", b"old", generation)
    assert cache.get("a") is None


def test_a_failed_check_drops_everything_and_checks_again_next_time() -> None:
    cache = ResponseCache(1.0, clock=Clock())
    assert cache.claim_check()
    cache.checked((1, 0))
    cache.put("a", b"1", cache.generation)
    assert not cache.claim_check()
    cache.clear()
    cache.put("a", b"1", cache.generation)
    cache._next_check = float("-inf")  # due again
    assert cache.claim_check()
    cache.checked(None)
    assert cache.get("a") is None and cache.claim_check()


def test_off_stores_nothing() -> None:
    cache = ResponseCache(0)
    assert not cache.claim_check()
    cache.put("a", b"1", cache.generation)
    assert cache.get("a") is None


def client_checking_every(db_url: str, factory: sessionmaker[Session], seconds: float) -> TestClient:
    app = create_app(Settings(database_url=db_url, best_cache_check_s=seconds), session_factory=factory,
                     start_workers=False)
    return TestClient(app, raise_server_exceptions=False)


def test_best_is_served_from_the_cache_until_a_check_sees_new_measurements(
    db_url: str, db_factory: sessionmaker[Session]
) -> None:
    with client_checking_every(db_url, db_factory, 3600) as c:
        cache: ResponseCache = c.app.state.best_cache  # type: ignore[attr-defined]
        assert c.get("/best", params=BEST).status_code == 404  # refusals are not cached
        wait_for_check(cache)  # nothing is stored before the first check has read a version
        measure(db_factory, 2.0)
        assert c.get("/best", params=BEST).json()["time_ms"] == 2.0
        measure(db_factory, 1.0)
        assert c.get("/best", params=BEST).json()["time_ms"] == 2.0  # no check due yet: the stored answer
        cache._next_check = float("-inf")  # the interval has passed
        assert c.get("/best", params=BEST).json()["time_ms"] == 2.0  # the check runs behind this answer
        wait_for_check(cache)
        assert c.get("/best", params=BEST).json()["time_ms"] == 1.0
        with transaction(db_factory) as s:  # marking stale changes the version too
            repo.mark_stale(s, keep_stack=Stack("NVIDIA H200", "999", "12.8", "0.27.0", "9.0"))
        cache._next_check = float("-inf")
        c.get("/best", params=BEST)
        wait_for_check(cache)
        assert c.get("/best", params=BEST).status_code == 404


def wait_for_check(cache: ResponseCache) -> None:
    """The version check runs in the background of the request that claimed it."""
    deadline = time.monotonic() + 10
    while cache._checking and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not cache._checking


def test_best_without_cache_is_always_fresh(db_url: str, db_factory: sessionmaker[Session]) -> None:
    with client_checking_every(db_url, db_factory, 0) as c:
        measure(db_factory, 2.0)
        assert c.get("/best", params=BEST).json()["time_ms"] == 2.0
        measure(db_factory, 1.0)
        assert c.get("/best", params=BEST).json()["time_ms"] == 1.0


def test_trials_pages_are_cached_and_dropped_like_best(db_url: str, db_factory: sessionmaker[Session]) -> None:
    with client_checking_every(db_url, db_factory, 3600) as c:
        cache: ResponseCache = c.app.state.best_cache  # type: ignore[attr-defined]
        c.get("/trials")
        wait_for_check(cache)
        first = measure(db_factory, 2.0)
        page = c.get("/trials", params={"limit": 1}).json()
        assert page["total"] == 1 and page["items"][0]["id"] == first
        second = measure(db_factory, 1.0)
        assert c.get("/trials", params={"limit": 1}).json() == page  # no check due yet: the stored page
        assert c.get("/trials", params={"limit": 2}).json()["total"] == 2  # another page: read now
        cache._next_check = float("-inf")
        c.get("/trials", params={"limit": 1})  # the check runs behind this answer
        wait_for_check(cache)
        page = c.get("/trials", params={"limit": 1}).json()
        assert page["total"] == 2 and page["items"][0]["id"] == second
        assert c.get("/trials", params={"shape": "0x1x1"}).status_code == 422  # refusals are not cached


def test_job_answers_are_cached_and_dropped_when_a_job_changes(db_url: str, db_factory: sessionmaker[Session]) -> None:
    with client_checking_every(db_url, db_factory, 3600) as c:
        cache: ResponseCache = c.app.state.best_cache  # type: ignore[attr-defined]
        assert c.get("/jobs/1").status_code == 404  # refusals are not cached
        wait_for_check(cache)
        with transaction(db_factory) as s:
            job = repo.create_job(s, Problem(4096, 4096, 4096), "sm_90a", 4).id
        assert c.get(f"/jobs/{job}").json()["state"] == "QUEUED"
        assert c.get("/jobs").json()["total"] == 1
        with transaction(db_factory) as s:
            repo.claim_next_job(s)  # a job's state changes: no measurement does
        assert c.get(f"/jobs/{job}").json()["state"] == "QUEUED"  # no check due yet: the stored answer
        cache._next_check = float("-inf")
        c.get(f"/jobs/{job}")  # the check runs behind this answer
        wait_for_check(cache)
        assert c.get(f"/jobs/{job}").json()["state"] == "RUNNING"
        measure(db_factory, 1.0, job_id=job)
        cache._next_check = float("-inf")
        c.get(f"/jobs/{job}")
        wait_for_check(cache)
        assert c.get(f"/jobs/{job}").json()["trials_done"] == 1
        # A job queued through this process drops its stored pages at once.
        assert c.get("/jobs").json()["total"] == 1
        assert c.post("/tune", json={"m": 64, "n": 64, "k": 64}).status_code == 202
        assert c.get("/jobs").json()["total"] == 2
        with transaction(db_factory) as s:
            repo.finish_job(s, job, JobState.CANCELLED)
        cache._next_check = float("-inf")
        c.get("/jobs")
        wait_for_check(cache)
        assert c.get("/jobs", params={"state": "CANCELLED"}).json()["total"] == 1
        assert c.get("/jobs").json()["items"][1]["state"] == "CANCELLED"
