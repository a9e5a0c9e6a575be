"""`tirtune db upgrade|current` say which database they touched and follow the settings the
service uses (the replay database under TIRTUNE_REPLAY, or --database); a database behind the code
is named, with the command that migrates it, in one line and no traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from tirtune.cli import main
from tirtune.db import migrate
from tirtune.settings import get_settings

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def replaying(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """TIRTUNE_REPLAY set; DATABASE_URL and the replay database two SQLite files not yet made."""
    gpu, replay = tmp_path / "gpu.db", tmp_path / "replay.db"
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{gpu}")
    monkeypatch.setenv("TIRTUNE_REPLAY_DATABASE_URL", f"sqlite:///{replay}")
    monkeypatch.setenv("TIRTUNE_REPLAY", str(ROOT / "bench" / "data"))
    get_settings.cache_clear()
    yield gpu, replay
    get_settings.cache_clear()


def test_db_commands_follow_the_replay_setting_and_name_the_database(
    replaying: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    gpu, replay = replaying
    assert main(["db", "current"]) == 0
    said = capsys.readouterr().out
    assert f"sqlite:///{replay}" in said and "the replay database" in said and "no database" in said, said
    assert not replay.exists(), "current only reads"
    assert main(["db", "upgrade"]) == 0
    said = capsys.readouterr().out
    assert f"sqlite:///{replay}" in said and f"to {migrate.head()}" in said, said
    assert migrate.current(f"sqlite:///{replay}") == migrate.head() and not gpu.exists()
    assert main(["db", "current"]) == 0
    assert f"sqlite:///{replay} (the replay database" in (said := capsys.readouterr().out), said
    assert f"revision {migrate.head()}" in said
    assert main(["db", "upgrade", "--database", f"sqlite:///{gpu}"]) == 0
    assert f"sqlite:///{gpu}:" in capsys.readouterr().out and migrate.current(f"sqlite:///{gpu}") == migrate.head()


def test_an_unreachable_database_is_one_line(pg_admin_url: URL, capsys: pytest.CaptureFixture[str]) -> None:
    missing = pg_admin_url.set(database="tirtune_no_such_database").render_as_string(hide_password=False)
    assert main(["db", "current", "--database", missing]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tirtune: error: cannot connect to database postgresql+psycopg://"), err
    assert "tirtune_no_such_database" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_serve_on_an_unmigrated_replay_database_names_it_and_the_command_that_migrates_it(
    empty_pg_url: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "TIRTUNE_REPLAY": str(ROOT / "bench" / "data"), "TIRTUNE_REPLAY_DATABASE_URL": empty_pg_url,
           "DATABASE_URL": f"sqlite:///{tmp_path / 'gpu.db'}", "HOME": str(home)}
    served = subprocess.run([sys.executable, "-m", "tirtune", "serve", "--port", "0"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    output = served.stdout + served.stderr
    assert served.returncode == 2 and "Traceback" not in output, output
    assert served.stderr.startswith("tirtune: error: database ") and empty_pg_url in served.stderr, output
    hint = re.search(r"`tirtune (db upgrade[^`]*)`", served.stderr)
    assert hint is not None, output
    done = subprocess.run([sys.executable, "-m", "tirtune", *hint[1].split()], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and empty_pg_url in done.stdout, done.stdout + done.stderr
    assert migrate.current(empty_pg_url) == migrate.head()  # the hint migrated the database that needed it
    assert not (tmp_path / "gpu.db").exists() and list(home.iterdir()) == []
