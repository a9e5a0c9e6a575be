"""Persistence: SQLAlchemy models, repository functions returning frozen records, migrations.

SQLAlchemy stays inside this package: callers see `transaction`, the functions of `repo`, and
`JobRecord`/`MeasurementRecord`.
"""

from __future__ import annotations

from tirtune.db import migrate, repo
from tirtune.db.engine import database_exists, make_engine, normalize_url, session_factory, shown_url
from tirtune.db.errors import DbError, NotFound
from tirtune.db.records import TERMINAL_STATES, JobRecord, JobState, MeasurementRecord
from tirtune.db.session import open_database, open_existing, transaction, url_of

__all__ = [
    "TERMINAL_STATES",
    "DbError",
    "JobRecord",
    "JobState",
    "MeasurementRecord",
    "NotFound",
    "database_exists",
    "make_engine",
    "migrate",
    "normalize_url",
    "open_database",
    "open_existing",
    "repo",
    "session_factory",
    "shown_url",
    "transaction",
    "url_of",
]
