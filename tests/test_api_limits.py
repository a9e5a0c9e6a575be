"""Error bodies stay small whatever the request: bodies over the cap are refused 413 before they are
parsed, and a refusal quotes at most a short prefix of what the client sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tirtune.api import create_app
from tirtune.api.limits import MAX_BODY_BYTES
from tirtune.db import migrate
from tirtune.settings import Settings

BODY = {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"}
SMALL = 2048  # bytes: an error body is about 200-600


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path / 'limits.db'}"
    migrate.upgrade(url)
    with TestClient(create_app(Settings(database_url=url), start_workers=False),
                    raise_server_exceptions=False) as c:
        yield c


def jobs(client: TestClient) -> int:
    return int(client.get("/jobs").json()["total"])


@pytest.mark.parametrize("size", [1_000_000, 10_000_000])
def test_a_huge_dtype_is_refused_413_in_a_small_body(client: TestClient, size: int) -> None:
    response = client.post("/tune", json={**BODY, "dtype": "x" * size})
    assert response.status_code == 413, response.text[:200]
    assert len(response.content) < SMALL
    error = response.json()["error"]
    assert error["code"] == "body_too_large" and str(MAX_BODY_BYTES) in error["message"]
    assert jobs(client) == 0


def test_a_chunked_body_is_cut_off_at_the_cap(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"m": 64, "n": 64, "k": 64, "dtype": "'
        for _ in range(1000):
            yield b"x" * 10_000
        yield b'"}'

    response = client.post("/tune", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413 and len(response.content) < SMALL
    assert response.json()["error"]["code"] == "body_too_large"


def test_a_body_under_the_cap_is_still_parsed(client: TestClient) -> None:
    padded = json.dumps(BODY) + " " * (MAX_BODY_BYTES - len(json.dumps(BODY)))
    response = client.post("/tune", content=padded, headers={"content-type": "application/json"})
    assert response.status_code == 202, response.text


@pytest.mark.parametrize(
    "body",
    [
        {**BODY, "dtype": "x" * 60_000},  # quoted by the dtype validator
        {**BODY, "y" * 60_000: 1},  # an unknown field: its name is the error's location
        {**BODY, "m": "9" * 60_000},  # a string where an integer belongs
        {**BODY, "arch": "z" * 60_000},
        {"m": [1] * 20_000},  # one error per list item and field
    ],
)
def test_a_refusal_quotes_only_a_prefix_of_the_input(client: TestClient, body: dict[str, object]) -> None:
    response = client.post("/tune", json=body)
    assert response.status_code == 422, response.text[:200]
    assert len(response.content) < SMALL, response.text[:SMALL]
    assert response.json()["error"]["code"] == "validation_error"


def test_an_unparseable_body_is_400_in_the_error_shape(client: TestClient) -> None:
    # json.loads refuses an integer of more than 4300 digits with a ValueError, not a JSON error.
    response = client.post("/tune", content=b'{"m": ' + b"9" * 5000 + b"}",
                           headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_request"
