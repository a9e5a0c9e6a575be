"""The HTTP API against real databases (SQLite file and PostgreSQL), workers off."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session, sessionmaker

from tirtune.api import create_app
from tirtune.core import Candidate, Outcome, Provenance, RunResult, Stack
from tirtune.db import DbError, JobState, make_engine, repo, session_factory, transaction
from tirtune.settings import Settings
from tirtune.space import HOPPER, TEMPLATE_VERSION, Config, Problem
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.space.hopper.knobs import config as hopper_config

Factory = sessionmaker[Session]
P = Problem(4096, 4096, 4096)
H200 = Stack("NVIDIA H200", "570.1", "12.8", "0.27.0", "9.0")
BODY = {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"}


def make_client(db_url: str, factory: Factory, token: str | None = None) -> TestClient:
    settings = Settings(database_url=db_url, api_token=token)
    app = create_app(settings, session_factory=factory, start_workers=False)
    return TestClient(app, raise_server_exceptions=False)


@pytest.fixture
def client(db_url: str, db_factory: Factory) -> Iterator[TestClient]:
    with make_client(db_url, db_factory) as c:
        yield c


def measure(factory: Factory, time_ms: float, *, job_id: int | None = None, problem: Problem = P,
            stack: Stack = H200, rel_error: float = 1e-3, outcome: Outcome = Outcome.OK) -> int:
    c = Candidate(hopper_config(), problem, TEMPLATE_VERSION)
    result = RunResult(c, outcome, time_ms=time_ms, cublas_ms=1.0, repetitions=50, rel_error=rel_error,
                       provenance=Provenance(stack, TEMPLATE_VERSION, torch="2.6", sm_clock_mhz=1980.0))
    with transaction(factory) as s:
        return repo.record_measurement(
            s, job_id=job_id, trial_number=0, key=f"key-{time_ms}", candidate=c, outcome=outcome,
            message="", result=result, build_seconds=None,
        ).id


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "detail"}
    assert body["error"]["code"] == code and body["error"]["message"]
    return body["error"]  # type: ignore[no-any-return]


# --- POST /tune ---------------------------------------------------------------------------------


def test_tune_queues_a_job(client: TestClient) -> None:
    response = client.post("/tune", json={**BODY, "max_trials": 8, "time_budget_s": 120})
    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["location"] == f"/jobs/{job['id']}"
    assert job["state"] == "QUEUED" and job["shape"] == "4096x4096x4096" and job["arch"] == "sm_90a"
    assert job["problem"] == {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16", "epilogue": "none", "scaling": "none"}
    assert job["max_trials"] == 8 and job["trials_done"] == 0 and job["progress"] == 0 and job["best"] is None
    assert client.get(f"/jobs/{job['id']}").json() == job


def test_tune_returns_the_active_identical_job(client: TestClient) -> None:
    first = client.post("/tune", json=BODY)
    again = client.post("/tune", json={**BODY, "dtype": "fp16", "max_trials": 3})
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["location"] == first.headers["location"]
    other = client.post("/tune", json={**BODY, "dtype": "bf16"})
    assert other.status_code == 202 and other.json()["problem"]["dtype"] == "bfloat16"


def test_a_blackwell_job_is_its_own_job(client: TestClient) -> None:
    hopper = client.post("/tune", json=BODY).json()
    blackwell = client.post("/tune", json={**BODY, "arch": "sm_100a"})
    assert blackwell.status_code == 202 and blackwell.json()["arch"] == "sm_100a"
    assert blackwell.json()["id"] != hopper["id"]


def test_tune_after_the_job_finished_queues_a_new_one(client: TestClient, db_factory: Factory) -> None:
    first = client.post("/tune", json=BODY).json()
    with transaction(db_factory) as s:
        repo.finish_job(s, first["id"], JobState.DONE)
    again = client.post("/tune", json=BODY)
    assert again.status_code == 202 and again.json()["id"] != first["id"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**BODY, "m": 0}, "body.m"),
        ({**BODY, "n": -5}, "body.n"),
        ({**BODY, "dtype": "int8"}, "body.dtype"),
        ({"n": 4096, "k": 4096}, "body.m"),
        ({**BODY, "m": "4096"}, "body.m"),
        ({**BODY, "k": 4096.5}, "body.k"),
        ({**BODY, "m": True}, "body.m"),
        ({**BODY, "max_trials": 0}, "body.max_trials"),
        ({**BODY, "max_trials": 10_001}, "body.max_trials"),
        ({**BODY, "time_budget_s": 0}, "body.time_budget_s"),
        ({**BODY, "max_trial": 5}, "body.max_trial"),
        ({**BODY, "arch": "sm_80"}, "body.arch"),
        ("4096x4096x4096", "body"),
    ],
)
def test_tune_refuses_bad_bodies(client: TestClient, body: Any, field: str) -> None:
    error = assert_error(client.post("/tune", json=body), 422, "validation_error")
    assert field in [d["field"] for d in error["detail"]]
    assert client.get("/jobs").json()["total"] == 0


def test_tune_refuses_malformed_json(client: TestClient) -> None:
    response = client.post("/tune", content=b"{m: 1", headers={"content-type": "application/json"})
    assert_error(response, 422, "validation_error")


def test_tune_refuses_k_tma_cannot_address(client: TestClient) -> None:
    error = assert_error(client.post("/tune", json={**BODY, "k": 4001}), 422, "invalid_problem")
    assert "K=4001" in error["message"] and "16 B" in error["message"]
    assert client.get("/jobs").json()["total"] == 0


def test_tune_refuses_huge_dimension(client: TestClient) -> None:
    error = assert_error(client.post("/tune", json={**BODY, "m": 10**30}), 422, "invalid_problem")
    assert "out of range" in error["message"]


def test_token_is_enforced_when_set(db_url: str, db_factory: Factory) -> None:
    with make_client(db_url, db_factory, token="s3cret") as c:
        assert_error(c.post("/tune", json=BODY), 401, "unauthorized")
        wrong = c.post("/tune", json=BODY, headers={"Authorization": "Bearer nope"})
        assert_error(wrong, 401, "unauthorized")
        assert wrong.headers["www-authenticate"] == "Bearer"
        for header in ("Basic s3cret", "Bearer s3crét".encode("latin-1")):
            assert_error(c.post("/tune", json=BODY, headers={"Authorization": header}), 401, "unauthorized")
        assert c.post("/tune", json=BODY, headers={"Authorization": "Bearer s3cret"}).status_code == 202
        assert c.get("/jobs").status_code == 200  # reading needs no token


# --- GET /jobs ------------------------------------------------------------------------------------


def test_jobs_paginate(client: TestClient) -> None:
    ids = [client.post("/tune", json={**BODY, "m": 128 * (i + 1)}).json()["id"] for i in range(5)]
    page = client.get("/jobs", params={"limit": 2, "offset": 1}).json()
    assert (page["total"], page["limit"], page["offset"]) == (5, 2, 1)
    assert [j["id"] for j in page["items"]] == ids[::-1][1:3]
    assert client.get("/jobs", params={"offset": 10}).json()["items"] == []
    assert client.get("/jobs", params={"state": "QUEUED"}).json()["total"] == 5
    assert client.get("/jobs", params={"state": "DONE"}).json()["total"] == 0


@pytest.mark.parametrize(
    "params", [{"limit": 0}, {"limit": 501}, {"offset": -1}, {"state": "SLEEPING"}, {"limit": "ten"}]
)
def test_jobs_refuse_bad_queries(client: TestClient, params: dict[str, Any]) -> None:
    error = assert_error(client.get("/jobs", params=params), 422, "validation_error")
    assert error["detail"][0]["field"] == f"query.{next(iter(params))}"


def test_job_shows_its_best_and_progress(client: TestClient, db_factory: Factory) -> None:
    job = client.post("/tune", json={**BODY, "max_trials": 4}).json()
    measure(db_factory, 2.0, job_id=job["id"])
    best = measure(db_factory, 1.0, job_id=job["id"])
    out = client.get(f"/jobs/{job['id']}").json()
    assert out["trials_done"] == 2 and out["progress"] == 0.5
    assert out["best"]["id"] == best and out["best"]["tflops"] == pytest.approx(P.tflops(1.0))
    listed = client.get("/jobs").json()["items"][0]
    assert listed["best"]["id"] == best


def test_missing_job_is_404(client: TestClient) -> None:
    error = assert_error(client.get("/jobs/999"), 404, "not_found")
    assert error["message"] == "job 999 not found"
    assert_error(client.get("/jobs/abc"), 422, "validation_error")
    assert_error(client.get("/jobs/99999999999999999999"), 422, "validation_error")


def test_unknown_route_and_method_use_the_error_schema(client: TestClient) -> None:
    assert_error(client.get("/nope"), 404, "not_found")
    assert_error(client.delete("/tune"), 405, "method_not_allowed")


# --- GET /best --------------------------------------------------------------------------------------


def test_best_when_nothing_tuned_is_404_unless_predicted(client: TestClient) -> None:
    error = assert_error(client.get("/best", params={"shape": "4096x4096x4096", "predict": "false"}), 404,
                         "not_found")
    assert error["message"] == "nothing tuned for 4096x4096x4096 float16 yet; POST /tune to start"


def test_best_of_a_problem_nobody_tuned_is_the_cost_models_prediction(client: TestClient) -> None:
    """Labelled `predicted`, with no key and no figures: nothing was built or measured. The GPU is
    the shipped prior's when the database has measured none; the pick is valid on its branch."""
    out = client.get("/best", params={"shape": "512x6144x4096", "dtype": "bf16"})
    assert out.status_code == 200, out.text
    body = out.json()
    assert body["kind"] == "predicted" and body["gpu"] == "NVIDIA H200" and body["branch"] == "sm_90a"
    assert "key" not in body and "ratio" not in body and body["predicted_ratio"] > 0
    config = Config.from_json(body["config"], HOPPER_KNOBS)
    assert HOPPER.is_valid(config, Problem(512, 6144, 4096, "bfloat16")) and body["config_label"] == config.label()
    assert len(body["alternatives"]) == 4 and body["model"]["samples"] > 1000
    tiles = {(a["config"]["blk_m"], a["config"]["blk_n"], a["config"]["split_k"]) for a in body["alternatives"]}
    assert len(tiles) == 4  # each runner-up on a tile of its own
    assert "never measured" in body["note"]
    # A problem its branch refuses (K = 4 mod 8) is not predicted; nor replayed figures.
    assert_error(client.get("/best", params={"shape": "512x6144x4092"}), 404, "not_found")
    assert_error(client.get("/best", params={"shape": "512x6144x4096", "source": "replay"}), 404, "not_found")


def test_predictions_can_be_turned_off(db_url: str, db_factory: Factory) -> None:
    app = create_app(Settings(database_url=db_url, cost_model=False), session_factory=db_factory,
                     start_workers=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        assert_error(c.get("/best", params={"shape": "512x6144x4096"}), 404, "not_found")


@pytest.mark.parametrize(("params", "reason"), [
    ({"shape": "4096x4096x4095"}, "K must be a multiple of 8"),
    ({"shape": "4096x4096x4095", "gpu": "NVIDIA B200"}, "K must be a multiple of 8"),
])
def test_best_of_a_problem_post_tune_would_refuse_says_why_instead_of_inviting_it(
    client: TestClient, params: dict[str, str], reason: str
) -> None:
    error = assert_error(client.get("/best", params=params), 404, "not_found")
    assert "POST /tune to start" not in error["message"], error["message"]
    assert "POST /tune would refuse it" in error["message"] and reason in error["message"], error["message"]
    refused = client.post("/tune", json={"m": 4096, "n": 4096, "k": 4095})
    assert refused.status_code == 422 and reason in refused.json()["error"]["message"]  # as said


def test_best_returns_the_fastest(client: TestClient, db_factory: Factory) -> None:
    measure(db_factory, 2.0)
    measure(db_factory, 1.0)
    measure(db_factory, 0.5, outcome=Outcome.WRONG_RESULT)
    measure(db_factory, 0.9, stack=Stack("NVIDIA H100", "570.1", "12.8", "0.27.0"))
    best = client.get("/best", params={"shape": "4096x4096x4096", "dtype": "fp16", "gpu": "NVIDIA H200"})
    assert best.status_code == 200, best.text
    out = best.json()
    assert out["time_ms"] == 1.0 and out["ratio"] == 1.0 and out["shape"] == "4096x4096x4096"
    assert out["dtype"] == "float16" and out["config"] == hopper_config().to_json()
    assert out["provenance"]["gpu_name"] == "NVIDIA H200"
    assert out["provenance"]["template_version"] == TEMPLATE_VERSION
    assert client.get("/best", params={"shape": "4096x4096x4096"}).json()["time_ms"] == 0.9
    elsewhere = client.get("/best", params={"shape": "4096x4096x4096", "gpu": "NVIDIA B200"})
    error = assert_error(elsewhere, 404, "not_found")
    assert "on NVIDIA B200" in error["message"]


def test_best_falls_back_to_the_nearest_shape_only_if_asked(client: TestClient, db_factory: Factory) -> None:
    measure(db_factory, 1.0, problem=Problem(2048, 4096, 4096))
    measure(db_factory, 0.5, problem=Problem(8192, 8192, 8192))
    measure(db_factory, 0.1, problem=Problem(4096, 4096, 4096, "bfloat16"))  # other dtype: never served
    measure(db_factory, 0.2, problem=Problem(4096, 4096, 4000), outcome=Outcome.WRONG_RESULT)  # not tuned
    params = {"shape": "4096x4096x4096", "dtype": "float16", "predict": "false"}
    assert_error(client.get("/best", params=params), 404, "not_found")
    out = client.get("/best", params={**params, "fallback": "nearest"}).json()
    assert out["shape"] == "2048x4096x4096" and out["time_ms"] == 1.0
    assert out["fallback"] == {"used": True, "requested": "4096x4096x4096", "served": "2048x4096x4096",
                               "distance": pytest.approx(math.log(2))}
    exact = client.get("/best", params={"shape": "2048x4096x4096", "fallback": "nearest"}).json()
    assert exact["fallback"] == {"used": False, "requested": "2048x4096x4096", "served": "2048x4096x4096",
                                 "distance": 0.0}
    assert client.get("/best", params={"shape": "2048x4096x4096"}).json()["fallback"] is None
    on_b200 = client.get("/best", params={**params, "fallback": "nearest", "gpu": "NVIDIA B200"})
    assert_error(on_b200, 404, "not_found")
    assert_error(client.get("/best", params={**params, "fallback": "any"}), 422, "validation_error")


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"shape": "abc"}, "invalid_problem"),
        ({"shape": "4096x4096"}, "invalid_problem"),
        ({"shape": "0x1x1"}, "invalid_problem"),
        ({"shape": "64x64x64", "dtype": "int8"}, "invalid_problem"),
        ({}, "validation_error"),
        ({"shape": "64x64x64", "gpu": "bad\x00name"}, "validation_error"),
    ],
)
def test_best_refuses_malformed_queries(client: TestClient, params: dict[str, str], code: str) -> None:
    error = assert_error(client.get("/best", params=params), 422, code)
    if params.get("shape") == "abc":
        assert "expected MxNxK" in error["message"]


# --- GET /trials ------------------------------------------------------------------------------------


def test_trials_filter_and_paginate(client: TestClient, db_factory: Factory) -> None:
    job = client.post("/tune", json=BODY).json()["id"]
    ids = [measure(db_factory, 1.0 + i, job_id=job) for i in range(4)]
    measure(db_factory, 1.0, problem=Problem(1024, 1024, 1024, "bfloat16"))
    measure(db_factory, 3.0, outcome=Outcome.TIMEOUT)
    page = client.get("/trials", params={"job_id": job, "limit": 2, "offset": 1}).json()
    assert page["total"] == 4 and [m["id"] for m in page["items"]] == [ids[2], ids[1]]
    item = page["items"][0]
    assert item["config_label"] == hopper_config().label() and item["outcome"] == "OK"
    assert item["provenance"]["driver"] == "570.1" and item["stale"] is False
    assert client.get("/trials", params={"shape": "1024x1024x1024", "dtype": "bf16"}).json()["total"] == 1
    assert client.get("/trials", params={"shape": "1024x1024x1024"}).json()["total"] == 0
    # A dtype alone narrows to every problem of that dtype.
    assert client.get("/trials", params={"dtype": "BF16"}).json()["total"] == 1
    assert client.get("/trials", params={"dtype": "float16", "job_id": job}).json()["total"] == 4
    assert client.get("/trials", params={"dtype": "float16", "limit": 1}).json()["total"] == 5
    assert client.get("/trials", params={"outcome": "TIMEOUT"}).json()["total"] == 1
    assert client.get("/trials").json()["total"] == 6


def test_trials_total_is_exact_on_every_page(client: TestClient, db_factory: Factory) -> None:
    # The last page knows the total without a COUNT; the others (and a page past the end) count.
    ids = [measure(db_factory, 1.0 + i) for i in range(5)][::-1]
    for limit, offset in ((2, 0), (2, 2), (2, 4), (5, 0), (10, 0), (3, 3), (2, 5), (2, 9), (5, 5)):
        page = client.get("/trials", params={"limit": limit, "offset": offset}).json()
        assert page["total"] == 5 and [m["id"] for m in page["items"]] == ids[offset:offset + limit], (limit, offset)
    assert client.get("/trials", params={"outcome": "TIMEOUT"}).json() == {"items": [], "total": 0, "limit": 100,
                                                                         "offset": 0}


def test_a_trials_page_reads_its_rows_and_their_remeasurements_and_the_last_page_no_count(
    db_url: str, db_factory: Factory, db_engine: Any
) -> None:
    """One query for the page's rows (plain rows, no ORM), one for their re-measurements, and a
    COUNT only on a page before the last."""
    for i in range(3):
        measure(db_factory, 1.0 + i)
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement.lower())

    with TestClient(create_app(Settings(database_url=db_url, best_cache_check_s=0), session_factory=db_factory,
                               start_workers=False)) as c:
        sqlalchemy.event.listen(db_engine, "before_cursor_execute", seen)
        try:
            assert c.get("/trials", params={"limit": 100}).json()["total"] == 3
            last_page = list(statements)
            statements.clear()
            assert c.get("/trials", params={"limit": 2}).json()["total"] == 3
        finally:
            sqlalchemy.event.remove(db_engine, "before_cursor_execute", seen)
    assert len(last_page) == 2 and not any("count(" in q for q in last_page)
    assert "from tirtune_measurements" in last_page[0] and "from tirtune_remeasurements" in last_page[1]
    assert len(statements) == 3 and "count(" in statements[1]  # a page before the last counts


def test_a_job_is_read_in_two_queries(db_url: str, db_factory: Factory, db_engine: Any) -> None:
    """GET /jobs/{id} uncached: the job with its best trial (kept on the job's row: no ranking, no
    scan of its measurements), then that trial's re-measurement."""
    with transaction(db_factory) as s:
        job = repo.create_job(s, P, "sm_90a", 8).id
    for i in range(5):
        measure(db_factory, 1.0 + i, job_id=job)
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement.lower())

    with TestClient(create_app(Settings(database_url=db_url, best_cache_check_s=0), session_factory=db_factory,
                               start_workers=False)) as c:
        sqlalchemy.event.listen(db_engine, "before_cursor_execute", seen)
        try:
            body = c.get(f"/jobs/{job}").json()
        finally:
            sqlalchemy.event.remove(db_engine, "before_cursor_execute", seen)
    assert body["trials_done"] == 5 and body["best"]["time_ms"] == 1.0
    queries = [q for q in statements if q.lstrip().startswith("select")]
    assert len(queries) == 2, queries
    assert "from tirtune_jobs left outer join tirtune_measurements" in queries[0]
    assert "from tirtune_remeasurements" in queries[1]


def test_trials_refuse_bad_filters(client: TestClient) -> None:
    assert_error(client.get("/trials", params={"outcome": "MEH"}), 422, "validation_error")
    assert_error(client.get("/trials", params={"shape": "1x2"}), 422, "invalid_problem")
    assert_error(client.get("/trials", params={"dtype": "int8"}), 422, "invalid_problem")
    assert_error(client.get("/trials", params={"job_id": 2**40}), 422, "validation_error")


def test_non_finite_numbers_serialize_as_null(client: TestClient, db_factory: Factory) -> None:
    measure(db_factory, 1.0, rel_error=float("nan"), outcome=Outcome.WRONG_RESULT)
    response = client.get("/trials")
    assert response.status_code == 200 and response.json()["items"][0]["rel_error"] is None


# --- health, startup, unexpected errors ---------------------------------------------------------------


def test_healthz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "database": "ok"}


def test_openapi_documents_the_error_schema(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert "ErrorOut" in spec["components"]["schemas"]
    assert spec["paths"]["/best"]["get"]["responses"]["404"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorOut"
    }


def test_healthz_reports_unreachable_database(db_url: str, db_factory: Factory) -> None:
    unreachable = make_engine("postgresql://x@127.0.0.1:1/none")
    try:
        with make_client(db_url, db_factory) as c:
            c.app.state.session_factory = session_factory(unreachable)  # type: ignore[attr-defined]
            assert_error(c.get("/healthz"), 503, "database_error")
    finally:
        unreachable.dispose()


def test_startup_migrates_sqlite_but_refuses_postgres_behind(empty_db_url: str) -> None:
    app = create_app(Settings(database_url=empty_db_url), start_workers=False)
    if empty_db_url.startswith("sqlite"):
        with TestClient(app) as c:
            assert c.post("/tune", json=BODY).status_code == 202
    else:
        with pytest.raises(DbError, match="migrate it with `tirtune db upgrade --database "), TestClient(app):
            pass


def test_unexpected_errors_are_500_in_the_error_schema(client: TestClient) -> None:
    app: FastAPI = client.app  # type: ignore[assignment]

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("bug")

    error = assert_error(client.get("/boom"), 500, "internal_error")
    assert "bug" not in error["message"]


# --- junk never makes a 5xx ---------------------------------------------------------------------------

junk_text = st.text(max_size=30)
junk_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | junk_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(junk_text, inner, max_size=3),
    max_leaves=8,
)
tune_body = st.fixed_dictionaries(
    {},
    optional={name: junk_value | st.integers(-5, 70_000)
              for name in ("m", "n", "k", "dtype", "max_trials", "time_budget_s", "extra")},
)
query = st.dictionaries(
    st.sampled_from(["shape", "dtype", "gpu", "job_id", "outcome", "state", "limit", "offset"]),
    junk_text | st.integers().map(str) | st.just("64x64x64"),
    max_size=5,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=tune_body | junk_value, path=st.sampled_from(["/best", "/trials", "/jobs", "/healthz"]),
       params=query)
def test_junk_never_makes_a_server_error(
    client: TestClient, body: Any, path: str, params: dict[str, str]
) -> None:
    # json.dumps writes NaN and Infinity, which strict JSON encoders refuse: the server must cope.
    posted = client.post("/tune", content=json.dumps(body), headers={"content-type": "application/json"})
    assert posted.status_code < 500, posted.text
    got = client.get(path, params=params)
    assert got.status_code < 500, got.text
    raw = client.get(f"/jobs/{quote(params.get('job_id', '1'), safe='')}")
    assert raw.status_code < 500, raw.text
