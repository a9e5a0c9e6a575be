"""bench/decode_ceiling.py's report and its clean flush, without a GPU (a recording stand-in for
the tensor the flush reads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.decode_ceiling import ReadFlush, _markdown


class _Buf:
    def __init__(self) -> None:
        self.sums = 0

    def sum(self) -> None:
        self.sums += 1


def test_the_clean_flush_reads_its_buffer_where_timed_events_zeroes_one() -> None:
    flush = ReadFlush.__new__(ReadFlush)
    flush.buf = _Buf()
    flush.zero_()
    flush.zero_()
    assert flush.buf.sums == 2


def test_the_report_lists_every_case_with_its_bandwidth() -> None:
    rows = [{"case": "read", "m": 0, "dtype": "float16", "median_us": 9.5, "p10_us": 9.4, "p90_us": 9.7,
             "gbs": 3532.0},
            {"case": "cublas_m16", "m": 16, "dtype": "float16", "median_us": 19.0, "p10_us": 18.8,
             "p90_us": 19.3, "gbs": 1766.0}]
    text = _markdown({"date": "2026-11-30", "gpu": "NVIDIA H200", "driver": "580", "cuda": "13.0",
                      "torch": "2.11", "weights_bytes": 33554432, "rows": rows})
    assert "| read | float16 | - | 9.5 | 9.4-9.7 | 3532.0 |" in text
    assert "| cublas_m16 | float16 | 16 | 19.0 | 18.8-19.3 | 1766.0 |" in text
    assert "33.6 MB" in text


def test_a_kit_gives_its_kernels_for_these_weights_only(tmp_path: Path) -> None:
    """--kit: the manifest's kernels of N = K = 4096 with M 1 or 16 in the measured dtype."""
    from bench.decode_ceiling import kit_kernels

    def entry(label: str, m: int, n: int, dtype: str) -> dict[str, object]:
        return {"label": label, "so": f"{label}.so", "problem": {"m": m, "n": n, "k": 4096, "dtype": dtype}}

    entries = [entry("a", 16, 4096, "float16"), entry("b", 1, 4096, "float16"), entry("c", 16, 4096, "bfloat16"),
               entry("d", 128, 4096, "float16"), entry("e", 16, 4095, "float16")]
    (tmp_path / "manifest.json").write_text(json.dumps({"entries": entries}))
    assert kit_kernels(tmp_path, "float16") == [("a", 16, tmp_path / "a.so"), ("b", 1, tmp_path / "b.so")]
    assert kit_kernels(tmp_path, "bfloat16") == [("c", 16, tmp_path / "c.so")]


def test_a_kit_kernel_is_timed_after_both_flushes_and_a_wrong_one_is_left_out(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """On the CPU with torch's own matmul standing in for a loaded module (our seam:
    load_artifact); a module whose output is off is reported and not timed."""
    import torch

    from bench import decode_ceiling
    from tirtune.runner import launcher

    def load(path: str) -> object:
        if path.endswith("wrong.so"):
            return lambda a, b, d: d.copy_(torch.mm(a, b.T) * 1.1)
        return lambda a, b, d: torch.mm(a, b.T, out=d)

    monkeypatch.setattr(launcher, "load_artifact", load)
    monkeypatch.setattr(decode_ceiling, "N", 64)
    monkeypatch.setattr(decode_ceiling, "K", 64)
    table = decode_ceiling.cases(torch, torch.float16, torch.device("cpu"),
                                 [("good", 16, Path("good.so")), ("bad", 1, Path("wrong.so"))])
    assert {"tirtune_m16 good", "tirtune_after_clean_flush_m16 good"} <= set(table)
    assert not any("bad" in name for name in table)
    assert "left out bad" in capsys.readouterr().err
    launch, flush, m, moved = table["tirtune_after_clean_flush_m16 good"]
    assert (flush, m, moved) == ("read", 16, 64 * 64 * 2)
    launch()


def test_every_stream_variant_splits_the_weights_into_whole_steps() -> None:
    from bench.stream_read import VARIANTS, StreamVariant

    assert len({v.label for v in VARIANTS}) == len(VARIANTS)
    for v in VARIANTS:
        assert v.per_program(4096 * 4096) * v.programs == 4096 * 4096
    with pytest.raises(ValueError, match="do not split"):
        StreamVariant(3, 4096, 4).per_program(4096 * 4096)
    with pytest.raises(ValueError, match="do not split"):
        StreamVariant(4096, 8192, 4).per_program(4096 * 4096)  # 4096 elements a program, 8192 a step


def test_the_stream_kernel_sums_each_programs_share() -> None:
    """Triton's interpreter runs the kernel on the CPU, in a process of its own (triton reads
    TRITON_INTERPRET when it is imported)."""
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys

    script = """
import torch
from bench.stream_read import StreamVariant, stream_sum
for dtype in (torch.float16, torch.bfloat16):
    w = torch.randn(32, 512, dtype=dtype)
    out = torch.full((8,), float("nan"))
    stream_sum(w, out, StreamVariant(8, 1024, 4))
    torch.testing.assert_close(out, w.float().reshape(8, -1).sum(1), rtol=1e-5, atol=1e-3)
try:
    stream_sum(w, torch.empty(4), StreamVariant(8, 1024, 4))
except ValueError as e:
    assert "one output float per program" in str(e)
else:
    raise AssertionError("a short output was accepted")
print("ok")
"""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=root,
                          env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(root)}, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
