"""bench/trial_cost.py without a GPU: the summary's medians and ratios beside as-is, the report's
rows, and arguments refused with a message."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import trial_cost


def _row(variant: str, wall: float, ratio: float | None, p: int = 0, outcome: str = "OK") -> dict[str, object]:
    return {"pass": p, "kernel": "64x8x256 s4 c1 ws", "problem": "1x4608x18432", "dtype": "float16",
            "variant": variant, "wall_s": wall, "ratio": ratio, "ratio_p10": ratio, "ratio_p90": ratio,
            "kernel_ms": 0.01, "redone": 1 if variant == "hold-0.05" else 0, "outcome": outcome}


def test_the_summary_takes_medians_over_the_passes_beside_as_is() -> None:
    rows = [_row("as-is", 0.5, 1.10, 0), _row("as-is", 0.7, 1.00, 1), _row("as-is", 0.6, 1.05, 2),
            _row("hold-0.05", 0.4, 1.05, 0), _row("hold-0.05", 0.5, 1.07, 1), _row("hold-0.05", 0.3, None, 2,
                                                                                     "LAUNCH_ERROR")]
    s = trial_cost.summarize(rows)
    [k] = s["summary"]
    assert k["by_variant"]["as-is"] == {"wall_s": 0.6, "ratio": 1.05, "redone": 0, "ratio_vs_as_is": 1.0}
    hold = k["by_variant"]["hold-0.05"]  # the failed measurement counts for neither median
    assert hold["wall_s"] == pytest.approx(0.45) and hold["ratio"] == pytest.approx(1.06)
    assert hold["ratio_vs_as_is"] == pytest.approx(1.06 / 1.05) and hold["redone"] == 2
    assert s["wall_s_by_variant"] == {"as-is": 0.6, "hold-0.05": pytest.approx(0.4)}

    report = {"date": "2026-12-07T10:00:00+00:00", "gpu_name": "NVIDIA H100 80GB HBM3", "driver": "580",
              "cuda": "13.0", "torch": "2.11", "l2_bytes": 50 << 20, "kit": ".build/trial-cost", "passes": 3,
              "variants": {n: trial_cost.VARIANTS[n] for n in ("as-is", "hold-0.05")}, **s}
    md = trial_cost.markdown(report)
    assert "| 1x4608x18432 float16 | 0.0100 | 0.600 / 1.050 | 0.450 / 1.060 (1.010x), 2 redone |" in md
    assert "as-is 0.600 s, hold-0.05 0.400 s" in md


def test_arguments_are_refused_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (([str(tmp_path), "--out", str(tmp_path / "x")], "no manifest.json"),
                          ([str(tmp_path), "--out", str(tmp_path / "x"), "--passes", "0"], "no manifest.json")):
        with pytest.raises(SystemExit) as e:
            trial_cost.main(argv)
        assert e.value.code == 2 and message in capsys.readouterr().err
    (tmp_path / "manifest.json").write_text('{"entries": []}')
    with pytest.raises(SystemExit) as e:
        trial_cost.main([str(tmp_path), "--out", str(tmp_path / "x"), "--passes", "0"])
    assert e.value.code == 2 and "--passes must be at least 1" in capsys.readouterr().err
