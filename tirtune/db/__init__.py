"""Persistence: SQLAlchemy models, repository functions returning frozen records, migrations.

SQLAlchemy stays inside this package: callers see `transaction`, the functions of `repo`, and
`JobRecord`/`MeasurementRecord`.
"""

from __future__ import annotations

from tirtune.db import migrate, repo
from tirtune.db.engine import make_engine, normalize_url, session_factory
from tirtune.db.errors import DbError, NotFound
from tirtune.db.records import TERMINAL_STATES, JobRecord, JobState, MeasurementRecord
from tirtune.db.session import open_database, transaction, url_of

__all__ = [
    "TERMINAL_STATES",
    "DbError",
    "JobRecord",
    "JobState",
    "MeasurementRecord",
    "NotFound",
    "make_engine",
    "migrate",
    "normalize_url",
    "open_database",
    "repo",
    "session_factory",
    "transaction",
    "url_of",
]
