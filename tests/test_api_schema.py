"""schemathesis against the published OpenAPI schema: every operation, generated inputs, 0 responses 5xx.

The app runs in-process (ASGI) on a real database of each backend, seeded with measurements and a
job so the study and best-config views answer 200 as well as 404/422. Examples are bounded so the
run stays well under two minutes on two cores.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error, status_code_conformance
from sqlalchemy.orm import Session, sessionmaker

from tirtune.api import create_app
from tirtune.core import Candidate, Outcome, Provenance, RunResult, Stack
from tirtune.core.problem import MAX_DIM, SHAPE_PATTERN
from tirtune.db import migrate, repo, transaction
from tirtune.settings import Settings
from tirtune.space import HOPPER, TEMPLATE_VERSION, Config, Problem, SpaceError
from tirtune.space.rules import K_MULTIPLE

H200 = Stack("NVIDIA H200", "570.1", "12.8", "0.27.0", "9.0")
EXAMPLES_PER_OPERATION = 25
EXPECTED = {"POST /tune", "GET /jobs", "GET /jobs/{job_id}", "GET /best", "GET /trials", "GET /healthz",
            "GET /studies", "GET /studies/{shape}/{dtype}/summary"}


def seed(factory: sessionmaker[Session]) -> None:
    problem = Problem(4096, 4096, 4096)
    with transaction(factory) as s:
        job = repo.create_job(s, problem, "sm_90a", 8)
        for i, config in enumerate([Config(), Config(stages=3), Config(blk_n=256)]):
            c = Candidate(config, problem, TEMPLATE_VERSION)
            result = RunResult(c, Outcome.OK, time_ms=0.2 + i / 100, cublas_ms=0.19, repetitions=10,
                               rel_error=1e-4, provenance=Provenance(H200, TEMPLATE_VERSION, torch="2.6"))
            repo.record_measurement(s, job_id=job.id, trial_number=i, key=f"k{i}", candidate=c,
                                    outcome=Outcome.OK, message="", result=result)


def test_no_operation_answers_5xx(
    db_url: str, db_factory: sessionmaker[Session], capsys: pytest.CaptureFixture[str]
) -> None:
    seed(db_factory)
    app: FastAPI = create_app(Settings(database_url=db_url), session_factory=db_factory, start_workers=False)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {f"{op.method.upper()} {op.path}" for op in operations} >= EXPECTED
    statuses: dict[str, Counter[int]] = {}
    for mode in GenerationMode:  # valid inputs by the schema, then invalid ones
        for operation in operations:
            name = f"{operation.method.upper()} {operation.path} ({mode.value})"
            try:
                _fuzz(operation.as_strategy(mode), statuses.setdefault(name, Counter()))
            except Unsatisfiable:  # nothing to make invalid: e.g. GET /healthz takes no input
                assert mode is GenerationMode.NEGATIVE and not statuses.pop(name)
    with capsys.disabled():  # the counts show in CI's log
        sys.stdout.write("\nschemathesis, responses by status:\n" + "\n".join(
            f"  {name}: {dict(sorted(c.items()))}" for name, c in statuses.items()) + "\n")
    assert not [name for name, c in statuses.items() if any(code >= 500 for code in c)]
    # The schema states the real rules (K a multiple of 8, the dimension cap), so the generated
    # bodies are mostly valid problems: the main path is fuzzed, not only its refusals.
    tune = statuses["POST /tune (positive)"]
    assert tune[200] + tune[202] >= EXAMPLES_PER_OPERATION // 2, tune


# Not schemathesis's pytest plugin (`from_fixture` + `parametrize`): on pytest 9 it fails looking
# up a private node attribute. The Python API below runs the same generated cases.
def _fuzz(cases: st.SearchStrategy[schemathesis.Case], statuses: Counter[int]) -> None:
    @given(case=cases)
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def no_5xx(case: schemathesis.Case) -> None:
        response = case.call_and_validate(checks=[not_a_server_error, status_code_conformance])
        statuses[response.status_code] += 1

    no_5xx()


def test_the_schema_states_the_real_rules() -> None:
    spec = create_app(Settings(database_url="sqlite://"), start_workers=False).openapi()
    body = spec["components"]["schemas"]["TuneRequest"]["properties"]
    assert body["k"]["multipleOf"] == K_MULTIPLE == 8
    assert body["m"]["maximum"] == body["n"]["maximum"] == body["k"]["maximum"] == MAX_DIM
    tune = spec["paths"]["/tune"]["post"]["responses"]
    for status in ("400", "401", "413", "422", "503"):
        assert tune[status]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorOut"}
    trials = {p["name"]: p for p in spec["paths"]["/trials"]["get"]["parameters"]}
    assert "only together with `shape`" in trials["dtype"]["description"]
    for path, where in (("/best", "query"), ("/trials", "query"), ("/studies/{shape}/{dtype}/summary", "path")):
        params = {p["name"]: p for p in spec["paths"][path]["get"]["parameters"] if p["in"] == where}
        assert params["shape"]["schema"]["pattern"] == SHAPE_PATTERN
        assert set(params["dtype"]["schema"]["enum"]) == {"float16", "bfloat16", "fp16", "bf16", "half", "f16"}


@pytest.mark.parametrize("k", [8, 16, 4096, MAX_DIM])
def test_what_the_schema_allows_the_template_takes(k: int) -> None:
    # multipleOf and maximum are the space's own rules, not a guess at them.
    HOPPER.check_problem(Problem(MAX_DIM, 1, k))
    for off in range(1, K_MULTIPLE):
        with pytest.raises(SpaceError):
            HOPPER.check_problem(Problem(1, 1, k - off))


def test_integral_numbers_are_integers_as_the_schema_says(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    url = f"sqlite:///{tmp_path / 'int.db'}"
    migrate.upgrade(url)
    with TestClient(create_app(Settings(database_url=url), start_workers=False)) as client:
        body = {"m": 64.0, "n": 64, "k": 64.0, "max_trials": 2.0}
        assert client.post("/tune", json=body).json()["problem"] == {"m": 64, "n": 64, "k": 64, "dtype": "float16"}
        for bad in ({**body, "m": 64.5}, {**body, "m": "64"}, {**body, "m": True}):
            assert client.post("/tune", json=bad).status_code == 422
