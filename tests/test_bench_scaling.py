"""bench/scaling.py's report: the scaling study's schema rendered, speed-ups against the 1-GPU rows."""

from __future__ import annotations

from typing import Any

from bench.scaling import _markdown


def _study(gpus: int, cache: str, per_min: float) -> dict[str, Any]:
    return {"problem": "4096x4096x4096", "dtype": "float16", "gpus": gpus, "cache": cache, "trials": 64,
            "wall_s": 40.0, "search_s": 30.0, "trials_per_min": per_min, "gpu_s_per_candidate": 0.36,
            "gpu_busy": [0.5] * gpus,
            "best_label": "128x128x64 s6", "best_trial_ratio": 1.02, "best_ratio": 1.01}


def test_the_report_gives_each_study_its_speed_up_over_one_gpu_with_the_same_cache() -> None:
    report = {
        "environment": {"date": "2026-11-30", "gpus": ["NVIDIA H200, 580", "NVIDIA H200, 580"], "driver": "580",
                        "cuda": "13.0", "torch": "2.11", "tvm": "0.27"},
        "trials": 64, "cpus": 32, "build_path": "cubin",
        "studies": [_study(1, "cold", 60.0), _study(1, "warm", 100.0), _study(2, "cold", 90.0),
                    _study(2, "warm", 190.0)],
        "agreement": [],
        "suite": [{"gpus": 1, "concurrent_jobs": 2, "trials_per_problem": 16, "wall_s": 400.0, "problems": 20,
                   "measured": 20, "geomean": 1.05},
                  {"gpus": 2, "concurrent_jobs": 4, "trials_per_problem": 16, "wall_s": 200.0, "problems": 20,
                   "measured": 20, "geomean": 1.05}],
    }
    text = _markdown(report)
    rows = [line for line in text.splitlines() if line.startswith("| 4096x4096x4096")]
    assert [r.split(" | ")[8] for r in rows] == ["1.00x", "1.00x", "1.50x", "1.90x"]
    assert "| 2 | 4 | 16 | 200.0 | 2.00x | 20 of 20 | 1.050 |" in text
    assert all(" | 40.0 | 30.0 | " in r for r in rows)
