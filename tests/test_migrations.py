"""Migrations: up, down and up again on SQLite and PostgreSQL; models agree with the schema;
Optuna's tables share the database untouched."""

from __future__ import annotations

import re
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from tirtune.db import DbError, make_engine, migrate, shown_url
from tirtune.db.models import Job, metadata

OURS = {"tirtune_jobs", "tirtune_measurements", "tirtune_remeasurements"}
ADDED_IN_0003 = {
    *(("tirtune_measurements", c) for c in ("ratio_p10", "ratio_p90", "source", "recording", "measured_at")),
    *(("tirtune_remeasurements", c) for c in ("ratio_p10", "ratio_p90", "source", "recording", "processes")),
}
ADDED_IN_0004 = {
    *(("tirtune_measurements", c) for c in ("bytes_moved", "bandwidth_gbs", "copy_gbs", "peak_tflops")),
    *(("tirtune_remeasurements", c) for c in ("bandwidth_gbs", "copy_gbs", "peak_tflops")),
}
ADDED_IN_0005 = {("tirtune_jobs", "revision")}
ADDED_IN_0006 = {("tirtune_jobs", "epilogue"), ("tirtune_measurements", "epilogue")}
# The best-of-problem index 0006 rebuilds with the epilogue.
INDEX_0005 = "ix_tirtune_measurements_m_n_k_dtype_gpu_name_outcome"
INDEX_0006 = "ix_tirtune_measurements_m_n_k_dtype_epilogue_gpu_name_outcome"


def tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def schema_diffs(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            opts = {
                "include_name": migrate.include_name,
                "version_table": migrate.VERSION_TABLE,
                "compare_type": True,
                # SQLite reflects an empty-string default as "''": a false difference there.
                "compare_server_default": engine.dialect.name != "sqlite",
            }
            return list(compare_metadata(MigrationContext.configure(connection, opts=opts), metadata))
    finally:
        engine.dispose()


def pending(url: str) -> set[tuple[str, ...]]:
    """What the models have that the database at `url` lacks: ("add_column", table, column),
    ("add_index", name) and ("remove_index", name) for an index the models key differently."""
    found: set[tuple[str, ...]] = set()
    for d in schema_diffs(url):
        kind = d[0]  # type: ignore[index]
        if kind == "add_column":
            found.add((kind, d[2], d[3].name))  # type: ignore[index]
        else:
            found.add((kind, d[1].name))  # type: ignore[index]
    return found


def columns_added(*added: set[tuple[str, str]]) -> set[tuple[str, ...]]:
    return {("add_column", table, column) for group in added for table, column in group}


# 0006 rebuilds the best-of-problem index: a database below it has the old one.
REKEYED_IN_0006 = {("add_index", INDEX_0006), ("remove_index", INDEX_0005)}


def test_upgrade_downgrade_upgrade(empty_db_url: str) -> None:
    assert migrate.current(empty_db_url) is None
    migrate.upgrade(empty_db_url)
    assert OURS <= tables(empty_db_url)
    assert migrate.current(empty_db_url) == migrate.head()
    migrate.check(empty_db_url)

    migrate.downgrade(empty_db_url, "base")
    assert not OURS & tables(empty_db_url)
    assert migrate.current(empty_db_url) is None

    migrate.upgrade(empty_db_url)
    assert OURS <= tables(empty_db_url)
    assert migrate.current(empty_db_url) == migrate.head()


def test_version_table_is_ours(empty_db_url: str) -> None:
    migrate.upgrade(empty_db_url)
    found = tables(empty_db_url)
    assert migrate.VERSION_TABLE in found
    assert "alembic_version" not in found  # Optuna's name: never ours


def test_models_match_migrated_schema(empty_db_url: str) -> None:
    migrate.upgrade(empty_db_url)
    assert schema_diffs(empty_db_url) == []


def test_check_refuses_unmigrated_database(empty_db_url: str) -> None:
    where = re.escape(shown_url(empty_db_url))
    with pytest.raises(DbError, match=rf"database {where} is at revision none.*expects 0006; migrate it with "
                                      rf"`tirtune db upgrade --database {where}`"):
        migrate.check(empty_db_url)


def test_check_refuses_database_behind(empty_db_url: str) -> None:
    migrate.upgrade(empty_db_url)
    migrate.downgrade(empty_db_url, "base")
    with pytest.raises(DbError, match="migrate it with `tirtune db upgrade --database "):
        migrate.check(empty_db_url)


def test_optuna_storage_coexists(empty_db_url: str) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(empty_db_url)
    study = optuna.create_study(study_name="coexist", storage=storage)
    study.tell(study.ask(), 1.0)

    migrate.upgrade(empty_db_url)  # Optuna's alembic_version must not confuse ours
    assert migrate.current(empty_db_url) == migrate.head()
    assert schema_diffs(empty_db_url) == []  # and autogenerate must not want to drop Optuna's tables

    migrate.downgrade(empty_db_url, "base")
    left = tables(empty_db_url)
    assert not OURS & left
    assert {"studies", "trials", "version_info", "alembic_version"} <= left
    reloaded = optuna.load_study(study_name="coexist", storage=optuna.storages.RDBStorage(empty_db_url))
    assert [t.value for t in reloaded.trials] == [1.0]

    migrate.upgrade(empty_db_url)
    assert migrate.current(empty_db_url) == migrate.head()
    storage.engine.dispose()


def test_migrations_ship_with_the_package() -> None:
    """pyproject's package-data globs must cover every file Alembic needs."""
    shipped = {p.relative_to(migrate.MIGRATIONS).as_posix() for p in migrate.MIGRATIONS.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    patterns = ("*.py", "*.mako", "versions/*.py")
    def covered(name: str) -> bool:
        return any(Path(name).match(p) and name.count("/") == p.count("/") for p in patterns)

    assert all(covered(name) for name in shipped)
    assert {"env.py", "script.py.mako", "versions/0001_initial.py", "versions/0002_remeasurements.py",
            "versions/0003_ratio_spread_and_source.py", "versions/0004_roofline.py",
            "versions/0005_job_revision.py", "versions/0006_problem_epilogue.py"} <= shipped


def test_0002_adds_and_removes_remeasurements_keeping_trials(empty_db_url: str) -> None:
    """Step by step: 0001 -> 0002 keeps the measurements; 0002 -> 0001 drops only its table."""
    migrate.upgrade(empty_db_url, "0001")
    assert "tirtune_remeasurements" not in tables(empty_db_url)
    engine = make_engine(empty_db_url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text(
                "INSERT INTO tirtune_measurements (key, config, config_digest, m, n, k, dtype, template_version, "
                "outcome, created_at) VALUES ('k', '{}', 'd', 64, 64, 64, 'float16', 't', 'OK', CURRENT_TIMESTAMP)"))
        migrate.upgrade(empty_db_url, "0002")
        assert migrate.current(empty_db_url) == "0002"
        # The models are at head: at 0002 only the columns 0003-0005 add are missing.
        assert pending(empty_db_url) == columns_added(
            ADDED_IN_0003, ADDED_IN_0004, ADDED_IN_0005, ADDED_IN_0006) | REKEYED_IN_0006
        with engine.begin() as connection:
            connection.execute(sa.text(
                "INSERT INTO tirtune_remeasurements (measurement_id, key, session, rounds, outcome, created_at) "
                "SELECT id, key, 's', 5, 'OK', CURRENT_TIMESTAMP FROM tirtune_measurements"))
        migrate.downgrade(empty_db_url, "0001")
        assert "tirtune_remeasurements" not in tables(empty_db_url)
        with engine.connect() as connection:
            assert connection.execute(sa.text("SELECT count(*) FROM tirtune_measurements")).scalar() == 1
    finally:
        engine.dispose()


def test_0003_labels_existing_rows_gpu_and_keeps_everything(empty_db_url: str) -> None:
    """0002 -> 0003: every stored row is a GPU measurement (source "gpu", measured when stored), the
    re-measurements survive (SQLite: no table rebuild cascading into them), a bad source is refused;
    0003 -> 0002 drops only the new columns; and up again."""
    migrate.upgrade(empty_db_url, "0002")
    engine = make_engine(empty_db_url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text(
                "INSERT INTO tirtune_measurements (key, config, config_digest, m, n, k, dtype, template_version, "
                "outcome, ratio, created_at) VALUES ('k', '{}', 'd', 64, 64, 64, 'float16', 't', 'OK', 1.01, "
                "CURRENT_TIMESTAMP)"))
            connection.execute(sa.text(
                "INSERT INTO tirtune_remeasurements (measurement_id, key, session, rounds, outcome, ratio, created_at) "
                "SELECT id, key, 's', 5, 'OK', 1.02, CURRENT_TIMESTAMP FROM tirtune_measurements"))
        migrate.upgrade(empty_db_url, "0003")
        assert pending(empty_db_url) == columns_added(ADDED_IN_0004, ADDED_IN_0005, ADDED_IN_0006) | REKEYED_IN_0006
        with engine.begin() as connection:
            row = connection.execute(sa.text(
                "SELECT source, recording, ratio, ratio_p10, measured_at = created_at FROM tirtune_measurements"
            )).one()
            again = connection.execute(sa.text(
                "SELECT source, processes, ratio, ratio_p90 FROM tirtune_remeasurements")).one()
        assert tuple(row) == ("gpu", None, 1.01, None, True)
        assert tuple(again) == ("gpu", 1, 1.02, None)
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as connection:
            connection.execute(sa.text("UPDATE tirtune_measurements SET source = 'guess'"))
        migrate.downgrade(empty_db_url, "0002")
        with engine.connect() as connection:
            columns = {c["name"] for c in sa.inspect(connection).get_columns("tirtune_measurements")}
            assert not {"source", "recording", "measured_at", "ratio_p10", "ratio_p90"} & columns
            assert connection.execute(sa.text("SELECT count(*) FROM tirtune_remeasurements")).scalar() == 1
        migrate.upgrade(empty_db_url)
        assert migrate.current(empty_db_url) == migrate.head() and schema_diffs(empty_db_url) == []
    finally:
        engine.dispose()


def test_0004_fills_the_bytes_of_ok_rows_and_drops_only_its_columns(empty_db_url: str) -> None:
    """0003 -> 0004: OK rows get the bytes their GEMM must move and the bandwidth their time
    reached; failed rows and the process ceilings stay unknown; 0004 -> 0003 drops only its columns."""
    migrate.upgrade(empty_db_url, "0003")
    engine = make_engine(empty_db_url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text(
                "INSERT INTO tirtune_measurements (key, config, config_digest, m, n, k, dtype, template_version, "
                "outcome, time_ms, created_at) VALUES ('ok', '{}', 'd', 16, 4096, 4096, 'float16', 't', 'OK', 0.02, "
                "CURRENT_TIMESTAMP), ('bad', '{}', 'd', 16, 4096, 4096, 'float16', 't', 'TIMEOUT', NULL, "
                "CURRENT_TIMESTAMP)"))
        migrate.upgrade(empty_db_url, "0004")
        assert pending(empty_db_url) == columns_added(ADDED_IN_0005, ADDED_IN_0006) | REKEYED_IN_0006
        with engine.connect() as connection:
            rows = {r[0]: tuple(r[1:]) for r in connection.execute(sa.text(
                "SELECT key, bytes_moved, bandwidth_gbs, copy_gbs, peak_tflops FROM tirtune_measurements"))}
        need = (16 * 4096 + 4096 * 4096 + 16 * 4096) * 2
        assert rows["ok"][0] == need and rows["ok"][1] == pytest.approx(need / 0.02e-3 / 1e9)
        assert rows["ok"][2:] == (None, None) and rows["bad"] == (None, None, None, None)
        migrate.downgrade(empty_db_url, "0003")
        with engine.connect() as connection:
            columns = {c["name"] for c in sa.inspect(connection).get_columns("tirtune_measurements")}
            assert not {"bytes_moved", "bandwidth_gbs", "copy_gbs", "peak_tflops"} & columns
            assert connection.execute(sa.text("SELECT count(*) FROM tirtune_measurements")).scalar() == 2
    finally:
        engine.dispose()


def test_0005_starts_every_job_at_revision_0_and_drops_only_its_column(empty_db_url: str) -> None:
    """0004 -> 0005: existing jobs get revision 0 and the schema matches the models; an update
    through the model adds one; 0005 -> 0004 drops only the column."""
    migrate.upgrade(empty_db_url, "0004")
    engine = make_engine(empty_db_url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text(
                "INSERT INTO tirtune_jobs (m, n, k, dtype, arch, state, max_trials, study_name, trials_done, message, "
                "created_at, updated_at) VALUES (64, 64, 64, 'float16', 'sm_90a', 'QUEUED', 4, 's', 0, '', "
                "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"))
        migrate.upgrade(empty_db_url, "0005")
        assert pending(empty_db_url) == columns_added(ADDED_IN_0006) | REKEYED_IN_0006
        with engine.begin() as connection:
            assert connection.execute(sa.text("SELECT revision FROM tirtune_jobs")).scalar() == 0
            connection.execute(sa.update(Job).values(state="RUNNING"))
            assert connection.execute(sa.text("SELECT revision FROM tirtune_jobs")).scalar() == 1
        migrate.downgrade(empty_db_url, "0004")
        with engine.connect() as connection:
            assert "revision" not in {c["name"] for c in sa.inspect(connection).get_columns("tirtune_jobs")}
            assert connection.execute(sa.text("SELECT state FROM tirtune_jobs")).scalar() == "RUNNING"
    finally:
        engine.dispose()


def _insert_0005_rows(engine: sa.Engine) -> None:
    """A job and two of its trials (one OK, one TIMEOUT) and a re-measurement, as a database at
    0005 holds them."""
    with engine.begin() as connection:
        connection.execute(sa.text(
            "INSERT INTO tirtune_jobs (m, n, k, dtype, arch, state, max_trials, study_name, trials_done, message, "
            "created_at, updated_at) VALUES (64, 64, 64, 'float16', 'sm_90a', 'DONE', 4, 's', 2, '', "
            "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"))
        connection.execute(sa.text(
            "INSERT INTO tirtune_measurements (job_id, key, config, config_digest, m, n, k, dtype, template_version, "
            "outcome, ratio, created_at) VALUES ((SELECT id FROM tirtune_jobs), 'ok', '{}', 'd', 64, 64, 64, "
            "'float16', 't', 'OK', 1.01, CURRENT_TIMESTAMP), ((SELECT id FROM tirtune_jobs), 'late', '{}', 'd', "
            "64, 64, 64, 'float16', 't', 'TIMEOUT', NULL, CURRENT_TIMESTAMP)"))
        connection.execute(sa.text(
            "INSERT INTO tirtune_remeasurements (measurement_id, key, session, rounds, outcome, ratio, created_at) "
            "SELECT id, key, 's', 5, 'OK', 1.02, CURRENT_TIMESTAMP FROM tirtune_measurements WHERE key = 'ok'"))


def _indexes(engine: sa.Engine) -> set[str]:
    with engine.connect() as connection:
        return {str(i["name"]) for i in sa.inspect(connection).get_indexes("tirtune_measurements")}


def test_0006_keys_every_stored_problem_plain_and_keeps_every_row(empty_db_url: str) -> None:
    """0005 -> 0006: every stored job and trial is a plain GEMM (epilogue "none"), nothing is lost
    (re-measurements included), an INSERT that names no epilogue stores "none", the best-of-problem
    index keys the epilogue, and the schema matches the models; 0006 -> 0005 with plain rows only
    drops the column and restores the old index, rows kept."""
    migrate.upgrade(empty_db_url, "0005")
    engine = make_engine(empty_db_url)
    try:
        _insert_0005_rows(engine)
        migrate.upgrade(empty_db_url, "0006")
        assert migrate.current(empty_db_url) == "0006" and schema_diffs(empty_db_url) == []
        with engine.begin() as connection:
            assert connection.execute(sa.text("SELECT epilogue FROM tirtune_jobs")).scalars().all() == ["none"]
            trials = connection.execute(sa.text(
                "SELECT key, epilogue, outcome, ratio FROM tirtune_measurements ORDER BY key")).all()
            assert [tuple(t) for t in trials] == [("late", "none", "TIMEOUT", None), ("ok", "none", "OK", 1.01)]
            assert connection.execute(sa.text("SELECT count(*) FROM tirtune_remeasurements")).scalar() == 1
            connection.execute(sa.text(
                "INSERT INTO tirtune_measurements (key, config, config_digest, m, n, k, dtype, template_version, "
                "outcome, created_at) VALUES ('new', '{}', 'd', 8, 8, 8, 'float16', 't', 'OK', CURRENT_TIMESTAMP)"))
            assert connection.execute(sa.text(
                "SELECT epilogue FROM tirtune_measurements WHERE key = 'new'")).scalar() == "none"
        assert INDEX_0006 in _indexes(engine) and INDEX_0005 not in _indexes(engine)
        migrate.downgrade(empty_db_url, "0005")
        assert pending(empty_db_url) == columns_added(ADDED_IN_0006) | REKEYED_IN_0006
        assert INDEX_0005 in _indexes(engine) and INDEX_0006 not in _indexes(engine)
        with engine.connect() as connection:
            assert connection.execute(sa.text("SELECT count(*) FROM tirtune_measurements")).scalar() == 3
            assert connection.execute(sa.text("SELECT count(*) FROM tirtune_remeasurements")).scalar() == 1
            assert connection.execute(sa.text("SELECT trials_done FROM tirtune_jobs")).scalar() == 2
        migrate.upgrade(empty_db_url)
        assert migrate.current(empty_db_url) == migrate.head() and schema_diffs(empty_db_url) == []
    finally:
        engine.dispose()


def test_0006_downgrade_refuses_while_a_fused_problem_is_stored(empty_db_url: str) -> None:
    """0006 -> 0005 would file a fused problem's rows under the plain GEMM of its shape: refused,
    with the counts, and nothing changes; once they are deleted it goes down."""
    migrate.upgrade(empty_db_url, "0005")
    engine = make_engine(empty_db_url)
    try:
        _insert_0005_rows(engine)
        migrate.upgrade(empty_db_url, "0006")
        with engine.begin() as connection:
            connection.execute(sa.text(
                "INSERT INTO tirtune_measurements (key, config, config_digest, m, n, k, dtype, epilogue, "
                "template_version, outcome, created_at) VALUES ('fused', '{}', 'd', 64, 64, 64, 'float16', "
                "'bias+residual', 't', 'OK', CURRENT_TIMESTAMP)"))
        with pytest.raises(DbError, match=r"cannot downgrade below 0006: 0 jobs and 1 measurements have a fused"):
            migrate.downgrade(empty_db_url, "0005")
        assert migrate.current(empty_db_url) == "0006" and schema_diffs(empty_db_url) == []
        with engine.begin() as connection:
            assert connection.execute(sa.text("SELECT count(*) FROM tirtune_measurements")).scalar() == 3
            connection.execute(sa.text("DELETE FROM tirtune_measurements WHERE epilogue <> 'none'"))
        migrate.downgrade(empty_db_url, "0005")
        assert migrate.current(empty_db_url) == "0005"
    finally:
        engine.dispose()
