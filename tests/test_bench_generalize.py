"""bench/generalize.py: the model catalogue, the random draw of problems (splits, tokens, no
repeats), the report's summary figures, and a run end to end against a real `tirtune serve` that
replays H200 recordings (the problems injected: a replay can tune recorded problems only)."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bench import generalize
from bench.generalize import Drawn
from tirtune.core import Problem
from tirtune.db.models import Measurement
from tirtune.db.session import open_database
from tirtune.space.branches import check_problem
from tirtune.space.models import DecoderShape

MODELS = generalize.catalogue()
BY_NAME = {m.name: m for m in MODELS}


def test_the_catalogue_holds_at_least_twelve_models_of_five_families() -> None:
    assert len(MODELS) >= 12 and len({m.family for m in MODELS}) >= 5
    assert len({m.repo_id for m in MODELS}) == len(MODELS)
    for path in sorted(generalize.CATALOGUE.glob("*.json")):
        config = json.loads(path.read_text())
        assert {
            "_name_or_path",
            "hidden_size",
            "intermediate_size",
            "num_attention_heads",
            "num_key_value_heads",
            "torch_dtype",
        } <= set(config), path.name
        assert config["_name_or_path"].count("/") == 1, path.name
    # Spot checks against the published configs: head_dim is not always hidden / heads.
    assert BY_NAME["gemma-2-9b"].shape.head_dim == 256 and BY_NAME["mistral-nemo-12b"].shape.head_dim == 128
    assert BY_NAME["qwen2.5-7b"].shape == DecoderShape(3584, 18944, 28, 4, 128)


def test_every_split_of_every_model_gives_gemms_the_template_takes() -> None:
    for model in MODELS:
        assert generalize.splits(model.shape)[0] == 1
        for tp in generalize.splits(model.shape):
            for projection in generalize.PROJECTIONS:
                n, k = generalize.weight(model.shape, projection, tp)
                assert n >= 1 and k >= 8 and k % 8 == 0, (model.name, projection, tp)
                for m in (1, generalize.MAX_TOKENS):
                    check_problem(Problem(m, n, k, "bfloat16"))
        # Unsplit, each projection is the layer's own weight (tirtune.space.models).
        assert {p: generalize.weight(model.shape, p, 1) for p in generalize.PROJECTIONS} == model.shape.weights()


def test_splits_divide_the_heads_and_the_mlp_and_follow_vllms_kv_rule() -> None:
    assert generalize.splits(BY_NAME["llama-3-8b"].shape) == (1, 2, 4, 8)
    assert generalize.splits(BY_NAME["qwen2.5-7b"].shape) == (1, 2, 4)  # 28 heads
    assert generalize.splits(BY_NAME["phi-3-medium"].shape) == (1, 2)  # 10 kv heads: not 4, not 8
    llama = BY_NAME["llama-3-8b"].shape  # 32 heads, 8 kv heads of 128, hidden 4096, intermediate 14336
    assert generalize.weight(llama, "qkv", 2) == ((16 + 2 * 4) * 128, 4096)
    assert generalize.weight(llama, "qkv", 8) == ((4 + 2 * 1) * 128, 4096)
    assert generalize.weight(llama, "o", 4) == (4096, 8 * 128)
    assert generalize.weight(llama, "gate_up", 4) == (2 * 14336 // 4, 4096)
    assert generalize.weight(llama, "down", 8) == (4096, 14336 // 8)
    qwen = BY_NAME["qwen2.5-1.5b"].shape  # 2 kv heads: replicated, one a rank, at tp 4
    assert generalize.kv_per_rank(qwen, 4) == 1 and generalize.weight(qwen, "qkv", 4) == ((3 + 2) * 128, 1536)
    with pytest.raises(ValueError):
        generalize.weight(qwen, "qkv", 8)


def test_the_draw_is_the_seeds_and_another_seed_draws_others() -> None:
    first = generalize.draw(MODELS, 30, seed=2024)
    assert first == generalize.draw(MODELS, 30, seed=2024)
    assert first != generalize.draw(MODELS, 30, seed=2025)
    assert len({d.problem for d in first} & {d.problem for d in generalize.draw(MODELS, 30, seed=2025)}) < 5
    for d in first:
        assert d.tp in generalize.splits(d.model.shape) and d.projection in generalize.PROJECTIONS
        assert (d.problem.n, d.problem.k) == generalize.weight(d.model.shape, d.projection, d.tp)


def test_tokens_are_log_uniform_from_1_to_16384() -> None:
    rng = random.Random(3)
    tokens = [generalize.tokens(rng) for _ in range(20_000)]
    assert min(tokens) == 1 and 16_000 < max(tokens) <= generalize.MAX_TOKENS
    # P(M <= x) = ln(x + 1) / ln(16385): a quarter at most 11 (16384^(1/4)), half below 128, a quarter from 1448.
    assert sum(m <= 11 for m in tokens) / len(tokens) == pytest.approx(math.log(12) / math.log(16385), abs=0.015)
    assert sum(m < 128 for m in tokens) / len(tokens) == pytest.approx(0.5, abs=0.015)
    assert sum(m >= 1448 for m in tokens) / len(tokens) == pytest.approx(0.25, abs=0.015)


def test_a_large_draw_spreads_over_every_choice_and_holds_no_problem_twice() -> None:
    drawn = generalize.draw(MODELS, 2000, seed=7)
    tokens = [d.problem.m for d in drawn]
    assert min(tokens) == 1 and max(tokens) > 12000
    # Redrawing repeats thins the smallest M a little (fewer distinct problems there); still about a quarter.
    assert 0.22 < sum(m <= 11 for m in tokens) / len(tokens) < 0.29
    assert 0.45 < sum(m < 128 for m in tokens) / len(tokens) < 0.55
    assert 0.22 < sum(m >= 1448 for m in tokens) / len(tokens) < 0.28
    expected = len(drawn) / len(MODELS)
    assert all(0.7 * expected < c < 1.3 * expected for c in Counter(d.model.name for d in drawn).values())
    assert len(Counter(d.model.name for d in drawn)) == len(MODELS)
    assert set(Counter(d.projection for d in drawn)) == set(generalize.PROJECTIONS)
    assert set(Counter(d.tp for d in drawn)) == set(generalize.TP_SPLITS)
    assert 0.45 < sum(d.problem.dtype == "float16" for d in drawn) / len(drawn) < 0.55
    assert len({d.problem for d in drawn}) == len(drawn)


def test_a_catalogue_too_small_for_the_count_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generalize, "MAX_TOKENS", 1)  # one model, M = 1: at most 4 projections x 4 splits x 2 dtypes
    one = [BY_NAME["llama-3-8b"]]
    assert len(generalize.draw(one, 32, seed=1)) == 32
    with pytest.raises(ValueError, match="fewer than 33"):
        generalize.draw(one, 33, seed=1)


def _scored(ratio: float | None, problem: str = "16x4096x4096") -> dict[str, Any]:
    return {
        "problem": problem,
        "dtype": "float16",
        "model": "llama-3-8b",
        "projection": "o",
        "tp": 1,
        "state": "DONE",
        "ratio": ratio,
        "ratio_p10": ratio,
        "ratio_p90": ratio,
        "config": {} if ratio else None,
        "confirmed": True,
        "predicted_ratio": None,
        "first_trial_ratio": 0.9 if ratio else None,
        "template_version": "hopper-gemm/5",
        "provenance": {"gpu_name": "NVIDIA H200"},
    }


def test_the_report_states_the_summary_figures_of_the_scored_problems() -> None:
    ratios = [1.4, 0.80, 0.95, 0.969, 0.97, 1.0, 1.05, 1.1, 1.2, 1.3]
    scored = [_scored(r, f"{i + 1}x4096x4096") for i, r in enumerate(ratios)] + [_scored(None, "99x4096x4096")]
    r = generalize.report(scored, seed=77, trials=32, wall_s=10.0, started=datetime(2026, 12, 3, 9, tzinfo=UTC))
    assert {
        "date",
        "gpu",
        "seed",
        "trials_per_problem",
        "problems",
        "geomean",
        "p10",
        "worst",
        "share_below_097",
    } <= set(r)
    assert (r["date"], r["gpu"], r["seed"], r["trials_per_problem"]) == ("2026-12-03", "NVIDIA H200", 77, 32)
    assert r["geomean"] == pytest.approx(math.exp(sum(map(math.log, ratios)) / 10))
    assert r["p10"] == pytest.approx(0.1 * 0.80 + 0.9 * 0.95)  # 10th percentile, linear between 0.80 and 0.95
    assert r["worst"] == 0.80 and r["share_below_097"] == pytest.approx(0.3)  # 0.80, 0.95, 0.969; not 0.97
    assert r["scored"] == 10 and r["unmeasured"] == ["99x4096x4096 float16"] and not r["enough_problems"]
    assert r["below_0_97"] == ["2x4096x4096 float16", "3x4096x4096 float16", "4x4096x4096 float16"]
    assert r["targets_met"] == {"geomean": True, "worst": False, "share_below_097": False}
    assert r["first_trial_geomean"] == pytest.approx(0.9) and r["predicted"] == 0
    assert r["first_trial_of_best"] == pytest.approx(0.9 / r["geomean"])  # each problem's first over its best
    for p in r["problems"]:
        assert {"problem", "dtype", "model", "ratio", "ratio_p10", "ratio_p90", "config", "predicted_ratio"} <= set(p)
    text = generalize.markdown(r)
    assert "seed **77**" in text and "worst **0.800**" in text and "not met: >= 0.95" in text
    assert f"geomean 0.900, {r['first_trial_of_best']:.3f} of the job's best" in text
    assert text.startswith("# PARTIAL (the deadline passed before every job ended)")
    everything = generalize.report([_scored(1.0, f"{i + 1}x4096x4096") for i in range(30)], seed=77, trials=32,
                                   wall_s=10.0, started=datetime(2026, 12, 3, 9, tzinfo=UTC))
    assert everything["enough_problems"] and generalize.markdown(everything).startswith("# Problems nobody chose")
    everything["problems"][0]["ratio"] = None  # one job never measured: 29 scored of 30 drawn
    one_short = generalize.report(everything["problems"], seed=77, trials=32, wall_s=10.0,
                                  started=datetime(2026, 12, 3, 9, tzinfo=UTC))
    assert not one_short["enough_problems"] and one_short["unmeasured"] == ["1x4096x4096 float16"]
    assert len([line for line in text.splitlines() if line.startswith("| llama-3-8b |")]) == 11
    assert generalize.summary([_scored(None)])["geomean"] is None


def test_what_get_best_said_before_tuning_is_told_apart() -> None:
    predicted = {"kind": "predicted", "config": {"blk_m": 128}, "config_label": "128x..", "predicted_ratio": 1.02}
    assert generalize.prior_of(200, predicted) == generalize.Prior("predicted", {"blk_m": 128}, 1.02)
    assert generalize.prior_of(404, {"error": {"code": "not_found"}}) == generalize.Prior("none")
    assert generalize.prior_of(200, {"config": {"blk_m": 64}, "ratio": 1.1}) == generalize.Prior(
        "measured", {"blk_m": 64}, 1.1
    )
    assert generalize.prior_of(503, {}).kind == "http 503"


def test_a_dry_run_prints_the_draw_and_touches_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    argv = ["--dry-run", "--problems", "5", "--out-dir", str(out), "--url", "http://127.0.0.1:9"]
    assert generalize.main([*argv, "--seed", "5"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "seed 5: 5 problems" and len(printed) == 6
    assert [line.split()[-2:] for line in printed[1:]] == [
        [d.problem.shape, d.problem.dtype] for d in generalize.draw(MODELS, 5, 5)
    ]
    assert generalize.main(argv) == 0 and generalize.main(argv) == 0
    seeds = [line for line in capsys.readouterr().out.splitlines() if line.startswith("seed ")]
    assert len(seeds) == 2 and seeds[0] != seeds[1]  # drawn at run time
    assert not out.exists()


def test_refused_arguments(tmp_path: Path) -> None:
    report = tmp_path / "cut.json"
    report.write_text("{}")
    for argv in (
        ["--trials", "97"],
        ["--trials", "0"],
        ["--problems", "0"],
        ["--source", "replay"],
        ["--resume", str(tmp_path / "missing.json")],
        ["--resume", str(report), "--seed", "3"],
    ):
        with pytest.raises(SystemExit):
            generalize.main([*argv, "--dry-run", "--out-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="is not a draw's report"):  # a message, not a traceback
        generalize.main(["--resume", str(report)])


# Drawable problems that bench/data holds recordings of (Llama 3 8B: o unsplit, gate_up and o at tp 2).
RECORDED = [
    Drawn.of(BY_NAME["llama-3-8b"], "o", 1, 4096, "float16"),  # 4096x4096x4096
    Drawn.of(BY_NAME["llama-3-8b"], "gate_up", 2, 4096, "bfloat16"),  # 4096x14336x4096
    Drawn.of(BY_NAME["llama-3-8b"], "o", 2, 48, "bfloat16"),  # 48x4096x2048
]


def _run(url: str, out: Path, problems: list[Drawn]) -> tuple[dict[str, Any], str]:
    """One replayed run of `problems`: its report and markdown (the files removed after reading)."""
    code = generalize.main(
        [
            "--url",
            url,
            "--source",
            "replay",
            "--trials",
            "4",
            "--seed",
            "7",
            "--out-dir",
            str(out),
            "--deadline-s",
            "300",
        ],
        problems=problems,
    )
    assert code == 0
    [written] = sorted(out.glob("*-7.json"))
    report: dict[str, Any] = json.loads(written.read_text())
    assert written.name == f"{report['date']}-7.json"
    text = written.with_suffix(".md").read_text()
    written.unlink()
    written.with_suffix(".md").unlink()
    return report, text


def test_a_run_tunes_each_problem_through_the_service_and_writes_its_report(
    replaying_service: str, tmp_path: Path
) -> None:
    assert [d.problem.shape for d in RECORDED] == ["4096x4096x4096", "4096x14336x4096", "48x4096x2048"]
    out = tmp_path / "generalize"
    report, text = _run(replaying_service, out, RECORDED)
    assert (report["seed"], report["trials_per_problem"], report["source"]) == (7, 4, "replay")
    assert report["drawn_from_seed"] is False and report["database_at_start"] == {
        "ok_measurements": 0,
        "problems_measured": 0,
    }
    problems = report["problems"]
    assert [(p["model"], p["projection"], p["tp"], p["problem"], p["dtype"]) for p in problems] == [
        ("llama-3-8b", d.projection, d.tp, d.problem.shape, d.problem.dtype) for d in RECORDED
    ]
    sessions = open_database(f"sqlite:///{tmp_path / 'replay.db'}")
    for p in problems:
        assert p["state"] == "DONE" and p["ratio"] > 0 and p["config"] and p["ratio_p10"] <= p["ratio_p90"]
        # Before tuning, the service's answer is the cost model's prediction (from the shipped H200 prior).
        assert p["prior"] == "predicted" and p["predicted_ratio"] > 0 and p["predicted_config"]
        assert p["model_id"] == "meta-llama/Meta-Llama-3-8B"
        with sessions() as s:  # the first trial, read from the database rather than the API
            first = s.scalars(
                sa.select(Measurement)
                .where(Measurement.job_id == p["job_id"], Measurement.trial_number.is_not(None))
                .order_by(Measurement.trial_number)
            ).first()
        assert first is not None and p["first_trial_number"] == first.trial_number
        assert p["first_trial_ratio"] == pytest.approx(first.ratio) and p["first_trial_config"]
    ratios = [p["ratio"] for p in problems]
    assert report["geomean"] == pytest.approx(math.prod(ratios) ** (1 / 3)) and report["worst"] == min(ratios)
    assert report["share_below_097"] == pytest.approx(sum(r < 0.97 for r in ratios) / 3) and report["scored"] == 3
    assert report["gpu"] == problems[0]["provenance"]["gpu_name"] and report["tvm"]
    assert "REPLAYED" in text and "seed **7**" in text
    assert len([line for line in text.splitlines() if line.startswith("| llama-3-8b |")]) == 3

    # Again, on the same service: the database now holds the first run, and the problem its best.
    again, _ = _run(replaying_service, out, RECORDED[:1])
    with sessions() as s:
        ok = s.scalar(
            sa.select(sa.func.count())
            .select_from(Measurement)
            .where(Measurement.outcome == "OK", Measurement.job_id.in_([p["job_id"] for p in problems]))
        )
    assert ok and again["database_at_start"] == {"ok_measurements": ok, "problems_measured": 3}
    assert again["problems"][0]["prior"] == "measured"
    assert again["problems"][0]["measured_before_ratio"] == pytest.approx(problems[0]["ratio"])

    # The stored database scored again without measuring (a run cut short): the same bests; a
    # problem with no job is listed as not finished, never scored.
    missing = Drawn.of(BY_NAME["llama-3-8b"], "o", 1, 16, "float16")
    assert generalize.main(["--seed", "7", "--trials", "4", "--source", "replay", "--rescore",
                            str(tmp_path / "replay.db"), "--out-dir", str(out)], problems=[*RECORDED, missing]) == 0
    (partial,) = out.glob("*-7-partial.json")
    rescored = json.loads(partial.read_text())
    assert rescored["partial"] is True and rescored["drawn"] == 4 and rescored["scored"] == 3
    assert [(p["problem"], p["ratio"], p["config"]) for p in rescored["problems"]] == [
        (p["problem"], pytest.approx(p["ratio"]), p["config"]) for p in again["problems"][:1] + problems[1:]
    ]
    assert [u["problem"] for u in rescored["not_finished"]] == ["16x4096x4096"]
    assert "PARTIAL" in partial.with_suffix(".md").read_text()


def test_a_run_cut_short_is_resumed_and_scored_as_one_draw(replaying_service: str, tmp_path: Path) -> None:
    out = tmp_path / "generalize"
    base = ["--url", replaying_service, "--source", "replay", "--trials", "4", "--out-dir", str(out)]
    # Cut at once: both jobs queued, neither waited on, so the report lists them unfinished.
    generalize.main([*base, "--seed", "11", "--deadline-s", "0"], problems=RECORDED[:2])
    (cut_path,) = out.glob("*-11.json")
    cut = json.loads(cut_path.read_text())
    assert [p["problem"] for p in cut["problems"]] == ["4096x4096x4096", "4096x14336x4096"]
    assert len(cut["unfinished"]) == 2 and "PARTIAL" in cut_path.with_suffix(".md").read_text()

    # Resumed: the two stored jobs are waited on, the problem the cut run never reached is asked
    # about and queued, and the three are scored as one draw under the cut run's seed and budget.
    assert generalize.main([*base, "--resume", str(cut_path), "--deadline-s", "300"], problems=RECORDED) == 0
    (done_path,) = out.glob("*-11-resumed.json")
    done = json.loads(done_path.read_text())
    assert (done["seed"], done["trials_per_problem"], done["scored"]) == (11, 4, 3)
    assert not done["unfinished"] and not done["unmeasured"]
    assert [p["job_id"] for p in done["problems"][:2]] == [p["job_id"] for p in cut["problems"]]
    assert done["problems"][2]["job_id"] not in {p["job_id"] for p in cut["problems"]}
    assert done["problems"][2]["prior"] in ("predicted", "measured")
    assert all(p["state"] == "DONE" and p["ratio"] > 0 for p in done["problems"])
    assert done["resumed"] == {"from": cut_path.name, "cut_after_s": cut["wall_s"], "finished_before_the_cut": 0}
    assert done["wall_s"] >= cut["wall_s"] and "resumed: the run was cut" in done_path.with_suffix(".md").read_text()
    # a given service's timing settings are not this script's to name
    assert cut["measurement_protocol"] is None and done["measurement_protocol"] is None

    # A draw is never mixed from two GPU models: a cut run measured on another card is refused.
    cut["gpu"] = "Another GPU"
    other = out / "other-11.json"
    other.write_text(json.dumps(cut))
    with pytest.raises(SystemExit, match="Another GPU"):
        generalize.main([*base, "--resume", str(other), "--deadline-s", "300"], problems=RECORDED[:2])


def test_a_report_names_the_timing_protocol_only_where_the_script_knows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A service the script starts inherits its environment, so the protocol is this one's; a
    replay has none; a resumed draw names both protocols where they differ, and says which it
    does not know."""
    monkeypatch.setenv("TIRTUNE_MEASURE_MAX_REPS", "60")
    here = generalize.measured_under("gpu")
    assert here is not None and "<= 60 launches a block" in here
    assert generalize.measured_under("replay") is None
    assert generalize.resumed_under(here, here) == here
    assert generalize.resumed_under(None, None) is None
    assert generalize.resumed_under("A", "B") == "A (before the cut); B (resumed)"
    assert generalize.resumed_under(None, "B") == "not recorded (before the cut); B (resumed)"
    assert generalize.resumed_under("A", None) == "A (before the cut); not known (resumed)"
