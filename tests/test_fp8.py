"""FP8 (e4m3) problems: the dtype, its sizes and what the branches make of it."""

from __future__ import annotations

import random
import re
from dataclasses import replace
from pathlib import Path

import pytest

from tirtune.core import SpaceError
from tirtune.core.problem import FP8, GEMM_DTYPES, normalize_dtype
from tirtune.kernels import plan
from tirtune.space import Config, Problem
from tirtune.space.blackwell import BLACKWELL
from tirtune.space.hopper import BRANCH, HOPPER, HOPPER_STARTS, rules

FP8_4096 = Problem(4096, 4096, 4096, FP8)
# 128x128 tile, a 128-deep k-tile (one 128-byte swizzle row of e4m3), 4 stages, 2 consumers, producer.
BASE = Config(128, 128, 128, 4, 2, True)


# --- the dtype ----------------------------------------------------------------------------------


@pytest.mark.parametrize("alias", ["fp8", "FP8", "e4m3", " float8_e4m3fn "])
def test_fp8_aliases_name_one_dtype_whose_d_is_bf16(alias: str) -> None:
    problem = Problem.parse("64x4096x4096", alias)
    assert problem.dtype == FP8 and problem.is_fp8
    assert problem.element_bytes == 1 and problem.out_dtype == "bfloat16" and problem.out_bytes == 2
    assert str(problem) == "64x4096x4096 float8_e4m3fn"
    assert Problem(**problem.to_json()) == problem


def test_an_fp8_problems_operands_are_e4m3_and_its_d_and_bias_bf16() -> None:
    problem = Problem(64, 256, 512, "fp8", "scale_row+scale_col+bias+residual")
    assert [(o.name, o.shape, o.dtype) for o in problem.operands] == [
        ("A", (64, 512), FP8),
        ("B", (256, 512), FP8),
        ("D", (64, 256), "bfloat16"),
        ("scale_row", (64,), "float32"),
        ("scale_col", (256,), "float32"),
        ("bias", (256,), "bfloat16"),
        ("residual", (64, 256), "bfloat16"),
    ]
    # A and B at 1 byte, D, bias and residual at 2, the scales at 4.
    assert problem.min_bytes == (64 * 512 + 256 * 512) + 64 * 256 * 2 + (64 + 256) * 4 + 256 * 2 + 64 * 256 * 2


def test_16_bit_problems_keep_their_sizes() -> None:
    for dtype in ("float16", "bfloat16"):
        problem = Problem(64, 256, 512, dtype, "bias")
        assert problem.out_dtype == dtype and problem.element_bytes == problem.out_bytes == 2
        assert problem.min_bytes == (64 * 512 + 256 * 512 + 64 * 256) * 2 + 256 * 2


def test_the_served_dtypes_stay_16_bit() -> None:
    # The service, the tuner's transfers and the dispatcher take the 16-bit types only.
    assert FP8 in GEMM_DTYPES
    with pytest.raises(SpaceError, match="expected one of float16, bfloat16"):
        normalize_dtype("fp8")
    assert normalize_dtype("fp8", GEMM_DTYPES) == FP8


def test_fp8_k_needs_16_elements_for_tma() -> None:
    # A row stride of 16 B is 16 e4m3 elements (8 of a 2-byte dtype).
    assert HOPPER.problem_violations(Problem(64, 64, 24, FP8))[0].rule == "tma_row_stride_aligned"
    assert not HOPPER.problem_violations(Problem(64, 64, 48, FP8))
    assert not HOPPER.problem_violations(Problem(64, 64, 24, "float16"))


def test_the_blackwell_branch_refuses_fp8() -> None:
    assert "operand_dtype_supported" in [v.rule for v in BLACKWELL.problem_violations(FP8_4096)]
    assert not BLACKWELL.problem_violations(Problem(4096, 4096, 4096, "bfloat16"))
