"""Programmatic Alembic: upgrade, downgrade, current revision and the startup check.

The Alembic config is built here from the package path, so nothing depends on the working
directory or an alembic.ini. Our version table is `tirtune_alembic_version`: Optuna's RDB
storage keeps its own Alembic history in the default `alembic_version` of the same database.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import OperationalError

from tirtune.db.engine import make_engine, shown_url
from tirtune.db.errors import DbError

__all__ = [
    "TABLE_PREFIX",
    "VERSION_TABLE",
    "check",
    "current",
    "downgrade",
    "ensure_ready",
    "head",
    "include_name",
    "upgrade",
]

log = logging.getLogger(__name__)

VERSION_TABLE = "tirtune_alembic_version"
TABLE_PREFIX = "tirtune_"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"

Target = str | URL | Engine
T = TypeVar("T")


def include_name(name: str | None, type_: str, _parents: object) -> bool:
    """Autogenerate filter: only our tables; Optuna's live in the same database."""
    return type_ != "table" or (name or "").startswith(TABLE_PREFIX)


def upgrade(url: Target, revision: str = "head") -> None:
    """Migrate the database at `url` up to `revision`."""
    log.info("upgrading database to %s", revision)
    _with_config(url, lambda cfg: command.upgrade(cfg, revision))


def downgrade(url: Target, revision: str) -> None:
    """Migrate the database at `url` down to `revision` ('base' removes every tirtune table)."""
    log.info("downgrading database to %s", revision)
    _with_config(url, lambda cfg: command.downgrade(cfg, revision))


def current(url: Target) -> str | None:
    """The database's revision; None when tirtune's tables were never created."""
    with _connection(url) as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


def head() -> str:
    """The revision this code expects."""
    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if revision is None:  # pragma: no cover - the package always ships 0001
        raise DbError(f"no migrations found in {MIGRATIONS}")
    return revision


def check(url: Target) -> None:
    """Raise DbError unless the database is at the revision the code expects; the message names
    the database and the command that migrates it."""
    found, expected = current(url), head()
    if found != expected:
        at = found or "none (empty)"
        where = shown_url(url)
        password = " (with its password for ***)" if "***" in where else ""
        raise DbError(
            f"database {where} is at revision {at}, code expects {expected}; migrate it with "
            f"`tirtune db upgrade --database {where}`{password}"
        )


def ensure_ready(url: Target) -> None:
    """The startup policy: the embedded SQLite database is upgraded in place; any other must
    already be at head (DbError otherwise), since production migrations are a deliberate step."""
    engine = url if isinstance(url, Engine) else make_engine(url)
    try:
        if engine.dialect.name == "sqlite":
            upgrade(engine)
        else:
            check(engine)
    finally:
        if engine is not url:
            engine.dispose()


def alembic_config() -> AlembicConfig:
    cfg = AlembicConfig()
    # '%' would start a configparser interpolation.
    cfg.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    return cfg


def _with_config(url: Target, action: Callable[[AlembicConfig], Any]) -> None:
    with _connection(url) as connection:
        cfg = alembic_config()
        cfg.attributes["connection"] = connection  # env.py runs on it instead of making an engine
        action(cfg)


@contextmanager
def _connection(url: Target) -> Iterator[Connection]:
    """A connection in a transaction that commits at the end; engines made here are disposed."""
    engine = url if isinstance(url, Engine) else make_engine(url)
    try:
        try:
            connection = engine.connect()
        except OperationalError as e:  # no server, no such database, a file that cannot be opened
            reason = str(getattr(e, "orig", None) or e).strip().splitlines()
            raise DbError(f"cannot connect to database {shown_url(engine)}: {reason[0] if reason else e}") from e
        with connection, connection.begin():
            yield connection
    finally:
        if engine is not url:
            engine.dispose()
