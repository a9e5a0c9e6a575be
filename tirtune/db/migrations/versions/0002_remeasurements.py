"""Re-measurements of a job's top trials, interleaved in one process before the best is called.

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02

Written by hand and reviewed; constraint names follow the naming convention in models.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "tirtune_remeasurements"
OUTCOMES = "'OK', 'INVALID', 'COMPILE_ERROR', 'LAUNCH_ERROR', 'TIMEOUT', 'WRONG_RESULT'"


def _floats(*names: str) -> list[sa.Column[object]]:
    return [sa.Column(name, sa.Double(), nullable=True) for name in names]


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("measurement_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("session", sa.String(32), nullable=False),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False, server_default=""),
        *_floats("time_ms", "time_p10_ms", "time_p90_ms"),
        sa.Column("repetitions", sa.Integer(), nullable=False, server_default=sa.text("0")),
        *_floats("tflops", "cublas_ms", "ratio", "sm_clock_mhz", "power_w"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{TABLE}")),
        sa.ForeignKeyConstraint(
            ["job_id"], ["tirtune_jobs.id"], name=op.f(f"fk_{TABLE}_job_id_tirtune_jobs"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["measurement_id"],
            ["tirtune_measurements.id"],
            name=op.f(f"fk_{TABLE}_measurement_id_tirtune_measurements"),
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(f"outcome IN ({OUTCOMES})", name=op.f(f"ck_{TABLE}_outcome")),
    )
    for column in ("job_id", "measurement_id", "key"):
        op.create_index(op.f(f"ix_{TABLE}_{column}"), TABLE, [column])


def downgrade() -> None:
    op.drop_table(TABLE)  # its indexes go with it
