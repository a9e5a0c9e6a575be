"""The product says what the Blackwell branch is: compile-checked, not yet run on a B200. GET /best and
`tirtune best` rank a Blackwell-branch result only if it was measured on a Blackwell GPU (10.0)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tirtune.api import create_app
from tirtune.cli import main
from tirtune.core import Candidate, Outcome, Provenance, RunResult, Stack
from tirtune.db import repo, transaction
from tirtune.db.session import open_database
from tirtune.settings import Settings, get_settings
from tirtune.space import TEMPLATE_VERSION as HOPPER_VERSION
from tirtune.space import Config, Problem
from tirtune.space.blackwell import JOURNEY, STATUS
from tirtune.space.blackwell import TEMPLATE_VERSION as BLACKWELL_VERSION
from tirtune.space.hopper.knobs import config as hopper_config

Factory = sessionmaker[Session]
P = Problem(4096, 4096, 4096)
H200 = Stack("NVIDIA H200", "570.1", "12.8", "0.27.0", "9.0")
B200 = Stack("NVIDIA B200", "570.1", "12.8", "0.27.0", "10.0")
REPLAY = Stack("NVIDIA B200", "570.1", "12.8", "0.27.0", "")  # a recording that names a B200 but no capability
V9 = JOURNEY["v9"].config


def record(factory: Factory, time_ms: float, config: Config, version: str, stack: Stack) -> int:
    c = Candidate(config, P, version)
    result = RunResult(
        c,
        Outcome.OK,
        time_ms=time_ms,
        cublas_ms=1.0,
        repetitions=50,
        rel_error=1e-4,
        provenance=Provenance(stack, version, torch="2.6"),
    )
    with transaction(factory) as s:
        return repo.record_measurement(
            s,
            job_id=None,
            trial_number=0,
            key=f"{version}-{stack.gpu_name}-{time_ms}",
            candidate=c,
            outcome=Outcome.OK,
            message="",
            result=result,
        ).id


@pytest.fixture
def client(db_url: str, db_factory: Factory) -> Iterator[TestClient]:
    app = create_app(Settings(database_url=db_url), session_factory=db_factory, start_workers=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_blackwell_figures_from_no_blackwell_run_are_never_ranked(client: TestClient, db_factory: Factory) -> None:
    record(db_factory, 2.0, hopper_config(), HOPPER_VERSION, H200)
    record(db_factory, 0.1, V9, BLACKWELL_VERSION, H200)  # impossible: sm_100a code does not run on an H200
    record(db_factory, 0.2, V9, BLACKWELL_VERSION, REPLAY)
    best = client.get("/best", params={"shape": P.shape})
    assert best.status_code == 200, best.text
    out = best.json()
    assert out["time_ms"] == 2.0 and out["branch"] == "sm_90a"
    assert out["provenance"]["template_version"] == HOPPER_VERSION
    on_b200 = client.get("/best", params={"shape": P.shape, "gpu": "NVIDIA B200"})
    assert on_b200.status_code == 404
    assert f"sm_100a branch is {STATUS}" in on_b200.json()["error"]["message"]
    nearest = client.get("/best", params={"shape": "4096x4096x4000", "gpu": "NVIDIA B200", "fallback": "nearest"})
    assert nearest.status_code == 404  # the fallback's candidate shapes obey the same rule


def test_a_result_measured_on_a_b200_is_served_and_labelled(client: TestClient, db_factory: Factory) -> None:
    record(db_factory, 0.5, V9, BLACKWELL_VERSION, B200)
    out = client.get("/best", params={"shape": P.shape, "gpu": "NVIDIA B200"}).json()
    assert out["time_ms"] == 0.5 and out["config"] == V9.to_json()
    assert (out["branch"], out["branch_status"]) == ("sm_100a", "compile-checked, not yet run on a B200")
    spec = client.get("/openapi.json").json()["components"]["schemas"]["BestOut"]["properties"]
    assert "compile-checked" in spec["branch_status"]["description"]


def test_hopper_answers_name_their_branch(client: TestClient, db_factory: Factory) -> None:
    record(db_factory, 1.0, hopper_config(), HOPPER_VERSION, H200)
    out = client.get("/best", params={"shape": P.shape, "gpu": "NVIDIA H200"}).json()
    assert out["branch"] == "sm_90a" and "H200" in out["branch_status"]
    # Nothing measured on an H100: the prediction of a model that learned from the H200's shipped
    # measurements, which says so; the Blackwell note is for Blackwell GPUs only.
    out = client.get("/best", params={"shape": P.shape, "gpu": "NVIDIA H100"}).json()
    assert (out["kind"], out["branch"], out["model"]["prior_gpu"]) == ("predicted", "sm_90a", "NVIDIA H200"), out
    assert "measured on NVIDIA H200: none are shipped for NVIDIA H100" in out["note"] and "sm_100a" not in out["note"]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.setenv("TIRTUNE_CACHE_DIR", str(tmp_path / "cache"))
    get_settings.cache_clear()
    assert main(["db", "upgrade"]) == 0
    yield tmp_path
    get_settings.cache_clear()


def test_cli_says_what_the_blackwell_branch_is(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["branches"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("sm_100a") and line.endswith("compile-checked, not yet run on a B200") for line in lines)
    factory = open_database(get_settings().database_url)
    record(factory, 0.3, V9, BLACKWELL_VERSION, REPLAY)
    assert main(["best", P.shape, "--gpu", "NVIDIA B200"]) == 1
    out = capsys.readouterr().out
    assert "nothing tuned" in out and "compile-checked, not yet run on a B200" in out
    record(factory, 0.4, V9, BLACKWELL_VERSION, B200)
    assert main(["best", P.shape, "--gpu", "NVIDIA B200"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert (best["branch"], best["branch_status"], best["ratio"]) == ("sm_100a", STATUS, 2.5)


def test_cli_best_says_what_the_blackwell_branch_is_when_nothing_is_tuned(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tirtune best` words the refusal as GET /best does (tirtune.api.best.NotTuned), branch from the registry."""
    assert main(["best", P.shape, "--gpu", "NVIDIA B200"]) == 1
    out = capsys.readouterr().out
    assert f"the Blackwell sm_100a branch is {STATUS}" in out and "tirtune tune" in out
    assert main(["best", P.shape, "--gpu", "NVIDIA H200"]) == 1
    assert "sm_100a" not in capsys.readouterr().out  # the note is for a branch only compile-checked
