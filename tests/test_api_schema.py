"""schemathesis against the published OpenAPI schema: every operation, generated inputs, 0 responses 5xx.

The app runs in-process (ASGI) on a real database of each backend, seeded with measurements and a
job so the study and best-config views answer 200 as well as 404/422. Examples are bounded so the
run stays well under two minutes on two cores.
"""

from __future__ import annotations

import re
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
from schemathesis.checks import not_a_server_error, positive_data_acceptance, status_code_conformance
from schemathesis.engine import events, from_schema
from sqlalchemy.orm import Session, sessionmaker

from tirtune.api import create_app
from tirtune.core import Candidate, Outcome, Provenance, RunResult, Stack
from tirtune.core.problem import MAX_DIM, SHAPE_PATTERN
from tirtune.db import migrate, repo, transaction
from tirtune.settings import Settings
from tirtune.space import HOPPER, TEMPLATE_VERSION, Problem, SpaceError
from tirtune.space.hopper.knobs import config as hopper_config
from tirtune.space.hopper.rules import K_MULTIPLE

H200 = Stack("NVIDIA H200", "570.1", "12.8", "0.27.0", "9.0")
EXAMPLES_PER_OPERATION = 25
EXPECTED = {"POST /tune", "GET /jobs", "GET /jobs/{job_id}", "GET /best", "GET /trials", "GET /healthz",
            "GET /studies", "GET /studies/{shape}/{dtype}/summary"}


def seed(factory: sessionmaker[Session]) -> None:
    problem = Problem(4096, 4096, 4096)
    with transaction(factory) as s:
        job = repo.create_job(s, problem, "sm_90a", 8)
        for i, config in enumerate([hopper_config(), hopper_config(stages=3), hopper_config(blk_n=256)]):
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
        # positive_data_acceptance: a request the schema allows is not refused (4xx other than 401,
        # 403, 404, 409, 429); it looks only at cases generated as valid.
        response = case.call_and_validate(checks=[not_a_server_error, status_code_conformance,
                                                  positive_data_acceptance])
        statuses[response.status_code] += 1

    no_5xx()


def test_every_request_the_schema_allows_is_accepted(db_url: str, db_factory: sessionmaker[Session]) -> None:
    """schemathesis's coverage phase (the schema's boundary values, e.g. the smallest string a
    pattern allows, each optional parameter alone: deterministic, unlike the fuzzing above) with
    its positive-data check: a request the schema allows must not be refused 400/422. Such a
    refusal means the schema states a looser rule than the server applies (a shape pattern that
    allows a 0 dimension, a parameter allowed alone that the server refuses alone)."""
    seed(db_factory)
    app = create_app(Settings(database_url=db_url), session_factory=db_factory, start_workers=False)
    config = schemathesis.Config.from_dict({
        "workers": 1,
        "phases": {"examples": {"enabled": False}, "fuzzing": {"enabled": False}, "stateful": {"enabled": False}},
        "checks": {"enabled": False, "positive_data_acceptance": {"enabled": True},
                   "not_a_server_error": {"enabled": True}},
    })
    checked: Counter[str] = Counter()
    refused: list[str] = []
    for event in from_schema(schemathesis.openapi.from_asgi("/openapi.json", app, config=config)).execute():
        assert not isinstance(event, events.NonFatalError | events.FatalError), event
        if isinstance(event, events.ScenarioFinished):
            for case_id, checks in event.recorder.checks.items():
                case = event.recorder.cases[case_id].value
                checked[case.operation.label] += len(checks)
                refused += [f"{check.name}: {case.operation.label} path={case.path_parameters} query={case.query}"
                            for check in checks if check.failure_info is not None]
    assert set(checked) >= EXPECTED and min(checked.values()) > 0, checked
    assert not refused, "\n".join(refused[:20])


def test_the_published_shape_pattern_is_what_the_domain_parses() -> None:
    shape = re.compile(SHAPE_PATTERN)
    assert [v for v in range(MAX_DIM + 20) if (shape.match(f"1x{v}x1") is None) == (1 <= v <= MAX_DIM)] == []
    assert shape.match(f"000{MAX_DIM} X 1x1") and not shape.match(f"000{MAX_DIM + 1}x1x1")
    _pattern_agrees_with_parse()


@given(shape=st.lists(st.sampled_from(["0", "1", "8", "4096", str(MAX_DIM), str(MAX_DIM + 1), "00", "x", "X", " ",
                                       "\t", "\n", "*", "-1", "\uff14"]), min_size=1, max_size=9).map("".join))
@settings(max_examples=400, deadline=None, database=None)
def _pattern_agrees_with_parse(shape: str) -> None:
    try:
        Problem.parse(shape)
        parsed = True
    except SpaceError:
        parsed = False
    # JSON Schema patterns are ECMA-262 regular expressions, searched: `$` is the end of the input.
    assert (re.search(SHAPE_PATTERN, shape) is not None and not shape.endswith("\n")) == parsed, shape


def test_the_schema_states_the_real_rules() -> None:
    spec = create_app(Settings(database_url="sqlite://"), start_workers=False).openapi()
    body = spec["components"]["schemas"]["TuneRequest"]["properties"]
    assert body["k"]["multipleOf"] == K_MULTIPLE == 8
    assert body["m"]["maximum"] == body["n"]["maximum"] == body["k"]["maximum"] == MAX_DIM
    tune = spec["paths"]["/tune"]["post"]["responses"]
    for status in ("400", "401", "413", "422", "503"):
        assert tune[status]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorOut"}
    trials = {p["name"]: p for p in spec["paths"]["/trials"]["get"]["parameters"]}
    assert "alone to every problem of this dtype" in trials["dtype"]["description"]
    for path, where in (("/best", "query"), ("/trials", "query"), ("/studies/{shape}/{dtype}/summary", "path")):
        params = {p["name"]: p for p in spec["paths"][path]["get"]["parameters"] if p["in"] == where}
        assert params["shape"]["schema"]["pattern"] == SHAPE_PATTERN
        assert set(params["dtype"]["schema"]["enum"]) == {
            "float16", "bfloat16", "float8_e4m3fn", "fp16", "bf16", "half", "f16", "fp8", "e4m3"
        }


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
        assert client.post("/tune", json=body).json()["problem"] == {"m": 64, "n": 64, "k": 64, "dtype": "float16",
                                                                 "epilogue": "none", "scaling": "none"}
        for bad in ({**body, "m": 64.5}, {**body, "m": "64"}, {**body, "m": True}):
            assert client.post("/tune", json=bad).status_code == 422
