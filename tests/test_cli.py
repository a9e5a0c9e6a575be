"""The `tirtune` command: the tune path with recorded data, `best`, and clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tirtune.cli import main
from tirtune.settings import get_settings

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "hopper-4096x4096x4096-float16.jsonl"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.setenv("TIRTUNE_CACHE_DIR", str(tmp_path / "cache"))
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def test_tune_writes_the_result_files_and_best_serves_it(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = env / "results" / "tune.json"
    assert main(["tune", "4096x4096x4096", "--trials", "6", "--replay", str(DATA), "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    for field in ("problem", "dtype", "gpu", "trials", "best_config", "best_tflops", "cublas_tflops", "ratio",
                  "driver", "cuda", "tvm", "date"):
        assert summary[field] is not None, field
    assert summary["problem"] == "4096x4096x4096" and summary["trials"] == 6
    assert summary["ratio"] == pytest.approx(summary["best_tflops"] / summary["cublas_tflops"])
    assert "| config | ratio | p10-p90 |" in out.with_suffix(".md").read_text()
    assert len(summary["remeasured"]) == 5 and summary["best_remeasured"]["outcome"] == "OK"
    assert summary["confirmed"] is True and summary["source"] == "replay"
    assert summary["database"].endswith("replay.db"), "a replay stores into the replay database"
    capsys.readouterr()
    assert main(["best", "4096x4096x4096"]) == 1, "DATABASE_URL got nothing from the replay"
    assert "nothing tuned for 4096x4096x4096 float16" in capsys.readouterr().out
    assert main(["best", "4096x4096x4096", "--source", "replay"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert best["config"] == summary["best_config"] and best["provenance"]["gpu_name"] == "NVIDIA H200"
    assert best["source"] == "replay" and best["recording"].startswith(DATA.name + " sha256:")
    assert best == summary["best"]


def test_the_result_table_is_whole_when_piped(env: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a terminal (`| cat`, a file): the table takes the width its cells need, none is cut."""
    monkeypatch.delenv("COLUMNS", raising=False)
    out = env / "tune.json"
    assert main(["tune", "4096x4096x4096", "--trials", "6", "--replay", str(DATA), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "\u2026" not in printed, printed  # rich's ellipsis: a cell cut short
    lines = printed.splitlines()
    for row in json.loads(out.read_text())["top"]:
        whole = (row["label"], f"{row['ratio']:.3f} ({row['ratio_p10']:.3f}-{row['ratio_p90']:.3f})")
        assert any(all(cell in line for cell in whole) for line in lines), (whole, printed)


@pytest.mark.parametrize("argv,needle", [
    (["tune", "4096x4096"], "bad shape"),
    (["tune", "128x128x4001"], "multiple of 8"),
    (["tune", "128x128x128", "--dtype", "int8"], "unsupported dtype"),
    (["tune", "128x128x128", "--trials", "0"], "--trials"),
    (["best", "0x1x1"], "out of range"),
    (["tune", "128x128x128", "--epilogue", "bias+gelu"], "unknown epilogue op 'gelu'"),
    (["best", "64x64x64", "--epilogue", "bias+Bias"], "epilogue op 'bias' given more than once"),
    (["tune", "--shapes", "shapes.txt", "--epilogue", "bias"], "--epilogue and --scaling take one shape"),
    (["tune", "128x128x128", "--epilogue", "bias+out_float16"], "out_float16 picks D's dtype for FP8 operands"),
])
def test_bad_input_is_a_message_not_a_traceback(env: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                                needle: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_best_says_when_nothing_is_tuned(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["best", "64x64x64"]) == 1
    assert "nothing tuned for 64x64x64 float16" in capsys.readouterr().out


def test_best_only_reads_it_creates_no_database(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["best", "64x64x64"]) == 1
    assert main(["best", "64x64x64", "--source", "replay"]) == 1
    assert "nothing replayed for 64x64x64 float16" in capsys.readouterr().out
    assert sorted(p.name for p in env.iterdir()) == [], "DATABASE_URL's file was created"
    assert not Path(get_settings().replay_database_url.removeprefix("sqlite:///")).exists()


def test_best_after_a_replay_says_replayed_results_exist_and_how_to_see_them(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tune", "4096x4096x4096", "--trials", "4", "--replay", str(DATA)]) == 0
    command = "tirtune best 4096x4096x4096 --dtype float16 --source replay"
    assert f"`{command}`" in capsys.readouterr().err  # what the tune says serves them
    assert main(["best", "4096x4096x4096"]) == 1  # DATABASE_URL's: the replay went to the replay database
    said = capsys.readouterr().out
    assert "nothing tuned for 4096x4096x4096 float16" in said and "replayed figures exist" in said, said
    assert f"`{command}`" in said, said
    assert main(command.split()[1:]) == 0  # the command it names works
    assert json.loads(capsys.readouterr().out)["source"] == "replay"


def test_export_of_a_database_that_does_not_exist_creates_none(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(env / "out")]) == 2
    err = capsys.readouterr().err
    assert "no database at sqlite:///" in err and "nothing is tuned to export" in err, err
    assert sorted(p.name for p in env.iterdir()) == []


def _new_user(home: Path) -> dict[str, str]:
    """The environment of someone who just installed tirtune: no settings, no Ray token, no GPU
    (CUDA_VISIBLE_DEVICES="" hides any the machine has), and `home` as the home directory."""
    home.mkdir()
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("TIRTUNE_", "RAY_")) and name != "DATABASE_URL"}
    return {**env, "HOME": str(home), "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}


def test_without_a_gpu_tune_says_so_at_once_and_writes_nothing(tmp_path: Path) -> None:
    """The refusal comes before Ray starts or a database is made: nothing lands in the home
    directory (a local Ray would leave ~/.ray/auth_token, the default database ~/.tirtune)."""
    home = tmp_path / "home"
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tirtune", "tune", "4096x4096x4096", "--trials", "4"], cwd=ROOT,
                          env=_new_user(home), capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - began
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("tirtune: error: no NVIDIA GPU visible") and "--replay" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # no warnings from a Ray, no traceback
    assert elapsed < 2.0
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []


def test_without_a_gpu_best_suggests_no_tune_that_would_fail(env: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert main(["best", "64x64x64"]) == 1
    said = capsys.readouterr().out
    assert "no NVIDIA GPU visible" in said and "--replay" in said and "run: tirtune tune" not in said, said


def test_best_of_a_problem_tune_would_refuse_says_why(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["best", "64x64x4095"]) == 1
    said = capsys.readouterr().out
    assert "nothing tuned for 64x64x4095 float16" in said and "multiple of 8" in said
    assert "tirtune tune would refuse it" in said and "run: tirtune tune" not in said, said


@pytest.mark.parametrize("argv,worker", [(["serve"], True), (["serve", "--no-worker"], False)])
def test_serve_hands_the_app_the_job_service_unless_told_not_to(
    env: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], worker: bool
) -> None:
    """The CLI wires the tuner's JobService into the app (the API never imports the tuner)."""
    import threading

    import uvicorn
    from fastapi.testclient import TestClient

    seen: list[bool] = []

    def run(app: object, **_: object) -> None:  # uvicorn.run, minus the server: the app's lifespan
        with TestClient(app) as client:  # type: ignore[arg-type]
            assert client.get("/healthz").status_code == 200
            seen.append(any(t.name.startswith("tirtune-jobs") and t.is_alive() for t in threading.enumerate()))

    monkeypatch.setattr(uvicorn, "run", run)
    assert main(argv) == 0
    assert seen == [worker]
    # stopped with the app
    assert not any(t.name.startswith("tirtune-jobs") and t.is_alive() for t in threading.enumerate())


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "api.example.org"])
def test_serve_refuses_an_open_non_loopback_api(env: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    monkeypatch.delenv("TIRTUNE_API_TOKEN", raising=False)
    get_settings.cache_clear()
    assert main(["serve", "--host", host, "--no-worker"]) == 2  # before anything listens
    err = capsys.readouterr().err
    assert f"refusing to serve {host} without TIRTUNE_API_TOKEN" in err and "--allow-no-token" in err


def test_serve_names_a_timing_setting_out_of_range(env: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIRTUNE_MEASURE_FLUSH_L2", "0.5")
    assert main(["serve", "--no-worker"]) == 2  # before anything listens
    assert "at least the L2" in capsys.readouterr().err


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True),
                                                ("[::1]", True), ("localhost", True), ("0.0.0.0", False),
                                                ("10.0.0.1", False), ("example.org", False)])
def test_which_hosts_are_loopback(host: str, loopback: bool) -> None:
    from tirtune.cli import _loopback

    assert _loopback(host) is loopback


@pytest.mark.parametrize(("variable", "value", "says"), [
    ("TIRTUNE_CONCURRENT_JOBS", "0", "greater than or equal to 1"),
    ("TIRTUNE_REMEASURE_PROCESSES", "many", "valid integer"),
    ("TIRTUNE_BUILD_PATH", "ptx", "'so' or 'cubin'"),
])
def test_a_bad_setting_is_one_line_naming_the_variable(env: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], variable: str,
                                                       value: str, says: str) -> None:
    monkeypatch.setenv(variable, value)
    get_settings.cache_clear()
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tirtune: error: bad setting {variable}={value!r}: ") and says in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_fused_problem_is_tuned_and_served_apart_from_the_plain_gemm(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The recording holds the plain GEMM only: a replay refuses the fused problem (nothing
    recorded for it) and `best` does not answer it with the plain GEMM's figures."""
    assert main(["tune", "4096x4096x4096", "--trials", "4", "--replay", str(DATA)]) == 0
    capsys.readouterr()
    assert main(["tune", "4096x4096x4096", "--epilogue", "bias", "--trials", "4", "--replay", str(DATA)]) == 2
    err = capsys.readouterr().err
    assert "4096x4096x4096 float16 epilogue=bias cannot be tuned" in err and "Traceback" not in err, err
    assert main(["best", "4096x4096x4096", "--source", "replay"]) == 0
    assert json.loads(capsys.readouterr().out)["epilogue"] == "none"
    assert main(["best", "4096x4096x4096", "--epilogue", "bias", "--source", "replay"]) == 1
    said = capsys.readouterr().out
    assert said.startswith("nothing replayed for 4096x4096x4096 float16 epilogue=bias yet"), said
    assert "tirtune tune 4096x4096x4096 --dtype float16 --epilogue bias" in said, said
