"""bench/decode_ceiling.py's report and its clean flush, without a GPU (a recording stand-in for
the tensor the flush reads)."""

from __future__ import annotations

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
