"""The physical limit beside cuBLAS: the bytes a GEMM must move and the roofline's ceilings.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

Written by hand and reviewed. Measurements gain `bytes_moved` (A and B read once, D written once:
the least a GEMM must move), `bandwidth_gbs` (those bytes over the measured time) and the
roofline's two ceilings as the measuring process saw them: `copy_gbs` (a device-to-device copy's
bandwidth, read + write) and `peak_tflops` (the MMA rate at the measured SM clock); see
tirtune/core/roofline.py. Re-measurements gain the same figures for their own time and process.
Rows measured before stay NULL (their processes measured no copy); `bytes_moved` of OK rows is
filled in, since it depends on the problem alone.

Columns are added one by one (ALTER TABLE ... ADD COLUMN), never by batch mode, as in 0003.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MEASUREMENTS = "tirtune_measurements"
REMEASUREMENTS = "tirtune_remeasurements"
FIGURES = ("bandwidth_gbs", "copy_gbs", "peak_tflops")


def upgrade() -> None:
    op.add_column(MEASUREMENTS, sa.Column("bytes_moved", sa.BigInteger(), nullable=True))
    for table in (MEASUREMENTS, REMEASUREMENTS):
        for name in FIGURES:
            op.add_column(table, sa.Column(name, sa.Double(), nullable=True))
    # 2-byte operands (float16, bfloat16): (MK + NK + MN) x 2.
    op.execute(
        f"UPDATE {MEASUREMENTS} SET bytes_moved = (m * k + n * k + m * n) * 2, "
        "bandwidth_gbs = CASE WHEN time_ms > 0 THEN (m * k + n * k + m * n) * 2 / (time_ms * 1e6) END "
        "WHERE outcome = 'OK'"
    )


def downgrade() -> None:
    for table in (REMEASUREMENTS, MEASUREMENTS):
        for name in reversed(FIGURES):
            op.drop_column(table, name)
    op.drop_column(MEASUREMENTS, "bytes_moved")
