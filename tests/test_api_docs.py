"""/docs is served from the package: the page names no other host and every asset it loads is here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tirtune.api import create_app
from tirtune.api.dashboard import STATIC
from tirtune.db import migrate
from tirtune.settings import Settings


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path / 'docs.db'}"
    migrate.upgrade(url)
    with TestClient(create_app(Settings(database_url=url), start_workers=False)) as c:
        yield c


def test_the_docs_page_loads_only_local_assets(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200 and "SwaggerUIBundle" in page.text
    assert not re.search(r"(https?:)?//[a-z0-9]", page.text, re.IGNORECASE), "an off-host URL in /docs"
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert {a.rsplit("/", 1)[-1] for a in assets} == {
        "swagger-ui-bundle.js", "swagger-ui.css", "swagger-ui-favicon-32x32.png"}
    for asset in assets:
        response = client.get(asset)
        assert response.status_code == 200 and len(response.content) > 500, asset
    assert "url: '/openapi.json'" in page.text and client.get("/openapi.json").status_code == 200
    assert '"validatorUrl": null' in page.text  # no badge fetched from validator.swagger.io


def test_redoc_which_loads_from_a_cdn_is_not_served(client: TestClient) -> None:
    assert client.get("/redoc").status_code == 404


def test_the_vendored_files_and_their_licences_ship_in_the_package() -> None:
    vendor = STATIC / "vendor"
    for name in ("swagger-ui-bundle.js", "swagger-ui.css", "swagger-ui-LICENSE", "swagger-ui-NOTICE",
                 "swagger-ui-bundle.js.LICENSE.txt"):
        assert (vendor / name).stat().st_size > 50, name
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"static/vendor/*"' in pyproject  # package data: every file of the flat vendor folder
    assert not [p for p in vendor.iterdir() if p.is_dir()], "package data does not take subfolders"
