"""A problem's fused epilogue is part of its key: jobs and measurements gain `epilogue`.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-09

Written by hand and reviewed. `epilogue` is the epilogue's canonical text (core/epilogue.py:
"none", or the ops joined by "+" in their fixed order, e.g. "bias+residual"; at most 33
characters), NOT NULL with server default "none": every stored job and trial was a plain GEMM, and
an INSERT that does not name it is one too. The index that serves the best-of-problem queries
(repo.best_of, list_measurements' problem filter) keys the problem, so it is rebuilt with the
epilogue after the dtype. Added with ALTER TABLE ... ADD COLUMN, never by batch mode, as in
0003-0005: no table is rebuilt, and the re-measurements that reference the trials are untouched.

Downgrade drops the column and restores the old index, but refuses while any job or trial has a
fused epilogue: without the column such a row would read as the plain GEMM of its shape, and its
figures would be served for it (docs/design.md, "Epilogues"). Delete those rows first to go down.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from tirtune.db.errors import DbError

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOBS = "tirtune_jobs"
MEASUREMENTS = "tirtune_measurements"
OLD_INDEX = ("m", "n", "k", "dtype", "gpu_name", "outcome")
NEW_INDEX = ("m", "n", "k", "dtype", "epilogue", "gpu_name", "outcome")


def _index_name(columns: Sequence[str]) -> str:
    return f"ix_{MEASUREMENTS}_{'_'.join(columns)}"


def upgrade() -> None:
    for table in (JOBS, MEASUREMENTS):
        op.add_column(table, sa.Column("epilogue", sa.String(64), nullable=False, server_default="none"))
    op.drop_index(op.f(_index_name(OLD_INDEX)), table_name=MEASUREMENTS)
    op.create_index(op.f(_index_name(NEW_INDEX)), MEASUREMENTS, list(NEW_INDEX))


def downgrade() -> None:
    bind = op.get_bind()
    fused = {
        table: bind.execute(sa.text(f"SELECT count(*) FROM {table} WHERE epilogue <> 'none'")).scalar() or 0
        for table in (JOBS, MEASUREMENTS)
    }
    if any(fused.values()):
        raise DbError(
            f"cannot downgrade below 0006: {fused[JOBS]} jobs and {fused[MEASUREMENTS]} measurements have a fused "
            "epilogue, and without the epilogue column they would read as the plain GEMM of their shape; "
            "delete them first (their epilogue is not 'none')"
        )
    op.drop_index(op.f(_index_name(NEW_INDEX)), table_name=MEASUREMENTS)
    op.create_index(op.f(_index_name(OLD_INDEX)), MEASUREMENTS, list(OLD_INDEX))
    for table in (MEASUREMENTS, JOBS):
        op.drop_column(table, "epilogue")
