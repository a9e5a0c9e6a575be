"""A problem's fused epilogue through the HTTP API, on SQLite and PostgreSQL: POST /tune takes it,
GET /best, /trials, /jobs and the dashboard's views key by it, and a fused problem is never
answered with the plain GEMM's figures (nor predicted from them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tirtune.api import create_app
from tirtune.core import Candidate, Outcome, Provenance, RunResult, Stack
from tirtune.db import repo, transaction
from tirtune.settings import Settings
from tirtune.space import TEMPLATE_VERSION, Problem
from tirtune.space.hopper.knobs import config as hopper_config

Factory = sessionmaker[Session]
H200 = Stack("NVIDIA H200", "570.1", "12.8", "0.27.0", "9.0")
PLAIN = Problem(4096, 4096, 4096)
FUSED = Problem.parse("4096x4096x4096", "float16", "bias+residual")
BODY = {"m": 4096, "n": 4096, "k": 4096}


@pytest.fixture
def client(db_url: str, db_factory: Factory) -> Iterator[TestClient]:
    app = create_app(Settings(database_url=db_url), session_factory=db_factory, start_workers=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def measure(factory: Factory, problem: Problem, time_ms: float, blk_n: int = 128) -> int:
    c = Candidate(hopper_config(blk_n=blk_n), problem, TEMPLATE_VERSION)
    result = RunResult(c, Outcome.OK, time_ms=time_ms, cublas_ms=1.0, repetitions=50, rel_error=1e-3,
                       provenance=Provenance(H200, TEMPLATE_VERSION, torch="2.6", sm_clock_mhz=1980.0))
    with transaction(factory) as s:
        return repo.record_measurement(
            s, job_id=None, trial_number=0, key=f"{problem}-{time_ms}", candidate=c, outcome=Outcome.OK,
            message="", result=result,
        ).id


def refused(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    return str(error["message"])


def test_tune_keys_the_job_by_its_epilogue(client: TestClient) -> None:
    fused = client.post("/tune", json={**BODY, "epilogue": "Residual+BIAS"})
    assert fused.status_code == 202, fused.text
    job = fused.json()
    assert job["problem"] == {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16", "epilogue": "bias+residual", "scaling": "none"}
    plain = client.post("/tune", json=BODY)  # the same shape, plain: a job of its own
    assert plain.status_code == 202 and plain.json()["id"] != job["id"]
    assert plain.json()["problem"]["epilogue"] == "none"
    again = client.post("/tune", json={**BODY, "epilogue": "bias+residual"})
    assert again.status_code == 200 and again.json()["id"] == job["id"]  # the active fused job
    assert client.get(f"/jobs/{job['id']}").json()["problem"]["epilogue"] == "bias+residual"
    assert {j["problem"]["epilogue"] for j in client.get("/jobs").json()["items"]} == {"none", "bias+residual"}


@pytest.mark.parametrize("epilogue,reason", [
    ("bias+gelu", "unknown epilogue op 'gelu'"),
    ("bias+bias", "epilogue op 'bias' given more than once"),
    ("none+bias", "'none' stands alone"),
    ("", "bad epilogue ''"),
    (7, "Input should be a valid string"),
    ("x" * 201, "bad epilogue (201 characters)"),  # never echoed
])
def test_tune_refuses_a_bad_epilogue_with_the_reason(client: TestClient, epilogue: Any, reason: str) -> None:
    message = refused(client.post("/tune", json={**BODY, "epilogue": epilogue}), 422, "validation_error")
    assert reason in message and "epilogue" in message
    assert client.get("/jobs").json()["total"] == 0


def test_tune_refuses_a_fused_problem_on_blackwell_before_queueing(client: TestClient) -> None:
    message = refused(client.post("/tune", json={**BODY, "epilogue": "bias", "arch": "sm_100a"}), 422,
                      "invalid_problem")
    assert "fused_epilogue_supported" in message and "epilogue=bias" in message, message
    assert client.get("/jobs").json()["total"] == 0  # refused, not a job that fails
    assert client.post("/tune", json={**BODY, "arch": "sm_100a"}).status_code == 202  # a plain GEMM is taken


def test_best_serves_each_problem_its_own_figures(client: TestClient, db_factory: Factory) -> None:
    measure(db_factory, PLAIN, 0.5, blk_n=256)  # ratio 2.0
    measure(db_factory, FUSED, 2.0)  # ratio 0.5
    plain = client.get("/best", params={"shape": "4096x4096x4096"}).json()
    assert plain["epilogue"] == "none" and plain["ratio"] == pytest.approx(2.0)
    fused = client.get("/best", params={"shape": "4096x4096x4096", "epilogue": "residual+bias"})
    assert fused.status_code == 200, fused.text
    assert fused.json()["epilogue"] == fused.json()["problem"]["epilogue"] == "bias+residual"
    assert fused.json()["ratio"] == pytest.approx(0.5) and fused.json()["config"]["blk_n"] == 128
    # Encoded by a client (httpx writes '+' as %2B), the same answer.
    assert client.get("/best?shape=4096x4096x4096&epilogue=bias%2Bresidual").json()["ratio"] == pytest.approx(0.5)


def test_a_fused_problem_nobody_measured_is_404_with_why_not_the_plain_gemms_figures(
    client: TestClient, db_factory: Factory
) -> None:
    measure(db_factory, PLAIN, 0.5)
    for params in ({}, {"predict": "false"}, {"fallback": "nearest"}):
        message = refused(client.get("/best", params={"shape": "4096x4096x4096", "epilogue": "bias", **params}),
                          404, "not_found")
        assert message.startswith("nothing tuned for 4096x4096x4096 float16 epilogue=bias yet"), message
    # The cost model is asked for nothing it cannot account for: it says so rather than predict.
    message = refused(client.get("/best", params={"shape": "512x6144x4096", "epilogue": "bias"}), 404, "not_found")
    assert "no prediction: the cost model does not see a fused epilogue (bias)" in message, message
    # The same unmeasured shape, plain, is predicted (labelled so).
    assert client.get("/best", params={"shape": "512x6144x4096"}).json()["kind"] == "predicted"


def test_nearest_shape_fallback_stays_within_the_epilogue(client: TestClient, db_factory: Factory) -> None:
    measure(db_factory, PLAIN, 0.5)
    measure(db_factory, Problem.parse("2048x4096x4096", "float16", "bias+residual"), 2.0)
    near = client.get("/best", params={"shape": "4096x4096x2048", "epilogue": "bias+residual",
                                       "fallback": "nearest"}).json()
    assert near["fallback"]["served"] == "2048x4096x4096" and near["epilogue"] == "bias+residual"
    plain = client.get("/best", params={"shape": "4096x4096x2048", "fallback": "nearest"}).json()
    assert plain["fallback"]["served"] == "4096x4096x4096" and plain["epilogue"] == "none"


@pytest.mark.parametrize("query,reason", [
    ("epilogue=gelu", "unknown epilogue op 'gelu'"),
    ("epilogue=bias+residual", "write '+' as %2B"),  # an unencoded '+' arrives as a space
    ("epilogue=bias%2Bbias", "given more than once"),
])
def test_best_refuses_a_bad_epilogue_with_the_reason(client: TestClient, query: str, reason: str) -> None:
    assert reason in refused(client.get(f"/best?shape=64x64x64&{query}"), 422, "invalid_problem")


def test_trials_and_studies_key_by_the_epilogue(client: TestClient, db_factory: Factory) -> None:
    plain, fused = measure(db_factory, PLAIN, 0.5), measure(db_factory, FUSED, 2.0)
    every = client.get("/trials").json()["items"]
    assert {(t["id"], t["epilogue"]) for t in every} == {(plain, "none"), (fused, "bias+residual")}
    one = client.get("/trials", params={"shape": "4096x4096x4096", "epilogue": "bias+residual"}).json()
    assert [t["id"] for t in one["items"]] == [fused] and one["total"] == 1
    assert [t["id"] for t in client.get("/trials", params={"shape": "4096x4096x4096"}).json()["items"]] == [plain]
    assert [t["id"] for t in client.get("/trials", params={"epilogue": "residual+bias"}).json()["items"]] == [fused]
    refused(client.get("/trials", params={"epilogue": "gelu"}), 422, "invalid_problem")
    studies = client.get("/studies").json()
    assert studies["total"] == 2
    assert {(s["shape"], s["epilogue"]) for s in studies["items"]} == {
        ("4096x4096x4096", "none"), ("4096x4096x4096", "bias+residual")}
    summary = client.get("/studies/4096x4096x4096/float16/summary", params={"epilogue": "bias+residual"}).json()
    assert summary["epilogue"] == "bias+residual" and [t["measurement_id"] for t in summary["trials"]] == [fused]
    assert summary["best"]["epilogue"] == "bias+residual"
    refused(client.get("/studies/4096x4096x4096/float16/summary", params={"epilogue": "bias"}), 404, "not_found")


def test_the_schema_documents_the_epilogue(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    body = spec["components"]["schemas"]["TuneRequest"]
    assert body["properties"]["epilogue"]["default"] == "none"
    assert {"none", "bias", "bias+residual", "scale_row+scale_col+bias+residual"} <= set(
        body["properties"]["epilogue"]["enum"])
    # "none", every combination of the six ops applied to the sum, the block scales with bias and
    # residual at most (4), each of those with out_float16 too, and swiglu alone.
    enum = body["properties"]["epilogue"]["enum"]
    assert len(enum) == 2 * (2**6 + 4) + 1 and "swiglu" in enum and "scale_a_block+scale_b_block+bias+residual" in enum
    assert "out_float16" in enum and "scale_a_block+scale_b_block+bias+out_float16" in enum
    # An fp16 D is FP8's.
    out16 = next(r["then"] for r in body["allOf"] if "out_float16" in r["if"]["properties"].get("epilogue", {}).get("enum", []))
    assert out16 == {"properties": {"dtype": {"const": "float8_e4m3fn"}}, "required": ["dtype"]}
    # The block scales: FP8 only, beside no other scale; swiglu takes no scaling.
    block = next(r["then"] for r in body["allOf"] if r["if"]["properties"].get("scaling") == {"const": "block"})
    assert block["properties"]["dtype"] == {"const": "float8_e4m3fn"} and block["required"] == ["dtype"]
    partners = {"none", "bias", "residual", "bias+residual", "out_float16", "bias+out_float16",
                "residual+out_float16", "bias+residual+out_float16"}
    assert set(block["properties"]["epilogue"]["enum"]) == {*partners, *(t for t in enum if "block" in t)}
    assert {"if": {"properties": {"epilogue": {"const": "swiglu"}}, "required": ["epilogue"]},
            "then": {"properties": {"n": {"multipleOf": 8}}}} in body["allOf"]
    # Blackwell writes A @ B.T alone: no epilogue, no scaling (its ops), no FP8 operands.
    assert {"if": {"properties": {"arch": {"const": "sm_100a"}}, "required": ["arch"]},
            "then": {"properties": {"epilogue": {"const": "none"}, "scaling": {"const": "none"},
                                    "dtype": {"not": {"const": "float8_e4m3fn"}}}}} in body["allOf"]
    for path in ("/best", "/trials", "/studies/{shape}/{dtype}/summary"):
        params = {p["name"]: p for p in spec["paths"][path]["get"]["parameters"]}
        assert "%2B" in params["epilogue"]["description"] and "bias+residual" in params["epilogue"]["schema"]["enum"]
    assert "epilogue" in spec["components"]["schemas"]["ProblemOut"]["required"]
    assert "epilogue" in spec["components"]["schemas"]["MeasurementOut"]["properties"]


def test_tune_and_best_take_swiglu(client: TestClient, db_factory: Factory) -> None:
    """epilogue "swiglu" is a problem of its own (B the packed 2N x K weight, D N wide): POST /tune
    keys its job by it, GET /best answers it with its own figures (TFLOP/s of the 2N-wide GEMM), and
    an N off 8 or swiglu with another op is refused with the reason."""
    body = {"m": 16, "n": 14336, "k": 4096, "dtype": "bf16"}
    job = client.post("/tune", json={**body, "epilogue": "SwiGLU"})
    assert job.status_code == 202, job.text
    assert job.json()["problem"] == {"m": 16, "n": 14336, "k": 4096, "dtype": "bfloat16", "epilogue": "swiglu", "scaling": "none"}
    gated = Problem.parse("16x14336x4096", "bf16", "swiglu")
    measure(db_factory, gated, 0.5)
    best = client.get("/best", params={"shape": "16x14336x4096", "dtype": "bf16", "epilogue": "swiglu"})
    assert best.status_code == 200, best.text
    assert best.json()["epilogue"] == best.json()["problem"]["epilogue"] == "swiglu"
    assert best.json()["ratio"] == pytest.approx(2.0)
    assert gated.tflops(0.5) == pytest.approx(2 * 16 * 28672 * 4096 / 5e8)  # the 2N-wide GEMM's flops
    plain = client.get("/best", params={"shape": "16x14336x4096", "dtype": "bf16", "predict": "false"})
    assert plain.status_code == 404  # never the swiglu problem's figures
    message = refused(client.post("/tune", json={**body, "n": 100, "epilogue": "swiglu"}), 422, "invalid_problem")
    assert "swiglu_n_aligned: N=100: epilogue swiglu needs N a multiple of 8" in message
    unaligned = client.get("/best", params={"shape": "16x100x4096", "epilogue": "swiglu"})  # named, never tuned
    assert "POST /tune would refuse it" in refused(unaligned, 404, "not_found")
    message = refused(client.post("/tune", json={**body, "epilogue": "swiglu+bias"}), 422, "validation_error")
    assert "swiglu stands alone" in message
