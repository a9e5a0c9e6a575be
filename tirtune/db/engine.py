"""Engines and session factories for SQLite (embedded default) and PostgreSQL (production)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

__all__ = ["database_exists", "make_engine", "normalize_url", "session_factory", "shown_url"]

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 30_000


def normalize_url(url: str | URL) -> URL:
    """Parse `url`; a bare `postgresql://` means psycopg 3, the driver tirtune ships with."""
    parsed = sa.make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def shown_url(url: str | URL | Engine) -> str:
    """`url` as messages show it: its password as ***."""
    parsed = url.url if isinstance(url, Engine) else normalize_url(url)
    return str(parsed.render_as_string(hide_password=True))


def database_exists(url: str | URL) -> bool:
    """False when `url` is an SQLite file that is not there (connecting would create it); True for
    any other database (whether a server's exists, connecting says)."""
    parsed = normalize_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return True
    return Path(str(parsed.database)).expanduser().exists()


def make_engine(url: str | URL, **kwargs: Any) -> Engine:
    """An engine for `url`. SQLite gets its parent directory created, foreign keys, WAL and a
    busy timeout; PostgreSQL gets `pool_pre_ping` so a restarted server is survived."""
    parsed = normalize_url(url)
    log.debug("engine for %s", parsed.render_as_string(hide_password=True))
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, **kwargs)
    return sa.create_engine(parsed, pool_pre_ping=True, **kwargs)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions whose loaded objects stay readable after commit (records are built from them)."""
    return sessionmaker(bind=engine, expire_on_commit=False)


def _sqlite_engine(url: URL, **kwargs: Any) -> Engine:
    in_memory = url.database in (None, "", ":memory:")
    if in_memory:
        # One shared connection, or every checkout would see its own empty database.
        kwargs.setdefault("poolclass", StaticPool)
        kwargs.setdefault("connect_args", {"check_same_thread": False})
    else:
        Path(str(url.database)).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, **kwargs)
    sa.event.listen(engine, "connect", _on_sqlite_connect)
    sa.event.listen(engine, "begin", _on_sqlite_begin)
    return engine


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Hand transaction control to SQLAlchemy (see _on_sqlite_begin); sqlite3's legacy mode
    # would otherwise start transactions late and never for SELECT.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    finally:
        cursor.close()


def _on_sqlite_begin(connection: sa.Connection) -> None:
    # IMMEDIATE takes the write lock up front. A deferred transaction that reads and then writes
    # fails at once with SQLITE_BUSY when another writer got in between (no busy wait applies),
    # which is exactly the claim/record pattern; serializing writers is cheap at this scale.
    connection.exec_driver_sql("BEGIN IMMEDIATE")
