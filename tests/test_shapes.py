"""Shape classes (space/shapes.py): the suite's problems land in the classes they need."""

from __future__ import annotations

import pytest

from tirtune.space import Problem
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
    from tirtune.core import Config
    from tirtune.space.shapes import fitted

    widths = (8, 16, 24, 32, 40, 48, 64, 96, 128, 192, 256)
    swapped = Config(blk_m=64, blk_n=16, swap_ab=True)
    assert fitted(swapped, Problem(1, 4096, 4096), widths).blk_n == 8
    assert fitted(swapped, Problem(33, 4096, 4096), widths).blk_n == 40
    assert fitted(swapped, Problem(100, 4096, 4096), widths).blk_n == 128
    assert fitted(swapped, Problem(1000, 4096, 4096), widths).blk_n == 256  # wider than any: the widest
    wide = Config(blk_m=128, blk_n=128)
    assert fitted(wide, Problem(4096, 24, 4096), widths).blk_n == 24
    assert fitted(wide, Problem(4096, 4096, 4096), widths) is wide
