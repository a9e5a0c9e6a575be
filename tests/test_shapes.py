"""Shape classes (space/shapes.py): the suite's problems land in the classes they need."""

from __future__ import annotations

import pytest

from tirtune.space import Problem
from tirtune.space.hopper.knobs import config as hopper_config
from tirtune.space.shapes import ShapeClass, log_distance, nearest_problems, shape_class


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ("1x4096x4096", ShapeClass.DECODE),
        ("16x4096x4096", ShapeClass.DECODE),
        ("17x4096x4096", ShapeClass.SMALL_BATCH),
        ("128x4096x4096", ShapeClass.SMALL_BATCH),
        ("512x4096x4096", ShapeClass.SMALL_BATCH),
        ("4096x64x4096", ShapeClass.TALL_SKINNY),
        ("1024x1024x1024", ShapeClass.FEW_TILES),
        ("2048x2048x2048", ShapeClass.SQUARE),
        ("2048x2048x16384", ShapeClass.K_HEAVY),
        ("8192x8192x1024", ShapeClass.SQUARE),
        ("4000x4000x4000", ShapeClass.RAGGED),
        ("3000x5000x2000", ShapeClass.RAGGED),
        ("4096x4096x4096", ShapeClass.SQUARE),
        ("4096x14336x4096", ShapeClass.SQUARE),
    ],
)
def test_each_problem_gets_the_first_class_whose_test_it_passes(shape: str, expected: ShapeClass) -> None:
    assert shape_class(Problem.parse(shape)) is expected


def test_log_distance_treats_doubling_alike_at_every_scale() -> None:
    base = Problem(4096, 4096, 4096)
    assert log_distance(base, Problem(2048, 4096, 4096)) == pytest.approx(log_distance(base, Problem(8192, 4096, 4096)))
    assert log_distance(base, base) == 0.0


def test_nearest_problems_rank_by_distance_and_leave_the_problem_itself_out() -> None:
    problem = Problem(16, 4096, 4096)
    tuned = [Problem(4096, 4096, 4096), Problem(16, 4096, 4096), Problem(8, 4096, 4096), Problem(128, 4096, 4096)]
    assert nearest_problems(problem, tuned, 2) == [Problem(8, 4096, 4096), Problem(128, 4096, 4096)]
    assert nearest_problems(problem, [], 3) == []


def test_another_dtype_is_left_out_unless_given_a_distance() -> None:
    problem = Problem(16, 4096, 4096, "bfloat16")
    tuned = [Problem(16, 4096, 4096, "float16"), Problem(8, 4096, 4096, "bfloat16")]
    assert nearest_problems(problem, tuned, 2) == [Problem(8, 4096, 4096, "bfloat16")]
    assert nearest_problems(problem, tuned, 2, other_dtype=0.1) == tuned


def test_a_swapped_tile_is_fitted_to_m_and_a_wide_tile_to_n() -> None:
    from tirtune.space.shapes import fitted

    widths = (8, 16, 24, 32, 40, 48, 64, 96, 128, 192, 256)
    swapped = hopper_config(blk_m=64, blk_n=16, swap_ab=True)
    assert fitted(swapped, Problem(1, 4096, 4096), widths).blk_n == 8
    assert fitted(swapped, Problem(33, 4096, 4096), widths).blk_n == 40
    assert fitted(swapped, Problem(100, 4096, 4096), widths).blk_n == 128
    assert fitted(swapped, Problem(1000, 4096, 4096), widths).blk_n == 256  # wider than any: the widest
    wide = hopper_config(blk_m=128, blk_n=128)
    assert fitted(wide, Problem(4096, 24, 4096), widths).blk_n == 24
    assert fitted(wide, Problem(4096, 4096, 4096), widths) is wide


def test_wave_fill_counts_the_padding_and_the_idle_last_round() -> None:
    from tirtune.space.shapes import wave_fill

    # 4096^3 in 128x256 tiles: 512 tiles, 4 rounds of 132 with 16 SMs idle in the last.
    assert wave_fill(hopper_config(blk_m=128, blk_n=256), Problem(4096, 4096, 4096)) == pytest.approx(512 / 528)
    # 3000x5000 in 128x192: 24 x 27 = 648 tiles (5 rounds), 3072 x 5184 computed for 3000 x 5000.
    assert wave_fill(hopper_config(blk_m=128, blk_n=192), Problem(3000, 5000, 2000)) == pytest.approx(
        3000 * 5000 / (132 * 5 * 128 * 192))
    # 128x152: 24 x 33 = 792 tiles, exactly 6 rounds.
    assert wave_fill(hopper_config(blk_m=128, blk_n=152), Problem(3000, 5000, 2000)) == pytest.approx(
        3000 * 5000 / (132 * 6 * 128 * 152))
    # swap_ab: the problem's N along blk_m; one round of 64 tiles of 64 x 16 at 16x4096.
    assert wave_fill(hopper_config(blk_m=64, blk_n=16, swap_ab=True), Problem(16, 4096, 4096)) == pytest.approx(64 / 132)


def test_wave_fitted_takes_the_width_that_fills_the_rounds_never_narrower_than_asked() -> None:
    from tirtune.space.shapes import wave_fill, wave_fitted

    widths = tuple(range(8, 257, 8))
    base = hopper_config(blk_m=128, blk_n=128)
    fit = wave_fitted(base, Problem(3000, 5000, 2000), widths)
    assert fit.blk_n == 152 and fit.blk_m == 128
    problem = Problem(3000, 5000, 2000)
    assert all(wave_fill(fit, problem) >= wave_fill(hopper_config(blk_m=128, blk_n=w), problem) - 0.005
               for w in widths if w >= 128)
    # The config's own blk_n is the floor: from 8 up, every width is a candidate.
    low = wave_fitted(hopper_config(blk_m=128, blk_n=8), problem, widths)
    assert wave_fill(low, problem) >= wave_fill(fit, problem) - 0.005
    # The validity filter is applied, and with nothing valid the config comes back as it was.
    assert wave_fitted(base, problem, widths, valid=lambda c: c.blk_n % 64 == 0).blk_n in (128, 192, 256)
    assert wave_fitted(base, problem, widths, valid=lambda c: False) is base
    # Aligned: 4096^3 takes 256 (as full as 128 and 192, within the tie, and the widest).
    assert wave_fitted(base, Problem(4096, 4096, 4096), widths).blk_n == 256
