"""Optuna's own dashboard opens a tirtune database and shows its studies.

tirtune's Optuna studies live in the same database as its tables (unprefixed Optuna tables next to
tirtune_*), so `optuna-dashboard <DATABASE_URL>` works as is. Checked on a copy of the real H200
study (bench/data), through optuna-dashboard's WSGI app and JSON API, as its web page would.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest

optuna_dashboard = pytest.importorskip("optuna_dashboard", reason="pip install -e '.[dashboard]'")

STUDY_DB = Path(__file__).resolve().parents[1] / "bench" / "data" / "h200-tune-4096x4096x4096-float16.sqlite"
STUDY = "tirtune-1-4096x4096x4096-float16-sm_90a-73187c68"


def call(app: Any, path: str, query: str = "") -> tuple[str, Any]:
    environ: dict[str, Any] = {}
    setup_testing_defaults(environ)
    environ.update(PATH_INFO=path, QUERY_STRING=query, REQUEST_METHOD="GET")
    status: list[str] = []
    body = b"".join(app(environ, lambda s, _headers, _exc=None: status.append(s)))
    return status[0], body


def test_optuna_dashboard_lists_and_shows_tirtunes_study(tmp_path: Path) -> None:
    copy = tmp_path / "study.sqlite"
    shutil.copy(STUDY_DB, copy)  # never the committed file
    app = optuna_dashboard.wsgi(f"sqlite:///{copy}")

    status, body = call(app, "/api/studies")
    assert status == "200 OK"
    studies = json.loads(body)["study_summaries"]
    assert [(s["study_name"], s["directions"]) for s in studies] == [(STUDY, ["maximize"])]

    status, body = call(app, f"/api/studies/{studies[0]['study_id']}", "after=0")
    study = json.loads(body)
    assert status == "200 OK" and study["name"] == STUDY
    best = max(t["values"][0] for t in study["trials"] if t["state"] == "Complete" and t["values"])
    assert best == pytest.approx(633.2, abs=0.1)  # TFLOP/s of the best H200 config, as tirtune recorded
    assert {p["name"] for p in study["trials"][0]["params"]} == {
        "blk_m", "blk_n", "blk_k", "stages", "consumers", "warp_specialized"}
    assert call(app, "/dashboard")[0] == "200 OK"
