"""bench/ncu_csv.py on Nsight Compute's own raw CSV (a cut of the decode profile of 2026-12-01 from the
H200: ncu's notes, the header, the units row, two set-up kernels outside any range, three ranged
ones), and bench/gemm_profile.py's CPU side (problems, a kit's kernels, its refusals)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench import gemm_profile, ncu_csv
from tirtune.core import Problem

SAMPLE = Path(__file__).resolve().parent / "data" / "ncu-raw-sample.csv"
ASKED = ["gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"]


def test_the_ranged_kernels_and_the_asked_metrics_are_kept() -> None:
    profile = ncu_csv.read(SAMPLE.read_text(), ASKED)
    assert profile.columns == ("range", "Kernel Name", "Block Size", "Grid Size", *sorted(ASKED))
    assert [r["range"] for r in profile.rows] == ["cublas_m1", "cublas_m1", "cublas_m16"]
    assert profile.rows[0]["Kernel Name"].startswith("nvjet_sm90_hsh_128x8")
    assert profile.rows[0]["gpu__time_duration.sum"] == "14592"  # "14,592" in ncu's output
    assert profile.rows[0]["dram__bytes_write.sum"] == "11109632"
    assert profile.units["gpu__time_duration.sum"] == "ns" and profile.units["dram__bytes_read.sum"] == "byte"


def test_without_a_list_the_device_attributes_and_spreads_go() -> None:
    profile = ncu_csv.read(SAMPLE.read_text())
    assert "dram__bytes_read.sum" in profile.columns and "dram__bytes_read.avg" in profile.columns
    assert not any(c.startswith("device__attribute") or c.endswith((".min", ".max")) for c in profile.columns)
    assert len(profile.columns) < 100


def test_a_range_name_keeps_its_colons() -> None:
    assert ncu_csv._range_name('7  "<default domain>:tirtune a:b:none:none:none:none:none:none') == "tirtune a:b"


def test_main_writes_the_csv_and_the_table_and_refuses_other_files(tmp_path: Path) -> None:
    out = tmp_path / "p"
    assert ncu_csv.main([str(SAMPLE), "--out", str(out), "--keep", ",".join(ASKED)]) == 0
    rows = list(csv.reader(out.with_suffix(".csv").open()))
    assert rows[0][0] == "range" and rows[1][rows[0].index("gpu__time_duration.sum")] == "ns" and len(rows) == 5
    table = out.with_suffix(".md").read_text()
    assert "| cublas_m16 |" in table and "14.24 us" in table and "11.20 MB" in table
    other = tmp_path / "not-ncu.csv"
    other.write_text("a,b\n1,2\n")
    assert ncu_csv.main([str(other), "--out", str(tmp_path / "q")]) == 2
    assert ncu_csv.main([str(tmp_path / "missing.csv"), "--out", str(tmp_path / "r")]) == 2


def test_gemm_profile_reads_problems_and_a_kits_kernels(tmp_path: Path) -> None:
    assert gemm_profile.parse("3000x5000x2000:bfloat16") == Problem(3000, 5000, 2000, "bfloat16")
    assert gemm_profile.parse("16x4096x4096") == Problem(16, 4096, 4096, "float16")
    entries = [{"label": "a", "so": "a.so", "problem": {"m": 3000, "n": 5000, "k": 2000, "dtype": "float16"}},
               {"label": "b", "so": "b.so", "problem": {"m": 3000, "n": 5000, "k": 2000, "dtype": "bfloat16"}},
               {"label": "c", "so": "c.so", "problem": {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"}}]
    (tmp_path / "manifest.json").write_text(json.dumps({"entries": entries}))
    assert gemm_profile.kit_kernels(tmp_path, [Problem(3000, 5000, 2000)]) == [
        ("a", Problem(3000, 5000, 2000), tmp_path / "a.so")]
    assert gemm_profile.main(["3000x5000"]) == 2


def test_gemm_profile_needs_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the profile would run")
    assert gemm_profile.main(["64x64x64"]) == 2 and "needs a CUDA GPU" in capsys.readouterr().err
