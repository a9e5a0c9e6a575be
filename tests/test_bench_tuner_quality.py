"""bench/tuner_quality.py: trials to within 2% of a reference, the percentiles, and a run end to
end against a real `tirtune serve` that replays H200 recordings (a draw of recorded problems,
its trials table from its database, then the reference runs)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench import generalize, suite_trials, tuner_quality
from bench.generalize import Drawn
from bench.tuner_quality import markdown, measured_trials, p90, summary, trials_to

BY_NAME = {m.name: m for m in generalize.catalogue()}


def test_trials_to_counts_measured_trials_until_one_is_within_two_percent() -> None:
    assert trials_to([0.5, None, 0.97, 1.0], 1.0) == 4  # 0.97 < 0.98 x 1.0
    assert trials_to([0.5, None, 0.97, 1.0], 0.98) == 3  # 0.97 >= 0.98 x 0.98
    assert trials_to([0.5, None, 0.97, 0.979], 1.0) is None
    assert trials_to([], 1.0) is None


def test_refusals_are_left_out_and_failures_count_as_trials() -> None:
    rows = [
        {"problem": "8x8x8", "dtype": "float16", "trial": "2", "outcome": "OK", "ratio": "0.9"},
        {"problem": "8x8x8", "dtype": "float16", "trial": "0", "outcome": "OK", "ratio": "0.5"},
        {"problem": "8x8x8", "dtype": "float16", "trial": "1", "outcome": "INVALID", "ratio": ""},
        {"problem": "8x8x8", "dtype": "float16", "trial": "3", "outcome": "WRONG", "ratio": ""},
        {"problem": "8x8x8", "dtype": "bfloat16", "trial": "0", "outcome": "OK", "ratio": "1.0"},
    ]
    assert measured_trials(rows, "8x8x8", "float16") == [0.5, 0.9, None]


def test_percentiles_interpolate_and_never_counts_beyond_the_budget() -> None:
    assert p90([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]) == pytest.approx(9.1)
    assert p90([4]) == 4
    problems = [
        {"trials_to_2pct": 1, "predicted_ratio": 0.9, "best_ratio": 1.0},
        {"trials_to_2pct": None, "predicted_ratio": 0.5, "best_ratio": 1.0},
        {"trials_to_2pct": 5, "predicted_ratio": 1.0, "best_ratio": 1.0},
    ]
    figures = summary(problems, 32)
    assert figures["trials_to_2pct_median"] == 5 and figures["never_within_2pct"] == 1
    assert figures["trials_to_2pct_p90"] == pytest.approx(5 + 0.8 * 28)  # 33 stands for "never"
    assert figures["top1_of_best_geomean"] == pytest.approx((0.9 * 0.5 * 1.0) ** (1 / 3))
    assert figures["targets_met"] == {"trials_to_2pct_median": True, "trials_to_2pct_p90": True,
                                      "top1_of_best_geomean": False}


def test_refused_arguments(tmp_path: Path) -> None:
    draw, trials = tmp_path / "d.json", tmp_path / "t.csv"
    draw.write_text("{}")
    trials.write_text("")
    for argv in (["--draw", str(tmp_path / "none.json"), "--trials-csv", str(trials)],
                 ["--draw", str(draw), "--trials-csv", str(trials), "--problems", "0"],
                 ["--draw", str(draw), "--trials-csv", str(trials), "--source", "replay"]):
        with pytest.raises(SystemExit):
            tuner_quality.main(argv)


def test_a_run_times_each_chosen_problem_again_and_counts_the_draws_trials(
    replaying_service: str, tmp_path: Path
) -> None:
    recorded = [Drawn.of(BY_NAME["llama-3-8b"], "o", 1, 4096, "float16"),
                Drawn.of(BY_NAME["llama-3-8b"], "o", 2, 48, "bfloat16")]
    out = tmp_path / "out"
    assert generalize.main(["--url", replaying_service, "--source", "replay", "--trials", "4", "--seed", "7",
                            "--out-dir", str(out), "--deadline-s", "300"], problems=recorded) == 0
    [draw] = sorted(out.glob("*-7.json"))
    table = out / "trials.csv"
    assert suite_trials.main([str(tmp_path / "replay.db"), "--out", str(table)]) == 0
    code = tuner_quality.main(["--draw", str(draw), "--trials-csv", str(table), "--problems", "2", "--trials", "6",
                               "--seed", "3", "--url", replaying_service, "--source", "replay",
                               "--out-dir", str(out), "--deadline-s", "300"])
    assert code == 0
    [written] = sorted(out.glob("tuner-quality-*.json"))
    result = json.loads(written.read_text())
    assert result["seed"] == 3 and result["draw_seed"] == 7 and result["trials"] == 6 and result["scored"] == 2
    rows = list(csv.DictReader(table.open()))
    drawn = {(p["problem"], p["dtype"]): p for p in json.loads(draw.read_text())["problems"]}
    assert {(p["problem"], p["dtype"]) for p in result["problems"]} == set(drawn)
    for p in result["problems"]:
        ratios = [float(r["ratio"]) for r in sorted(rows, key=lambda r: int(r["trial"]))
                  if (r["problem"], r["dtype"]) == (p["problem"], p["dtype"]) and r["outcome"] == "OK"]
        assert p["best_ratio"] > 0 and p["draw_trials_measured"] >= len(ratios) > 0
        assert p["best_tflops"] > 0 and p["best_cublas_tflops"] > 0
        expected = next((i for i, r in enumerate(ratios, 1) if r >= 0.98 * p["best_ratio"]), None)
        assert p["trials_to_2pct"] == expected  # every trial of a replay is OK: the two counts agree
        assert p["predicted_ratio"] == pytest.approx(drawn[(p["problem"], p["dtype"])]["first_trial_ratio"])
    assert "Tuner quality" in written.with_suffix(".md").read_text()


def test_a_problem_without_a_reference_is_shown_unscored_not_never() -> None:
    """A 96-trial run that gave no best by the deadline has nothing to compare with: its row says
    "-" and the header counts it apart, where a job that missed a reference says "never"."""
    problems = [
        {"problem": "8x8x8", "dtype": "float16", "trials_to_2pct": None, "predicted_ratio": 0.9, "best_ratio": 1.0},
        {"problem": "9x9x9", "dtype": "float16", "trials_to_2pct": None, "predicted_ratio": 0.9, "best_ratio": None,
         "error": "nothing tuned yet"},
    ]
    report = {"started_at": "t", "gpu": "g", "driver": "d", "torch": "t", "template_version": "v", "draw": "x.json",
              "draw_seed": 1, "draw_trials": 32, "seed": 2, "trials": 96, "wall_s": 1.0, "problems": problems,
              **summary(problems, 32)}
    text = markdown(report)
    assert "| 8x8x8 | float16 | never |" in text
    assert "| 9x9x9 | float16 | - |" in text
    assert "never within 2%: 1 of 1 scored (1 without a 96-trial best by the deadline: not scored)" in text


def test_a_draw_from_another_gpu_model_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The draw's trials are ratios on its own card: a reference from another card's cuBLAS is
    refused with the reason, before a service starts."""
    draw, trials = tmp_path / "d.json", tmp_path / "t.csv"
    draw.write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3", "problems": [
        {"problem": "8x8x8", "dtype": "float16", "ratio": 1.0}]}))
    trials.write_text("problem,dtype,trial,outcome,ratio\n")
    monkeypatch.setattr(generalize, "visible_gpu", lambda: "NVIDIA H200")
    with pytest.raises(SystemExit, match="measured on NVIDIA H100 80GB HBM3, this machine has NVIDIA H200"):
        tuner_quality.main(["--draw", str(draw), "--trials-csv", str(trials), "--out-dir", str(tmp_path)])
    assert not list(tmp_path.glob("tuner-quality-*"))
