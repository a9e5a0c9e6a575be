"""Jobs count their own updates: `revision`, so that a reader can tell that any job changed.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

Written by hand and reviewed. `tirtune_jobs.revision` starts at 0 and every UPDATE of the row adds
one (the model's `onupdate`, in the statement itself: `SET revision = revision + 1`). The API's
per-process answer cache reads (count, newest id, sum of revisions) of the jobs once a second to
tell whether any job changed (state, trials done, best, message): unlike the newest `updated_at`,
the sum moves on every committed update whatever order concurrent writers commit in. Existing rows
start at 0. Added with ALTER TABLE ... ADD COLUMN, never by batch mode, as in 0003 and 0004.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOBS = "tirtune_jobs"


def upgrade() -> None:
    op.add_column(JOBS, sa.Column("revision", sa.Integer(), nullable=False, server_default=sa.text("0")))


def downgrade() -> None:
    op.drop_column(JOBS, "revision")
