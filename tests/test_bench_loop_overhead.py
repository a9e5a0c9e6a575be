"""bench/loop_overhead.py without a GPU: its stand-ins drive the service's real JobLoop and
Optuna study to the job's budget, and its report renders (the pace itself is the benchmark's)."""

from __future__ import annotations

from pathlib import Path

from bench.loop_overhead import study, to_markdown
from tirtune.space import Problem


def test_a_short_study_on_stand_in_gpus_spends_its_budget(tmp_path: Path) -> None:
    row = study(Problem(4096, 4096, 4096, "float16"), gpus=2, gpu_s=0.01, trials=8, batch=4, ahead=2, work=tmp_path)
    assert row["trials"] == 8 and 0 < row["busy"] <= 1 and row["ask_s"] > 0
    report = {"date": "2026-11-30T23:00:00+00:00", "machine": "x86_64", "cpus": 2, "rows": [{**row, "loop": "now"}]}
    assert f"| now | 4096x4096x4096 | 2 | 0.01 | 8 | 4 | 2 | {row['wall_s']} |" in to_markdown(report)
