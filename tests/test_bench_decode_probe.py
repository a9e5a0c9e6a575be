"""bench/decode_probe.py on the CPU: its table and its choice of problems (the probes need an H200)."""

from __future__ import annotations

import pytest

from bench import decode_probe
from tirtune.core import Problem

REPORT = {
    "date": "2026-12-02T01:13:08+00:00", "gpu": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0",
    "torch": "2.11.0+cu130", "rounds": 7, "reps": 30,
    "rows": [
        {"problem": "16x4096x4096", "dtype": "float16", "case": "cublas", "median_us": 18.82, "p10_us": 17.95,
         "p90_us": 19.87, "gbs": 1797.2, "ratio": 1.0, "ratio_p10": 1.0, "ratio_p90": 1.0, "rel_error": None},
        {"problem": "16x4096x4096", "dtype": "float16", "case": "tirx 64x16x128 s8 c1 ws swap l2 first/none krot",
         "median_us": 14.59, "p10_us": 13.95, "p90_us": 15.46, "gbs": 2317.5, "ratio": 1.279, "ratio_p10": 1.243,
         "ratio_p90": 1.312, "rel_error": 0.000207},
    ],
}


def test_the_table_gives_each_case_its_ratio_and_error() -> None:
    text = decode_probe.markdown(REPORT)
    lines = [line for line in text.splitlines() if line.startswith("| 16x4096x4096")]
    assert len(lines) == 2
    assert lines[0].endswith("| 1.0 | 1.0-1.0 | - |")
    assert "| 14.59 | 13.95-15.46 | 2317.5 | 1.279 | 1.243-1.312 | 2.1e-04 |" in lines[1]
    assert "NVIDIA H200, driver 580.159.04" in text and "7 interleaved rounds x 30 launches" in text


def test_only_picks_among_the_decode_shapes_and_refuses_others() -> None:
    assert all(p.m <= 16 for p in decode_probe.PROBLEMS)
    assert decode_probe.select(None) == decode_probe.select([]) == decode_probe.PROBLEMS
    picked = decode_probe.select(["1x4096x4096:float16", "16x4096x4096:bfloat16"])
    assert picked == (Problem(16, 4096, 4096, "bfloat16"), Problem(1, 4096, 4096, "float16"))  # the table's order
    with pytest.raises(SystemExit, match="no such problem 7x7x8:float16"):
        decode_probe.select(["7x7x8:float16"])
