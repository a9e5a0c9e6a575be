"""GET /kernels/{key}: the module of a GPU-verified measurement, its digest and provenance; every
refusal (unknown, replayed, failed, not built here, tampered) a 404 or 409 with a reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tirtune.api import create_app
from tirtune.core import Candidate, Config, Outcome, Problem, Provenance, RunResult, Source, Stack
from tirtune.core.artifacts import BUILD_MARK, DIGEST_FIELD, KINDS, ArtifactKind, entry_name, kind_named, sha256_hex
from tirtune.db import repo, transaction
from tirtune.settings import Settings
from tirtune.space.branches import BRANCHES, DEFAULT_ARCH
from tirtune.space.hopper import TEMPLATE_VERSION
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.space.hopper.knobs import config as hopper_config

Factory = sessionmaker[Session]
H200 = Stack("NVIDIA H200", "570.1", "12.8", "0.27.0", "9.0")
P = Problem(128, 256, 64)
MODULE = b"\x7fELF not really a kernel, but bytes to serve"


def record(factory: Factory, config: Config, *, outcome: Outcome = Outcome.OK, source: Source = Source.GPU,
           problem: Problem = P) -> str:
    c = Candidate(config, problem, TEMPLATE_VERSION)
    key = c.measurement_key(H200)
    prov = Provenance(H200, TEMPLATE_VERSION, torch="2.13", source=source,
                      recording="rec.jsonl#abc" if source is Source.REPLAY else None)
    ok = outcome is Outcome.OK
    result = RunResult(c, outcome, message="" if ok else "relative error 5e-1 > tolerance",
                       time_ms=0.01 if ok else None, cublas_ms=0.012 if ok else None, repetitions=50,
                       rel_error=2e-4, provenance=prov)
    with transaction(factory) as s:
        repo.record_measurement(s, job_id=None, trial_number=None, key=key, candidate=c, outcome=outcome,
                                message=result.message, result=result, source=source)
    return key


def cache_entry(cache: Path, config: Config, module: bytes = MODULE, digest: str | None = None,
                problem: Problem = P, kind: ArtifactKind = KINDS[0]) -> Path:
    template = BRANCHES[DEFAULT_ARCH].template
    entry = cache / (entry_name(Candidate(config, problem, TEMPLATE_VERSION), template, template) + kind.suffix)
    entry.mkdir(parents=True)
    (entry / kind.artifact).write_bytes(module)
    (entry / BUILD_MARK).write_text(json.dumps({DIGEST_FIELD: digest or sha256_hex(module)}))
    return entry


@pytest.fixture
def client(db_url: str, db_factory: Factory, tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(Settings(database_url=db_url, cache_dir=tmp_path / "cache"), session_factory=db_factory,
                     start_workers=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def refused(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    return str(error["message"])


def test_serves_the_module_of_a_verified_measurement_with_digest_and_provenance(
        client: TestClient, db_factory: Factory, tmp_path: Path) -> None:
    key = record(db_factory, hopper_config())
    cache_entry(tmp_path / "cache", hopper_config())
    r = client.get(f"/kernels/{key}")
    assert r.status_code == 200 and r.content == MODULE
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["x-tirtune-sha256"] == sha256_hex(MODULE)
    assert r.headers["x-tirtune-gpu"] == "NVIDIA H200" and r.headers["x-tirtune-source"] == "gpu"
    assert r.headers["x-tirtune-template-version"] == TEMPLATE_VERSION
    assert Config.from_json(json.loads(r.headers["x-tirtune-config"]), HOPPER_KNOBS) == hopper_config()
    assert r.headers["x-tirtune-problem"] == "128x256x64 float16"
    assert r.headers["x-tirtune-artifact"] == "so" and r.headers["content-disposition"].endswith('.so"')
    # GET /best names the key the module is served under
    best = client.get("/best", params={"shape": P.shape}).json()
    assert best["key"] == key


def test_refusals_say_why(client: TestClient, db_factory: Factory, tmp_path: Path) -> None:
    assert "no current measurement" in refused(client.get("/kernels/" + "0" * 32), 404, "not_found")
    replayed = record(db_factory, hopper_config(stages=3), source=Source.REPLAY)
    cache_entry(tmp_path / "cache", hopper_config(stages=3))
    assert "replayed" in refused(client.get(f"/kernels/{replayed}"), 409, "not_verified")
    wrong = record(db_factory, hopper_config(stages=5), outcome=Outcome.WRONG_RESULT)
    cache_entry(tmp_path / "cache", hopper_config(stages=5))
    assert "WRONG_RESULT" in refused(client.get(f"/kernels/{wrong}"), 409, "not_verified")
    elsewhere = record(db_factory, hopper_config(stages=6))
    assert "build cache" in refused(client.get(f"/kernels/{elsewhere}"), 404, "not_built_here")
    tampered = record(db_factory, hopper_config(stages=2))
    cache_entry(tmp_path / "cache", hopper_config(stages=2), digest=sha256_hex(b"what was built"))
    assert "digest" in refused(client.get(f"/kernels/{tampered}"), 409, "digest_mismatch")
    refused(client.get("/kernels/not-a-key"), 422, "validation_error")


def test_openapi_documents_the_route(client: TestClient) -> None:
    op = client.get("/openapi.json").json()["paths"]["/kernels/{key}"]["get"]
    assert set(op["responses"]) >= {"200", "404", "409", "422"}
    assert "application/octet-stream" in op["responses"]["200"]["content"]
    assert "X-Tirtune-Sha256" in op["responses"]["200"]["headers"]


def test_a_kernel_built_on_the_cubin_path_is_served_as_its_bundle(client: TestClient, db_factory: Factory,
                                                                  tmp_path: Path) -> None:
    """TIRTUNE_BUILD_PATH=cubin leaves a `-cubin` entry with `kernel.tlaunch`: served, checked and
    labelled as such, so a client stores and loads it as a bundle."""
    key = record(db_factory, hopper_config(stages=7))
    bundle = b'{"spec": "a launch spec", "cubin": "base64"}'
    cache_entry(tmp_path / "cache", hopper_config(stages=7), module=bundle, kind=kind_named("cubin"))
    r = client.get(f"/kernels/{key}")
    assert r.status_code == 200 and r.content == bundle
    assert r.headers["x-tirtune-artifact"] == "cubin" and r.headers["content-disposition"].endswith('.tlaunch"')
    assert r.headers["x-tirtune-build-key"].endswith("-cubin")
    tampered = record(db_factory, hopper_config(stages=8))
    cache_entry(tmp_path / "cache", hopper_config(stages=8), module=bundle, digest=sha256_hex(b"other"),
                kind=kind_named("cubin"))
    assert "digest" in refused(client.get(f"/kernels/{tampered}"), 409, "digest_mismatch")
