"""`tirtune tune --shapes FILE` and `tirtune tune-model`: several problems as one batch of jobs, one
progress display, one summary table; refusals before anything starts. Replayed H200 data stands in
for the GPU (the service's own replay runner, real Ray, real SQLite)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tirtune.cli import main
from tirtune.core import Problem, SpaceError
from tirtune.db import open_database, repo, transaction
from tirtune.settings import get_settings
from tirtune.tuner.batch_command import Named, parse_shapes

DATA = Path(__file__).resolve().parents[1] / "bench" / "data"


def test_a_shapes_file() -> None:
    text = """# the model's GEMMs
    qkv 16x4608x3584:bfloat16
    1000x1000x1000          # default dtype
    4096x4096x4096 bf16
    again 1000x1000x1000:float16
    """
    assert parse_shapes(text) == [Named("qkv", Problem(16, 4608, 3584, "bfloat16")),
                                  Named("1000x1000x1000", Problem(1000, 1000, 1000)),
                                  Named("4096x4096x4096", Problem(4096, 4096, 4096, "bfloat16"))]
    with pytest.raises(SpaceError, match="line 1"):
        parse_shapes("4096x4096\n")
    with pytest.raises(SpaceError, match="no problem"):
        parse_shapes("# nothing\n")


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.setenv("TIRTUNE_CACHE_DIR", str(tmp_path / "cache"))
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def test_tune_shapes_runs_one_batch_and_prints_one_table(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shapes = env / "shapes.txt"
    shapes.write_text("square 1000x1000x1000\nwide 4096x14336x4096:bfloat16\n")
    out = env / "batch.json"
    database = f"sqlite:///{env / 'replay.db'}"
    assert main(["tune", "--shapes", str(shapes), "--trials", "3", "--replay", str(DATA), "--database", database,
                 "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert [(r["name"], r["shape"], r["dtype"], r["state"]) for r in summary["problems"]] == [
        ("square", "1000x1000x1000", "float16", "DONE"), ("wide", "4096x14336x4096", "bfloat16", "DONE")]
    assert all(r["config"] is not None and r["ratio"] > 0 and r["trials"] == 3 for r in summary["problems"])
    assert summary["source"] == "replay"
    printed = capsys.readouterr().out
    assert printed.count("2 problems: the best of each job") == 1 and "square" in printed and "wide" in printed
    for r in summary["problems"]:  # piped: one line a problem, no cell cut
        whole = (r["name"], r["config_label"], f"{r['ratio']:.3f} ({r['ratio_p10']:.3f}-{r['ratio_p90']:.3f})")
        assert any(all(cell in line for cell in whole) for line in printed.splitlines()), (whole, printed)
    # what the batch names is what `tirtune best` serves
    assert main(["best", "1000x1000x1000", "--source", "replay", "--database", database]) == 0
    assert json.loads(capsys.readouterr().out)["key"] == summary["problems"][0]["key"]


def test_tune_model_refuses_before_anything_starts(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = env / "config.json"
    config.write_text(json.dumps({"hidden_size": 4096, "intermediate_size": 7168, "num_attention_heads": 32,
                                  "num_key_value_heads": 8, "torch_dtype": "bfloat16"}))
    database = f"sqlite:///{env / 'replay.db'}"
    # gate_up@4096 (4096x14336x4096 bf16) was recorded, qkv@4096 was not: nothing is queued
    assert main(["tune-model", str(config), "--tokens", "4096", "--trials", "2", "--replay", str(DATA),
                 "--database", database]) == 2
    assert "4096x6144x4096" in capsys.readouterr().err
    with transaction(open_database(database)) as s:
        assert repo.count_jobs(s) == 0
    assert main(["tune-model", str(config), "--tokens", "x"]) == 2
    # a scaling quantizes an FP8 layer: asked of a bf16 one, it is a message, and nothing is queued
    assert main(["tune-model", str(config), "--tokens", "16", "--scaling", "rowcol", "--database", database]) == 2
    assert "--scaling rowcol quantizes an FP8 layer: it needs --dtype float8_e4m3fn" in capsys.readouterr().err
    assert main(["tune-model", str(config), "--tokens", "16", "--dtype", "float8_e4m3fn", "--scaling", "rows",
                 "--database", database]) == 2
    assert "unknown scaling 'rows'" in capsys.readouterr().err
    with transaction(open_database(database)) as s:
        assert repo.count_jobs(s) == 0


def test_a_fused_problem_of_a_batch_reports_its_own_best(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A batch's summary reads each job's best for the job's own problem, its epilogue included:
    a fused problem's trials are stored under it, so a lookup of the plain GEMM found none."""
    from tirtune.tuner.batch_command import run_batch

    recording = env / "fused.jsonl"
    with recording.open("w") as out:
        for line in (DATA / "hopper-gemm-3-1000x1000x1000-float16.jsonl").read_text().splitlines():
            record = json.loads(line)
            record["problem"]["epilogue"] = "residual"
            out.write(json.dumps(record) + "\n")
    fused = Problem.parse("1000x1000x1000", "float16", "residual")
    summary = run_batch(get_settings(), [Named("o@1000", fused)], trials=3, time_s=None, replay=recording,
                        database_url=f"sqlite:///{env / 'fused.db'}")
    [row] = summary["problems"]
    assert (row["shape"], row["epilogue"], row["state"], row["trials"]) == ("1000x1000x1000", "residual", "DONE", 3)
    assert row["config"] is not None and row["ratio"] > 0, row
    printed = capsys.readouterr().out
    assert "1000x1000x1000 float16 epilogue=residual" in printed, printed
