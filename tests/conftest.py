"""Database fixtures: every DB-backed test runs on SQLite (a temp file) and on real PostgreSQL.

PostgreSQL comes from TIRTUNE_TEST_POSTGRES_URL (default: local server, trust auth). Each run
creates throwaway databases with random names and drops them afterwards. When the server is
unreachable the PostgreSQL variants are skipped, unless CI is set: then they fail, since CI must
really exercise PostgreSQL.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine
from sqlalchemy.orm import Session, sessionmaker

from bench.faults import FAULTS_DIR_ENV
from tirtune.db import make_engine, migrate, normalize_url, session_factory
from tirtune.runner.scratch import owned_folder, sweep

PG_DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]
TABLES = ("tirtune_measurements", "tirtune_jobs")
ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def hopper_gpu() -> str | None:
    """The first Hopper (compute capability 9.x) GPU nvidia-smi lists, or None."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return next((line for line in listed.splitlines() if line.rsplit(",", 1)[-1].strip().startswith("9.")), None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` run the real measuring child: skipped without a Hopper GPU."""
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu and hopper_gpu() is None:
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU of compute capability 9.x (run: pytest -m gpu on one)")
        for item in gpu:
            item.add_marker(skip)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _admin_engine(url: URL) -> Engine:
    return sa.create_engine(url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})


@pytest.fixture(autouse=True)
def _replays_stay_in_the_test(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A replay writes to its own database (~/.tirtune/replay.db by default): never the home
    directory's from a test. Tests that want a replay elsewhere set TIRTUNE_REPLAY_DATABASE_URL."""
    from tirtune.settings import get_settings

    replay_db = tmp_path_factory.mktemp("replay") / "replay.db"
    monkeypatch.setenv("TIRTUNE_REPLAY_DATABASE_URL", f"sqlite:///{replay_db}")
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def pg_admin_url() -> URL:
    """A reachable PostgreSQL server's maintenance database (CREATE/DROP DATABASE run there)."""
    url = normalize_url(os.environ.get("TIRTUNE_TEST_POSTGRES_URL", PG_DEFAULT_URL))
    engine = _admin_engine(url)
    try:
        with engine.connect() as connection:
            connection.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as e:
        where = url.render_as_string(hide_password=True)
        reason = f"PostgreSQL at {where} is unreachable ({str(e.orig).strip().splitlines()[0]})"
        if _in_ci():
            pytest.fail(f"{reason}; CI is set, so PostgreSQL tests must run", pytrace=False)
        pytest.skip(f"{reason}; set TIRTUNE_TEST_POSTGRES_URL to run the PostgreSQL variants")
    finally:
        engine.dispose()
    return url


@contextmanager
def throwaway_pg_database(admin_url: URL) -> Iterator[str]:
    """A new empty database with a random name, dropped (connections and all) at the end."""
    name = f"tirtune_test_{uuid.uuid4().hex[:12]}"
    admin = _admin_engine(admin_url)
    try:
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def empty_pg_url(pg_admin_url: URL) -> Iterator[str]:
    """A fresh PostgreSQL database that was never migrated."""
    with throwaway_pg_database(pg_admin_url) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database that was never migrated, on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tirtune.db'}"
    url: str = request.getfixturevalue("empty_pg_url")
    return url


@pytest.fixture(scope="session")
def _pg_migrated_url(pg_admin_url: URL) -> Iterator[str]:
    with throwaway_pg_database(pg_admin_url) as url:
        migrate.upgrade(url)
        yield url


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database at head with empty tirtune tables (PostgreSQL's is shared and truncated)."""
    if request.param == "sqlite":
        sqlite_url = f"sqlite:///{tmp_path / 'tirtune.db'}"
        migrate.upgrade(sqlite_url)
        return sqlite_url
    url: str = request.getfixturevalue("_pg_migrated_url")
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
    finally:
        engine.dispose()
    return url


@pytest.fixture
def db_engine(db_url: str) -> Iterator[Engine]:
    engine = make_engine(db_url)
    yield engine
    engine.dispose()


@pytest.fixture
def db_factory(db_engine: Engine) -> sessionmaker[Session]:
    return session_factory(db_engine)


# --- The run's own temp folder ---------------------------------------------------------------------
# What every process a test starts must find (Ray's token, the fault kernels' generated modules) lives
# in one folder of this run, named for its process and removed when pytest ends (pytest_unconfigure:
# also after --collect-only, where no fixture runs); the folders of runs that died first are swept.
# Set here, at import, in os.environ, before any test module imports ray (Ray reads RAY_AUTH_MODE once
# per process), so every Ray process and every subprocess a test starts (tirtune serve, tirtune tune)
# uses the same.
#
# Ray 2.60 turns token authentication on for every new local cluster and, with no token anywhere,
# writes one to ~/.ray/auth_token: a test run would leave it in the home directory. So the tests run
# with token authentication on and a token of their own.

RUN_PREFIX = "tirtune-test-run-"
sweep(RUN_PREFIX)
_RUN_DIR = owned_folder(RUN_PREFIX)
RAY_AUTH = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
_SAVED_ENV = {name: os.environ.get(name) for name in (*RAY_AUTH, FAULTS_DIR_ENV)}
_RAY_TOKEN = _RUN_DIR / "ray_auth_token"
_RAY_TOKEN.write_text(secrets.token_hex(32))
_RAY_TOKEN.chmod(0o600)
os.environ.pop("RAY_AUTH_TOKEN", None)  # it would win over the path
os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(_RAY_TOKEN),
                   FAULTS_DIR_ENV: str(_RUN_DIR / "faults")})


@pytest.fixture(scope="session")
def ray_auth_token() -> Path:
    """The token file the run's Ray clusters use."""
    return _RAY_TOKEN


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run's folder goes, and the environment is restored, however the run ended."""
    for name, value in _SAVED_ENV.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    shutil.rmtree(_RUN_DIR, ignore_errors=True)


# --- A service that replays recorded H200 measurements (bench/ scripts end to end) -----------------


@pytest.fixture
def replaying_service(tmp_path: Path) -> Iterator[str]:
    """The URL of a `tirtune serve` subprocess that measures with the recordings in bench/data
    (its replay database: tmp_path / "replay.db"), stopped after the test."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "TIRTUNE_REPLAY": str(ROOT / "bench" / "data"),
           "TIRTUNE_REPLAY_DATABASE_URL": f"sqlite:///{tmp_path / 'replay.db'}",
           "TIRTUNE_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "tirtune", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "tirtune serve did not start"
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
