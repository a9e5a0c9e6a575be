"""Initial schema: tuning jobs and measurements.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Written by hand and reviewed; constraint names follow the naming convention in models.py.
The two tables reference each other (a measurement's job, a job's best measurement): the
job -> best measurement key is added after both exist, except on SQLite, which cannot ALTER a
constraint in but accepts a forward reference at CREATE time.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_STATES = "'QUEUED', 'RUNNING', 'DONE', 'FAILED', 'CANCELLED'"
OUTCOMES = "'OK', 'INVALID', 'COMPILE_ERROR', 'LAUNCH_ERROR', 'TIMEOUT', 'WRONG_RESULT'"
BEST_FK = "fk_tirtune_jobs_best_measurement_id_tirtune_measurements"


def _timestamp(name: str, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _text(name: str, length: int) -> sa.Column[object]:
    return sa.Column(name, sa.String(length), nullable=False, server_default="")


def _best_fk() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["best_measurement_id"], ["tirtune_measurements.id"], name=op.f(BEST_FK), ondelete="SET NULL"
    )


def _create_jobs(inline_best_fk: bool) -> None:
    op.create_table(
        "tirtune_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("m", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("dtype", sa.String(16), nullable=False),
        sa.Column("arch", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("max_trials", sa.Integer(), nullable=False),
        sa.Column("time_budget_s", sa.Double(), nullable=True),
        sa.Column("study_name", sa.String(128), nullable=False),
        sa.Column("gpu_name", sa.String(128), nullable=True),
        sa.Column("trials_done", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("best_measurement_id", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False, server_default=""),
        _timestamp("created_at"),
        _timestamp("started_at", nullable=True),
        _timestamp("finished_at", nullable=True),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tirtune_jobs")),
        sa.UniqueConstraint("study_name", name=op.f("uq_tirtune_jobs_study_name")),
        sa.CheckConstraint(f"state IN ({JOB_STATES})", name=op.f("ck_tirtune_jobs_state")),
        *([_best_fk()] if inline_best_fk else []),
    )
    op.create_index(op.f("ix_tirtune_jobs_state"), "tirtune_jobs", ["state"])


def _create_measurements() -> None:
    op.create_table(
        "tirtune_measurements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("trial_number", sa.Integer(), nullable=True),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("config_digest", sa.String(64), nullable=False),
        sa.Column("m", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("dtype", sa.String(16), nullable=False),
        sa.Column("template_version", sa.String(64), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False, server_default=""),
        *(sa.Column(name, sa.Double(), nullable=True) for name in ("time_ms", "time_p10_ms", "time_p90_ms")),
        sa.Column("repetitions", sa.Integer(), nullable=False, server_default=sa.text("0")),
        *(
            sa.Column(name, sa.Double(), nullable=True)
            for name in ("tflops", "cublas_ms", "cublas_tflops", "ratio", "rel_error")
        ),
        _text("gpu_name", 128),
        *(_text(name, 64) for name in ("driver", "cuda", "tvm_version", "torch_version")),
        _text("compute_capability", 16),
        *(sa.Column(name, sa.Double(), nullable=True) for name in ("sm_clock_mhz", "power_w", "build_seconds")),
        sa.Column("stale", sa.Boolean(), nullable=False, server_default=sa.false()),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tirtune_measurements")),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["tirtune_jobs.id"],
            name=op.f("fk_tirtune_measurements_job_id_tirtune_jobs"),
            ondelete="SET NULL",
        ),
        sa.CheckConstraint(f"outcome IN ({OUTCOMES})", name=op.f("ck_tirtune_measurements_outcome")),
    )
    op.create_index(op.f("ix_tirtune_measurements_job_id"), "tirtune_measurements", ["job_id"])
    op.create_index(op.f("ix_tirtune_measurements_key"), "tirtune_measurements", ["key"])
    op.create_index(
        op.f("ix_tirtune_measurements_m_n_k_dtype_gpu_name_outcome"),
        "tirtune_measurements",
        ["m", "n", "k", "dtype", "gpu_name", "outcome"],
    )


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    _create_jobs(inline_best_fk=sqlite)
    _create_measurements()
    if not sqlite:
        op.create_foreign_key(
            op.f(BEST_FK),
            "tirtune_jobs",
            "tirtune_measurements",
            ["best_measurement_id"],
            ["id"],
            ondelete="SET NULL",
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint(op.f(BEST_FK), "tirtune_jobs", type_="foreignkey")
    op.drop_table("tirtune_measurements")  # its indexes go with it
    op.drop_table("tirtune_jobs")
