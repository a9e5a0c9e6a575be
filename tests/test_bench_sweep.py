"""The correctness sweep's summary (bench/record_space.py --summary): counts by kind, wrong results
never hidden, the largest error of the correct ones."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from bench import best_vs_cublas, record_space, tuner_study
from tirtune.core import Candidate, Outcome, RunResult, Stack
from tirtune.space import HOPPER, Problem
from tirtune.space.hopper.knobs import config as hopper_config

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _result(
    problem: Problem, outcome: Outcome, ms: float | None = None, err: float | None = None, blk_n: int = 128
) -> RunResult:
    c = Candidate(hopper_config(blk_n=blk_n), problem, HOPPER.template_version)
    return RunResult(c, outcome, time_ms=ms, cublas_ms=0.2 if ms else None, rel_error=err)


def test_the_sweep_summary_counts_outcomes_and_wrong_results(tmp_path: Path) -> None:
    big, ragged = Problem(4096, 4096, 4096), Problem(1000, 1000, 1000)
    results = {
        big: [
            _result(big, Outcome.OK, 0.25, 2e-4),
            _result(big, Outcome.OK, 0.2, 3e-4, blk_n=256),
            _result(big, Outcome.COMPILE_ERROR),
        ],
        ragged: [_result(ragged, Outcome.OK, 0.1, 1e-4), _result(ragged, Outcome.WRONG_RESULT, err=0.5)],
    }
    prefix = tmp_path / "sweep"
    record_space.write_summary(prefix, results, Stack("NVIDIA H200", "580", "13.0", "0.27").to_json(), 12.0)
    report = json.loads(prefix.with_suffix(".json").read_text())
    assert report["configs"] == 5 and report["wrong"] == 1
    first, second = report["problems"]
    assert first["outcomes"] == {"OK": 2, "COMPILE_ERROR": 1} and first["wrong"] == 0
    assert first["max_rel_error"] == 3e-4  # the worst correct one
    assert first["best"]["ratio"] == 1.0 and "128x256x64" in first["best"]["config"]
    assert second["wrong"] == 1 and second["max_rel_error"] == 1e-4  # a wrong result is not a correct one's error
    md = prefix.with_suffix(".md").read_text()
    assert "5 configs" in md and "1 wrong" in md and "WRONG_RESULT 1" in md


def test_the_sweep_summary_from_recorded_files_spans_every_file(tmp_path: Path) -> None:
    from tirtune.core import Provenance
    from tirtune.runner.replay_runner import ReplayRunner, to_record
    stack = Stack("NVIDIA H200", "580", "13.0", "0.27")
    big, small = Problem(4096, 4096, 4096), Problem(48, 4096, 2048, "bfloat16")

    def line(result: RunResult) -> str:
        return json.dumps(to_record(replace(result, provenance=Provenance(stack, HOPPER.template_version)))) + "\n"

    (tmp_path / "a.jsonl").write_text(
        line(_result(big, Outcome.OK, 0.25, 2e-4)) + line(_result(big, Outcome.TIMEOUT, blk_n=64))
    )
    (tmp_path / "b.jsonl").write_text(line(_result(small, Outcome.WRONG_RESULT, err=0.3)))
    results = record_space.recorded_results(ReplayRunner([tmp_path / "a.jsonl", tmp_path / "b.jsonl"]))
    assert list(results) == [big, small]  # the largest problem first
    record_space.write_summary(tmp_path / "sweep", results, stack.to_json(), 0.0)
    report = json.loads((tmp_path / "sweep.json").read_text())
    assert report["configs"] == 3 and report["wrong"] == 1
    assert report["problems"][0]["outcomes"] == {"OK": 1, "TIMEOUT": 1}
    assert report["problems"][1]["problem"] == "48x4096x2048" and report["problems"][1]["dtype"] == "bfloat16"


def test_best_vs_cublas_takes_the_median_process_and_names_every_field(tmp_path: Path) -> None:
    from stand_in_children import misbehaving_child

    problem = {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"}
    entries = [
        {
            "name": f"k{i}",
            "label": f"k{i}",
            "config": hopper_config(blk_n=128 * (i + 1)).to_json(),
            "problem": problem,
            "so": f"k{i}.so",
        }
        for i in range(2)
    ]
    passes = [best_vs_cublas.one_process(tmp_path, entries, 3, 30.0, target=misbehaving_child) for _ in range(3)]
    assert all(set(p["rows"]) == {"k0", "k1"} for p in passes)  # each kernel measured in every process
    passes[1]["rows"]["k0"] = {**passes[1]["rows"]["k0"], "ratio": 1.5}  # one outlying process
    passes[2]["rows"]["k1"] = {"outcome": "WRONG_RESULT", "message": "rel. error 0.5"}
    k0, k1 = best_vs_cublas.combine(entries, passes, 3)
    for field in ("problem", "dtype", "config", "tflops", "cublas_tflops", "ratio"):
        assert field in k0 and field in k1
    assert k0["problem"] == "4096x4096x4096" and k0["dtype"] == "float16" and k0["interleaved"] is True
    assert k0["ratio"] == 1.2 / 1.05 and sorted(k0["process_ratios"]) == [1.1429, 1.1429, 1.5]  # the median
    assert k0["tflops"] > 0 and k0["cublas_tflops"] > 0
    assert k1["outcome"] == "WRONG_RESULT" and k1["ratio"] is None  # wrong once: no figure at all


def test_the_tuner_study_replays_only_recorded_configs_and_scores_against_the_best(tmp_path: Path) -> None:
    data = BENCH / "data" / "hopper-4096x4096x4096-float16.jsonl"
    sample = tmp_path / "sample.jsonl"
    sample.write_text("\n".join(data.read_text().splitlines()[::4]) + "\n")
    from tirtune.runner.replay_runner import ReplayRunner
    from tirtune.space import HOPPER_V1

    replay = ReplayRunner([sample])
    problem = Problem(4096, 4096, 4096)
    space = replay.restrict(HOPPER_V1)
    score = tuner_study.recorded_ratios(replay, problem)
    assert len(score) == len(replay.configs(problem)) == 39
    tpe = tuner_study.tpe_trace(space, problem, score, 12, seed=0, warm=False, local_share=0.0, batch=4, ahead=2)
    local = tuner_study.tpe_trace(space, problem, score, 12, seed=0, warm=True, local_share=0.75, batch=4, ahead=2)
    rnd = tuner_study.random_trace(space, problem, score, 12, seed=0)
    # Every trial was a recorded config, none twice.
    assert len(tpe) == len(local) == len(rnd) == 12 and all(v > 0 for v in tpe + local + rnd)
    best = max(score.values())
    report = tuner_study.summarize([tpe, rnd], best, 12)
    assert report["best_fraction_after"]["1"] <= report["best_fraction_after"]["8"] <= 1.0
    never = tuner_study.summarize([[0.5 * best] * 12], best, 12)
    assert never["median_trials_to_within_2pct"] == ">12" and never["trials_to_within_2pct"] == [13]
