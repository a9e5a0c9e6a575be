"""bench/tile_fill.py: the waves and the padding of a draw's best configs, from its report alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import tile_fill
from tirtune.core import Problem
from tirtune.space.hopper.knobs import config as hopper_config


def test_fill_counts_tiles_rounds_and_padding_in_the_kernels_axes() -> None:
    tile = hopper_config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2)
    # 14 x 8 = 112 tiles of 128x128 on 1748x1024: one round of 132 SMs, 112 of them busy;
    # 1748 rows in 14 x 128 = 1792.
    f = tile_fill.fill(tile, Problem(1748, 1024, 1536, "bfloat16"))
    assert (f["tiles"], f["ctas"]) == (112, 112)
    assert f["wave_fill"] == pytest.approx(112 / 132, abs=1e-4)
    assert f["pad_fill"] == pytest.approx(1748 / 1792, abs=1e-4)
    assert f["tile_fill"] == pytest.approx(f["wave_fill"] * f["pad_fill"], abs=2e-4)
    # Split over 2 CTAs a tile: 224 CTAs in two rounds.
    assert tile_fill.fill(hopper_config(128, 128, 64, 4, 2, split_k=2, split_k_reduce="serial"),
                          Problem(1748, 1024, 1536))["wave_fill"] == pytest.approx(224 / 264, abs=1e-4)
    # Only the last round's tiles split: 168 tiles = 132 whole + 36 split in 2 -> 204 CTAs.
    tail = hopper_config(128, 128, 64, 4, 2, split_k=2, split_k_reduce="serial", split_k_scope="tail")
    assert tile_fill.fill(tail, Problem(1680, 1536, 1536))["ctas"] == 132 + 36 * 2
    # swap_ab lays the tile over N x M: 64 rows of N, 16 columns of M = 4.
    swapped = tile_fill.fill(hopper_config(64, 16, 128, 8, 1, swap_ab=True), Problem(4, 4096, 4096))
    assert swapped["tiles"] == 64 and swapped["pad_fill"] == pytest.approx(4 / 16)


def test_a_run_reads_draw_reports_leaves_decode_out_and_writes_json_and_markdown(tmp_path: Path) -> None:
    big = hopper_config(128, 256, 64, 4, 2, persistent=True, raster_group=8, epilogue="tma_chunked")
    small = hopper_config(128, 128, 64, 5, 2).to_json()
    decode = hopper_config(64, 8, 128, 8, 1, swap_ab=True).to_json()
    report = {"problems": [
        {"problem": "4096x4096x4096", "dtype": "float16", "ratio": 1.01, "config": big.to_json()},
        {"problem": "1748x1024x1536", "dtype": "bfloat16", "ratio": 0.935, "config": small},
        {"problem": "900x1024x1536", "dtype": "bfloat16", "ratio": 0.95, "config": small},
        {"problem": "4x4096x4096", "dtype": "float16", "ratio": 1.2, "config": decode},
        {"problem": "8x8x8", "dtype": "float16", "ratio": None, "config": None},
    ]}
    draw = tmp_path / "2026-01-01-123.json"
    draw.write_text(json.dumps(report))
    out = tmp_path / "fill"
    assert tile_fill.main(["--draws", str(draw), "--out", str(out)]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert [p["problem"] for p in result["problems"]] == ["4096x4096x4096", "1748x1024x1536", "900x1024x1536"]
    s = result["summary"]
    assert (s["problems"], s["below_097"], s["at_or_above_1"]) == (3, 2, 1)
    assert s["wave_fill_at_or_above_1"] == pytest.approx(512 / 528, abs=1e-4)  # 32 x 16 tiles, 4 rounds
    assert "| 1748x1024x1536 | bfloat16 | 0.935 |" in out.with_suffix(".md").read_text()


def test_a_missing_or_unreadable_report_is_a_message(tmp_path: Path) -> None:
    bad = tmp_path / "2026-01-01-1.json"
    bad.write_text("{not json")
    with pytest.raises(SystemExit, match="cannot read the draw report"):
        tile_fill.main(["--draws", str(bad), "--out", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match="cannot read the draw report"):
        tile_fill.main(["--draws", str(tmp_path / "absent.json"), "--out", str(tmp_path / "x")])


def test_the_draws_on_file_are_found() -> None:
    names = [p.name for p in tile_fill.full_draws()]
    assert "2026-12-02-2580492372.json" in names
    assert not any("partial" in n or "quality" in n or "study" in n for n in names)
