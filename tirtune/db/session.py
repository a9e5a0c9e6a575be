"""Opening a database for use, and the unit-of-work helper every caller of `repo` uses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from tirtune.db import migrate
from tirtune.db.engine import database_exists, make_engine, session_factory
from tirtune.db.errors import DbError

__all__ = ["open_database", "open_existing", "transaction", "url_of"]


def open_database(url: str | URL) -> sessionmaker[Session]:
    """Sessions on the database at `url`, made ready first: SQLite is migrated in place, any
    other database must already be at head (DbError otherwise; see `migrate.ensure_ready`)."""
    engine = make_engine(url)
    try:
        migrate.ensure_ready(engine)
    except BaseException:
        engine.dispose()
        raise
    return session_factory(engine)


def open_existing(url: str | URL) -> sessionmaker[Session] | None:
    """`open_database` for a reader: None, and nothing created, when `url` is an SQLite file that
    does not exist (a database nothing was ever stored in)."""
    return open_database(url) if database_exists(url) else None


def url_of(factory: sessionmaker[Session]) -> str:
    """The URL (password included) of the database `factory`'s sessions use: where Optuna's
    studies of those jobs must live too."""
    bind = factory.kw.get("bind")
    if bind is None or not hasattr(bind, "url"):
        raise DbError("the session factory is not bound to an engine")
    return str(bind.url.render_as_string(hide_password=False))


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit when the block ends, roll back when it raises.

    Repository functions never commit; callers group them in one of these (or, equivalently,
    `with factory.begin() as s:`, which does not translate errors). Database faults
    (SQLAlchemy errors) leave the block as DbError; other exceptions pass through unchanged.
    """
    try:
        with factory.begin() as session:
            yield session
    except SQLAlchemyError as e:
        raise DbError(f"database error: {_first_line(e)}") from e


def _first_line(error: SQLAlchemyError) -> str:
    cause = getattr(error, "orig", None) or error
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0] if text else ''}"
