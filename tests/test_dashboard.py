"""The dashboard page, its static files and the study views it polls, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tirtune.api import create_app
from tirtune.api.dashboard import STATIC
from tirtune.api.nearest import log_distance, nearest
from tirtune.core import Candidate, Outcome, Provenance, RunResult, Stack
from tirtune.db import repo, transaction
from tirtune.settings import Settings
from tirtune.space import TEMPLATE_VERSION, Config, Problem
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.space.hopper.knobs import config as hopper_config

Factory = sessionmaker[Session]
P = Problem(4096, 4096, 4096)
H200 = Stack("NVIDIA H200", "570.1", "12.8", "0.27.0", "9.0")
SUMMARY = "/studies/4096x4096x4096/float16/summary"


@pytest.fixture
def client(db_url: str, db_factory: Factory) -> Iterator[TestClient]:
    app = create_app(Settings(database_url=db_url), session_factory=db_factory, start_workers=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def record(factory: Factory, config: Config, *, time_ms: float | None = None, cublas_ms: float = 0.2,
           outcome: Outcome = Outcome.OK, message: str = "", job_id: int | None = None,
           problem: Problem = P) -> int:
    c = Candidate(config, problem, TEMPLATE_VERSION)
    result = None
    if outcome is Outcome.OK:
        result = RunResult(c, outcome, time_ms=time_ms, cublas_ms=cublas_ms, repetitions=50, rel_error=1e-4,
                           provenance=Provenance(H200, TEMPLATE_VERSION, torch="2.6"))
    with transaction(factory) as s:
        return repo.record_measurement(
            s, job_id=job_id, trial_number=None, key=f"{config.digest()}-{time_ms}-{outcome.value}",
            candidate=c, outcome=outcome, message=message, result=result,
        ).id


def tune(client: TestClient, m: int = 4096) -> int:
    response = client.post("/tune", json={"m": m, "n": 4096, "k": 4096})
    assert response.status_code == 202, response.text
    job_id: int = response.json()["id"]
    return job_id


# --- the page and its files ----------------------------------------------------------------------


def test_dashboard_page_loads_only_local_assets(client: TestClient) -> None:
    page = client.get("/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<h2>Jobs</h2>" in page.text and "TFLOP/s" in page.text
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert "/dashboard/static/vendor/chart.umd.min.js" in assets
    for asset in assets:
        assert not asset.startswith(("http:", "https:", "//")), f"{asset}: the page must work offline"
        if asset.startswith("/dashboard/static/"):
            assert client.get(asset).status_code == 200, asset
    assert client.get("/", follow_redirects=False).headers["location"] == "/dashboard"


def test_static_files_ship_with_the_package_and_name_no_cdn() -> None:
    vendored = STATIC / "vendor" / "chart.umd.min.js"
    assert vendored.read_text().startswith("/*!\n * Chart.js v4.6.1")
    assert (STATIC / "vendor" / "chart.js-LICENSE.md").exists()
    for path in (STATIC / "index.html", STATIC / "dashboard.js", STATIC / "dashboard.css"):
        assert not re.search(r"https?://(?!www\.chartjs\.org)", path.read_text()), path


def test_dashboard_is_not_in_the_openapi_schema(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "/dashboard" not in paths and "/studies/{shape}/{dtype}/summary" in paths


# --- GET /studies -----------------------------------------------------------------------------------


def test_studies_list_problems_with_counts(client: TestClient, db_factory: Factory) -> None:
    record(db_factory, hopper_config(), time_ms=0.25)
    record(db_factory, hopper_config(stages=3), time_ms=0.20)
    record(db_factory, hopper_config(stages=9), outcome=Outcome.INVALID, message="smem_fits: too big")
    record(db_factory, hopper_config(), time_ms=0.01, problem=Problem(1024, 1024, 1024, "bfloat16"))
    page = client.get("/studies").json()
    assert page["total"] == 2 and [s["shape"] for s in page["items"]] == ["1024x1024x1024", "4096x4096x4096"]
    big = page["items"][1]
    assert (big["dtype"], big["measurements"], big["ok"]) == ("float16", 3, 2)
    assert big["best_tflops"] == pytest.approx(P.tflops(0.20))
    second = client.get("/studies", params={"limit": 1, "offset": 1}).json()
    assert second["items"][0]["shape"] == "4096x4096x4096"


# --- GET /studies/{shape}/{dtype}/summary -----------------------------------------------------------


def test_summary_of_a_study(client: TestClient, db_factory: Factory) -> None:
    job = tune(client)
    # blk_n alone decides the speed here; stages varies without effect.
    for blk_n, stages, time_ms in [(128, 3, 0.4), (256, 3, 0.2), (128, 4, 0.4), (256, 4, 0.2)]:
        record(db_factory, hopper_config(blk_n=blk_n, stages=stages), time_ms=time_ms, job_id=job,
               cublas_ms=0.25 if stages == 3 else 0.2)
        if blk_n == 128 and stages == 3:
            record(db_factory, hopper_config(blk_m=256, consumers=1), outcome=Outcome.INVALID, job_id=job,
                   message="consumers_split_m: 256 rows; smem_fits: 300000 B > 232448 B")
            record(db_factory, hopper_config(blk_k=128), outcome=Outcome.TIMEOUT, job_id=job,
                   message="no result after 60 s\nkilled")
    s = client.get(SUMMARY, params={"job_id": job}).json()
    assert s["job_id"] == job and s["invalid"] == 1 and s["truncated"] is False
    assert [(t["trial"], t["outcome"]) for t in s["trials"]] == [
        (1, "OK"), (2, "TIMEOUT"), (3, "OK"), (4, "OK"), (5, "OK")]
    best_so_far = [t["best_so_far_tflops"] for t in s["trials"]]
    assert best_so_far == pytest.approx([P.tflops(0.4), P.tflops(0.4), P.tflops(0.2), P.tflops(0.2),
                                         P.tflops(0.2)])
    assert s["cublas_tflops"] == pytest.approx((P.tflops(0.25) + P.tflops(0.2)) / 2)  # the trials' median
    # The best's own run: its TFLOP/s over its cuBLAS TFLOP/s is its ratio (what the cards show).
    best = s["best"]
    assert best["cublas_tflops"] == pytest.approx(P.tflops(0.25)) and best["tflops"] == pytest.approx(P.tflops(0.2))
    assert best["tflops"] / best["cublas_tflops"] == pytest.approx(best["ratio"])
    importance = {i["knob"]: i["eta_squared"] for i in s["importance"]}
    assert importance == pytest.approx({"blk_n": 1.0, "stages": 0.0})
    assert [(t["rank"], t["config"]["blk_n"], t["config"]["stages"]) for t in s["top"]] == [
        (1, 256, 3), (2, 256, 4), (3, 128, 3), (4, 128, 4)]
    assert s["top"][0]["ratio"] == pytest.approx(0.25 / 0.2) and s["top"][1]["ratio"] == pytest.approx(1.0)
    assert {(f["outcome"], f["reason"], f["count"]) for f in s["failures"]} == {
        ("INVALID", "consumers_split_m", 1), ("INVALID", "smem_fits", 1),
        ("TIMEOUT", "no result after 60 s", 1)}
    assert s["knobs"] == list(HOPPER_KNOBS.names)  # every knob, in the table order
    assert s["knobs"][:9] == ["blk_m", "blk_n", "blk_k", "stages", "consumers", "warp_specialized", "persistent",
                              "raster_group", "epilogue"]


def test_summary_keeps_the_fastest_of_each_config_and_all_jobs_without_job_id(
    client: TestClient, db_factory: Factory
) -> None:
    first, second = tune(client), tune(client, m=2048)
    record(db_factory, hopper_config(), time_ms=0.3, job_id=first)
    record(db_factory, hopper_config(), time_ms=0.25)
    record(db_factory, hopper_config(), time_ms=0.1, job_id=second, problem=Problem(2048, 4096, 4096))
    s = client.get(SUMMARY).json()
    assert len(s["trials"]) == 2 and len(s["top"]) == 1 and s["top"][0]["time_ms"] == 0.25
    assert s["importance"] == []  # fewer than 3 OK trials: no importance is claimed
    assert len(client.get(SUMMARY, params={"job_id": first}).json()["trials"]) == 1
    truncated = client.get(SUMMARY, params={"limit": 1}).json()
    assert truncated["truncated"] is True
    assert truncated["trials"][0]["tflops"] == pytest.approx(P.tflops(0.3))


def test_summary_refusals_use_the_error_schema(client: TestClient, db_factory: Factory) -> None:
    missing = client.get(SUMMARY)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert "no measurements of 4096x4096x4096 float16" in missing.json()["error"]["message"]
    assert client.get(SUMMARY, params={"job_id": 7}).json()["error"]["message"] == "job 7 not found"
    job = tune(client, m=2048)
    other = client.get(SUMMARY, params={"job_id": job}).json()["error"]
    assert other["message"] == f"job {job} tunes 2048x4096x4096 float16, not 4096x4096x4096 float16"
    empty = client.get("/studies/2048x4096x4096/float16/summary", params={"job_id": job})
    assert empty.status_code == 200 and empty.json()["trials"] == [] and empty.json()["top"] == []
    assert client.get("/studies/4096x4096/float16/summary").json()["error"]["code"] == "invalid_problem"
    assert client.get("/studies/4096x4096x4096/int8/summary").json()["error"]["code"] == "invalid_problem"
    assert client.get(SUMMARY, params={"limit": 0}).json()["error"]["code"] == "validation_error"


# --- the nearest shape ------------------------------------------------------------------------------


def test_nearest_is_log_space() -> None:
    p = Problem(4096, 4096, 4096)
    half, double = Problem(2048, 4096, 4096), Problem(8192, 4096, 4096)
    assert log_distance(p, half) == pytest.approx(log_distance(p, double))
    assert nearest(p, [double, half]) == half  # a tie goes to the smaller shape
    assert nearest(Problem(3000, 4096, 4096), [Problem(1024, 1024, 1024), double, half]) == half
    assert nearest(Problem(5000, 4096, 4096), [half, double]) == double
    assert nearest(p, []) is None
