"""Alembic environment. Run through `tirtune.db.migrate` (which passes an open connection), or
by the alembic CLI with `-c tirtune/db/alembic.ini` (URL from the settings, as the service)."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from tirtune.db.engine import make_engine
from tirtune.db.migrate import VERSION_TABLE, include_name
from tirtune.db.models import metadata


def run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        include_name=include_name,
        compare_type=True,
        # SQLite cannot ALTER constraints; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    given = context.config.attributes.get("connection")
    if given is not None:
        run_on(given)
        return
    from tirtune.settings import get_settings

    url = context.config.get_main_option("sqlalchemy.url") or get_settings().database_url
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            run_on(connection)
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
run_online()
