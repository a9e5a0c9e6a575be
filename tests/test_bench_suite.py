"""bench/suite.py end to end against a real `tirtune serve` subprocess that replays H200 recordings:
jobs queued by POST /tune, waited for, scored by GET /best; the report's fields and geomean.
(On the GPU host the script starts its own service and scores GPU figures; here --source replay.)"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from bench import suite
from tirtune.db.models import Measurement
from tirtune.db.session import open_database


def test_the_suite_names_twenty_problems_fp16_first() -> None:
    chosen = suite.problems()
    assert len(chosen) == 20 and [d for _, d, _ in chosen[:10]] == ["float16"] * 10
    assert {s for s, _, _ in chosen} >= {"16x4096x4096", "4000x4000x4000", "3000x5000x2000"}
    assert suite.problems(["16x4096x4096:bfloat16", "1024x1024x1024"]) == [
        ("1024x1024x1024", "float16", "square, fewer tiles than SMs"),
        ("1024x1024x1024", "bfloat16", "square, fewer tiles than SMs"),
        ("16x4096x4096", "bfloat16", "decode, memory-bound"),
    ]


def test_a_trial_budget_over_64_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        suite.main(["--trials", "65", "--out", str(tmp_path / "s")])


def test_the_suite_runs_through_post_tune_and_scores_with_get_best(replaying_service: str, tmp_path: Path) -> None:
    out = tmp_path / "suite"
    code = suite.main(["--url", replaying_service, "--trials", "4", "--source", "replay", "--out", str(out),
                       "--only", "4096x4096x4096:float16", "8192x8192x1024:float16", "--deadline-s", "300"])
    report = json.loads(out.with_suffix(".json").read_text())
    assert code == 0 and report["source"] == "replay" and report["trials_per_problem"] == 4
    assert [(p["problem"], p["dtype"]) for p in report["problems"]] == [
        ("4096x4096x4096", "float16"), ("8192x8192x1024", "float16")]
    for p in report["problems"]:
        assert {"problem", "dtype", "config", "ratio", "ratio_p10", "ratio_p90", "tflops", "cublas_tflops",
                "roofline_fraction"} <= set(p)
        assert p["state"] == "DONE" and p["ratio"] > 0 and p["config"]
    first, second = (p["ratio"] for p in report["problems"])
    assert report["geomean"] == pytest.approx(math.sqrt(first * second))
    assert {"date", "gpu", "driver", "cuda", "tvm", "torch", "template_version", "geomean"} <= set(report)
    # The versions come from the measurements' provenance (the H200 run printed "TVM None, torch None").
    provenance = report["problems"][0]["provenance"]
    assert report["tvm"] == provenance["tvm_version"] and report["torch"] == provenance["torch_version"]
    assert report["tvm"]
    assert "REPLAYED" in out.with_suffix(".md").read_text()
    assert report["unfinished"] == [] and "scored before their job ended" not in out.with_suffix(".md").read_text()


def test_a_problem_scored_before_its_job_ended_is_named_so() -> None:
    """A deadline-cut run (bench/results/suite/2026-12-01-ragged-peeled-starts.md: three of four jobs
    still re-measuring at the
    deadline) must not read as a finished one: the report lists the unfinished jobs and the
    figures that are a trial's, not a re-measurement's, and the table shows both per problem."""
    done = {"problem": "4000x4000x4000", "dtype": "float16", "class": "ragged", "state": "DONE", "ratio": 0.977,
            "confirmed": True, "template_version": "hopper-gemm/5", "provenance": {}}
    cut = {**done, "problem": "3000x5000x2000", "state": "RUNNING", "ratio": 1.004, "confirmed": False}
    r = suite.report([done, cut], 32, 170.0)
    assert r["unfinished"] == ["3000x5000x2000 float16"] and r["not_remeasured"] == ["3000x5000x2000 float16"]
    text = suite.markdown(r)
    assert "scored before their job ended (the deadline passed): 3000x5000x2000 float16" in text
    rows = [line for line in text.splitlines() if line.startswith("| 3000x5000x2000")]
    assert len(rows) == 1 and "| RUNNING |" in rows[0] and "| no |" in rows[0]
    assert "| DONE |" in next(line for line in text.splitlines() if line.startswith("| 4000x4000x4000"))


def test_the_deadline_counts_from_the_scripts_start() -> None:
    """A GPU host's queue step kills a script at its limit, so `--deadline-s` must bound the whole
    run, not only the waiting after the jobs are queued (a draw that spent over a minute asking
    for predictions was killed still waiting, its report lost:
    bench/results/generalize/2026-12-07-2439082570-h100-partial.md). The service here answers
    the job API only, every job still running."""
    polls: list[str] = []

    def running(request: httpx.Request) -> httpx.Response:
        polls.append(request.url.path)
        return httpx.Response(200, json={"state": "RUNNING", "trials_done": 3, "message": ""})

    with httpx.Client(transport=httpx.MockTransport(running), base_url="http://service") as client:
        jobs = [{"shape": "4096x4096x4096", "dtype": "float16", "class": "", "job_id": 7}]
        suite.wait(client, jobs, 5.0, since=time.monotonic() - 6.0)  # began 6 s ago: already past
        assert polls == [] and "state" not in jobs[0]
        suite.wait(client, jobs, 0.5)  # from the call: polled until the deadline, left unfinished
        assert polls and set(polls) == {"/jobs/7"} and jobs[0]["state"] == "RUNNING"


def test_a_sigterm_ends_the_wait_and_not_the_script() -> None:
    """A queue step cut at its limit gets a SIGTERM: the script must stop waiting and go on to
    score, report and stop its service (which runs in a session of its own and would otherwise
    keep tuning on the GPU into the next step), not end at once. The job API answers here, every
    job still running; the signal is real."""

    def running(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"state": "RUNNING", "trials_done": 3, "message": ""})

    before = signal.getsignal(signal.SIGTERM)
    with httpx.Client(transport=httpx.MockTransport(running), base_url="http://service") as client:
        jobs = [{"shape": "4096x4096x4096", "dtype": "float16", "class": "", "job_id": 7}]
        with suite.stop_on_sigterm() as stop:
            timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
            timer.start()
            began = time.monotonic()
            suite.wait(client, jobs, 60.0)
            timer.join()
            assert stop.is_set() and time.monotonic() - began < 10 and jobs[0]["state"] == "RUNNING"
    assert signal.getsignal(signal.SIGTERM) == before and not stop.is_set()


def test_suite_trials_names_where_each_measured_trial_came_from(replaying_service: str, tmp_path: Path) -> None:
    """bench/suite_trials.py over the replaying service's database: one row per measurement of the
    job's trials, the origin read off its Optuna trial (the first ask is the starts: the cost
    model's first picks, over the recorded configs; after them its picks among the best's
    neighbours and its ranked pool, and in the job's last trials the best's own neighbours), and the
    summary's count of non-start bests."""
    from bench import suite_trials

    code = suite.main(["--url", replaying_service, "--trials", "16", "--source", "replay", "--out",
                       str(tmp_path / "suite"), "--only", "4096x4096x4096:float16", "--deadline-s", "300"])
    assert code == 0
    database = tmp_path / "replay.db"
    rows = suite_trials.trials(f"sqlite:///{database}")
    sessions = open_database(f"sqlite:///{database}")
    with sessions() as s:
        measured = s.scalar(sa.select(sa.func.count()).select_from(Measurement)
                            .where(Measurement.job_id.is_not(None), Measurement.trial_number.is_not(None)))
    assert len(rows) == measured and {r.problem for r in rows} == {"4096x4096x4096"}
    assert {r.epilogue for r in rows} == {"none"}
    assert {r.origin for r in rows} <= set(suite_trials.ORIGINS)
    by_trial = sorted(rows, key=lambda r: r.trial)
    assert [r.origin for r in by_trial[:4]] == ["start"] * 4
    assert any(r.origin in ("neighbour", "model", "refine") for r in rows)
    # The refining end: only among the job's last REFINE_LAST proposals.
    from tirtune.tuner.optuna_proposer import REFINE_LAST

    assert all(r.trial >= 16 - REFINE_LAST for r in rows if r.origin == "refine")
    out = tmp_path / "trials.csv"
    assert suite_trials.main([str(database), "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == len(rows) + 1
    assert out.read_text().splitlines()[0].endswith(",epilogue")
    assert suite_trials.main([str(tmp_path / "missing.db")]) == 2


def test_suite_trials_tells_two_epilogues_of_one_shape_apart() -> None:
    """Two FP8 jobs of one shape under two scalings are two jobs in the summary, each with its own best."""
    from bench import suite_trials

    def row(trial: int, ratio: float, epilogue: str) -> suite_trials.Row:
        return suite_trials.Row("512x4096x14336", "float8_e4m3fn", trial, "start", "c", "OK", ratio, 1.0, 1.0, epilogue)

    lines = suite_trials.summary([row(0, 0.7, "scale_a+scale_b"), row(0, 0.9, "scale_row+scale_col")])
    assert lines[0].startswith("512x4096x14336 float8_e4m3fn scale_a+scale_b: best 0.700")
    assert lines[1].startswith("512x4096x14336 float8_e4m3fn scale_row+scale_col: best 0.900")
    assert lines[-1] == "0 of 2 jobs' best trial was not a starting point"
