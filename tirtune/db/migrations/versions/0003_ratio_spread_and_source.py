"""The same-run ratio's spread, and where every figure comes from (GPU or replay).

Revision ID: 0003
Revises: 0002
Create Date: 2025-01-03

Written by hand and reviewed; constraint names follow the naming convention in models.py.

Measurements and re-measurements gain `ratio_p10`/`ratio_p90` (the spread of the per-round
ratios; None for rows measured before, which did not keep their rounds), `source` ("gpu": this
service's GPU runner measured it; "replay": a recording was read back) and `recording` (which
file, for replays). Measurements gain `measured_at` (when the figures were measured: a replay's
is the recording's time, None when unknown); re-measurements gain `processes`.

Existing rows become source "gpu" with `measured_at` = `created_at`. Rows a replay wrote before
this revision cannot be proved to be replays from anything stored: their stack and figures are the
recording's, which are also those of the GPU run that made the recording, and a replay's
build_seconds of 0 is also a GPU run's on a build-cache hit. So none is relabelled (replays went
to the default database until this revision: a database that held replays keeps them labelled
"gpu"; see docs/measurement.md). Downgrading drops the new columns and with them the labels.

The columns are added one by one (ALTER TABLE ... ADD COLUMN, inline CHECK on SQLite), never by
batch mode: on SQLite that rebuilds the table, and dropping the old tirtune_measurements under
foreign keys would cascade into the re-measurements.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MEASUREMENTS = "tirtune_measurements"
REMEASUREMENTS = "tirtune_remeasurements"
SOURCES = "source IN ('gpu', 'replay')"


def _source(table: str, sqlite: bool) -> None:
    name = op.f(f"ck_{table}_source")
    checks = [sa.CheckConstraint(SOURCES, name=name)] if sqlite else []
    op.add_column(table, sa.Column("source", sa.String(16), *checks, nullable=False, server_default="gpu"))
    if not sqlite:
        op.create_check_constraint(name, table, SOURCES)
    op.add_column(table, sa.Column("recording", sa.String(256), nullable=True))


def _spread(table: str) -> None:
    for name in ("ratio_p10", "ratio_p90"):
        op.add_column(table, sa.Column(name, sa.Double(), nullable=True))


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for table in (MEASUREMENTS, REMEASUREMENTS):
        _spread(table)
        _source(table, sqlite)
    op.add_column(MEASUREMENTS, sa.Column("measured_at", sa.DateTime(timezone=True), nullable=True))
    op.execute(f"UPDATE {MEASUREMENTS} SET measured_at = created_at")  # all GPU rows: see the docstring
    op.add_column(REMEASUREMENTS, sa.Column("processes", sa.Integer(), nullable=False, server_default=sa.text("1")))


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.drop_column(REMEASUREMENTS, "processes")
    op.drop_column(MEASUREMENTS, "measured_at")
    for table in (MEASUREMENTS, REMEASUREMENTS):
        if not sqlite:
            op.drop_constraint(op.f(f"ck_{table}_source"), table, type_="check")
        for name in ("recording", "source", "ratio_p90", "ratio_p10"):
            op.drop_column(table, name)
