"""FP8 (e4m3) problems: the dtype, the Hopper plan's sizes at 1-byte elements, the rules that
refuse what the FP8 path does not build yet, and one FP8 kernel built for sm_90a (QGMMA in its
SASS, no spill)."""

from __future__ import annotations

import random
import re
from dataclasses import replace
from pathlib import Path

import pytest

from tirtune.core import SpaceError
from tirtune.core.problem import DTYPES, FP8, GEMM_DTYPES, HALF_DTYPES, normalize_dtype
from tirtune.kernels import plan
from tirtune.space import Config, Problem
from tirtune.space.blackwell import BLACKWELL
from tirtune.space.hopper import BRANCH, HOPPER, HOPPER_STARTS, rules
from tirtune.space.hopper.knobs import config as hopper_config

FP8_4096 = Problem(4096, 4096, 4096, FP8)
# 128x128 tile, a 128-deep k-tile (one 128-byte swizzle row of e4m3), 4 stages, 2 consumers, producer.
BASE = hopper_config(128, 128, 128, 4, 2, True)


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


def test_out_float16_writes_d_bias_and_residual_in_fp16_for_fp8_only() -> None:
    problem = Problem(64, 256, 512, "fp8", "out_float16+residual+scale_a+bias+scale_b")
    assert str(problem.epilogue) == "scale_a+scale_b+bias+residual+out_float16"
    assert problem.out_dtype == "float16" and Problem(**problem.to_json()) == problem
    assert [(o.name, o.dtype) for o in problem.operands] == [
        ("A", FP8),
        ("B", FP8),
        ("D", "float16"),
        ("scale_a", "float32"),
        ("scale_b", "float32"),
        ("bias", "float16"),
        ("residual", "float16"),
    ]
    assert not HOPPER.problem_violations(problem)
    for dtype in HALF_DTYPES:  # a 16-bit problem's D is its own dtype
        [violation] = HOPPER.problem_violations(Problem(64, 256, 512, dtype, "bias+out_float16"))
        assert violation.rule == "out_float16_fp8" and "FP8 operands" in violation.reason
    with pytest.raises(SpaceError, match="swiglu stands alone"):
        Problem(64, 256, 512, FP8, "swiglu+out_float16")


def test_16_bit_problems_keep_their_sizes() -> None:
    for dtype in ("float16", "bfloat16"):
        problem = Problem(64, 256, 512, dtype, "bias")
        assert problem.out_dtype == dtype and problem.element_bytes == problem.out_bytes == 2
        assert problem.min_bytes == (64 * 512 + 256 * 512 + 64 * 256) * 2 + 256 * 2


def test_fp8_is_served_and_the_16_bit_dtypes_are_the_models() -> None:
    # The service, the tuner and the dispatcher take FP8; the cost model and the tuner's transfers
    # keep to the 16-bit types (HALF_DTYPES).
    assert FP8 in GEMM_DTYPES and FP8 in DTYPES and FP8 not in HALF_DTYPES
    assert normalize_dtype("fp8") == normalize_dtype("E4M3") == FP8
    with pytest.raises(SpaceError, match="expected one of float16, bfloat16, float8_e4m3fn"):
        normalize_dtype("fp4")


def test_a_job_may_tune_an_fp8_problem() -> None:
    from tirtune.space import branches

    branches.check_problem(FP8_4096)
    branches.check_problem(Problem(4096, 4096, 4096, "bfloat16"))
    with pytest.raises(SpaceError, match="one-row operands"):
        branches.check_problem(Problem(1, 4096, 4096, FP8))


def test_fp8_k_needs_16_elements_for_tma() -> None:
    # A row stride of 16 B is 16 e4m3 elements (8 of a 2-byte dtype).
    assert HOPPER.problem_violations(Problem(64, 64, 24, FP8))[0].rule == "tma_row_stride_aligned"
    assert not HOPPER.problem_violations(Problem(64, 64, 48, FP8))
    assert not HOPPER.problem_violations(Problem(64, 64, 24, "float16"))


def test_the_blackwell_branch_refuses_fp8() -> None:
    assert "operand_dtype_supported" in [v.rule for v in BLACKWELL.problem_violations(FP8_4096)]
    assert not BLACKWELL.problem_violations(Problem(4096, 4096, 4096, "bfloat16"))


# --- the rules ----------------------------------------------------------------------------------


def test_a_deep_fp8_ring_fits_where_the_16_bit_one_does_not() -> None:
    # 6 stages of (128+128)x128: 384 KiB at 2 bytes, 192 KiB at 1.
    config = BASE.replace(stages=6)
    fp16 = [v.rule for v in HOPPER.violations(config, Problem(4096, 4096, 4096))]
    assert "smem_fits" in fp16
    assert not HOPPER.violations(config, FP8_4096)


def _broken(config: Config, problem: Problem = FP8_4096) -> list[str]:
    return [v.rule for v in HOPPER.violations(config, problem)]


def test_the_fp8_base_config_is_valid() -> None:
    assert _broken(BASE) == []
    assert _broken(BASE.replace(blk_k=256, stages=3)) == []


@pytest.mark.parametrize(
    ("changes", "rule", "reason"),
    [
        ({"blk_k": 64}, "fp8_blk_k_fills_swizzle", "multiple of 128"),
        ({"loader": "threads", "stages": 1, "warp_specialized": False}, "fp8_tma_loader", "loader=tma"),
        ({"persistent": True, "stream_k": True}, "fp8_no_stream_k", "not built for FP8"),
        ({"peel_k": True}, "fp8_whole_k_tiles", "k32"),
    ],
)
def test_what_the_fp8_path_does_not_build_is_refused_by_name(
    changes: dict[str, object], rule: str, reason: str
) -> None:
    config = BASE.replace(**changes)  # type: ignore[arg-type]
    problem = Problem(4096, 4096, 4000, FP8)  # a K tail, so that peel_k has steps to skip
    violations = {v.rule: v.reason for v in HOPPER.violations(config, problem)}
    assert rule in violations, violations
    assert reason in violations[rule] and "float8_e4m3fn" in violations[rule]
    # The same config on the fp16 problem breaks no FP8 rule.
    assert not [r for r in _broken(config, replace(problem, dtype="float16")) if r.startswith("fp8_")]


@pytest.mark.parametrize(
    "changes",
    [
        {"epilogue": "tma"},
        {"epilogue": "tma_chunked", "epilogue_warpgroup": True},
        {"split_k": 2},
        {"split_k": 4, "split_k_reduce": "serial", "persistent": False},
    ],
)
def test_fp8_takes_split_k_and_the_staged_epilogues_since_their_sweep(changes: dict[str, object]) -> None:
    """Refused until bench/results/sweeps/2026-12-06-fp8-paths-fuzz.md (200 of 200 correct)."""
    config = BASE.replace(**changes)
    assert not [r for r in _broken(config) if r.startswith("fp8_")], _broken(config)


def test_trim_is_refused_for_fp8() -> None:
    config = BASE.replace(trim=True)
    assert "fp8_whole_k_tiles" in _broken(config, Problem(4000, 4000, 4000, FP8))


@pytest.mark.parametrize(
    ("problem", "rule"),
    [
        (Problem(64, 4096, 4096, FP8, "swiglu"), "fp8_epilogue_supported"),
        (Problem(1, 4096, 4096, FP8), "fp8_one_row_operand"),
        (Problem(4096, 1, 4096, FP8), "fp8_one_row_operand"),
    ],
)
def test_fp8_problems_the_path_does_not_build_are_refused(problem: Problem, rule: str) -> None:
    assert rule in [v.rule for v in HOPPER.problem_violations(problem)]
    with pytest.raises(SpaceError, match="cannot build"):
        plan(BASE, problem)
    assert not [v for v in HOPPER.problem_violations(replace(problem, dtype="float16")) if v.rule.startswith("fp8_")]


def test_scaling_epilogues_are_valid_for_fp8() -> None:
    # Per-token x per-channel (and per-tensor, as the same pair) scaling, with a bias after it.
    for epilogue in ("scale_row+scale_col", "scale_row+scale_col+bias", "residual"):
        problem = Problem(4096, 4096, 4096, FP8, epilogue)
        assert not HOPPER.problem_violations(problem) and _broken(BASE, problem) == []


def test_the_fp8_twin_of_a_start_keeps_its_stage_bytes_and_breaks_no_fp8_rule() -> None:
    starts = {c for configs in HOPPER_STARTS.values() for c in configs}
    for config in starts:
        twin = BRANCH.fit_start(config, FP8_4096)
        assert twin.blk_k == min(2 * config.blk_k, rules.MAX_BLK_K)
        assert (twin.loader, twin.stream_k, twin.trim, twin.peel_k) == ("tma", False, False, False)
        # The start's store and split are kept (FP8 takes both since their sweep).
        assert (twin.epilogue, twin.epilogue_warpgroup, twin.split_k) == (
            config.epilogue,
            config.epilogue_warpgroup,
            config.split_k,
        )
        assert not [r for r in _broken(twin) if r.startswith("fp8_")]


@pytest.mark.parametrize("shape", ["64x4096x4096", "512x4096x4096", "4096x4096x4096", "3000x5000x2000"])
def test_an_fp8_job_starts_from_valid_configs(shape: str) -> None:
    problem = Problem.parse(shape, "fp8")
    starts = BRANCH.start_configs(problem)
    assert starts and all(HOPPER.is_valid(c, problem) for c in starts), [
        (c.label(), _broken(c, problem)) for c in starts if not HOPPER.is_valid(c, problem)
    ]


def test_valid_fp8_configs_drawn_at_random_keep_to_what_the_path_builds() -> None:
    rng = random.Random(8)
    drawn = [HOPPER.sample_valid(FP8_4096, rng) for _ in range(40)]
    assert all(c is not None for c in drawn)
    assert {c.blk_k for c in drawn if c is not None} <= {128, 256}
    assert {(c.loader, c.stream_k, c.trim, c.peel_k) for c in drawn if c is not None} == {("tma", False, False, False)}
    # Split-K and the staged stores are drawn too (since their sweep).
    assert any(c.split_k > 1 for c in drawn if c is not None)
    assert any(c.epilogue != "register" for c in drawn if c is not None)


# --- the plan -----------------------------------------------------------------------------------


def test_the_plan_counts_1_byte_elements() -> None:
    p = plan(BASE, FP8_4096)
    assert (p.element_bytes, p.atom_k, p.atoms, p.wgmma_k) == (1, 128, 1, 32)
    assert p.stage_bytes == (128 + 128) * 128  # 32 KiB: the bytes of a 64-deep fp16 stage
    assert p.wgmma_name == "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"
    assert not p.wgmma_transposes
    assert (p.ab_type, p.out_dtype, p.acc_regs) == ("e4m3", "bfloat16", 64)
    deep = plan(BASE.replace(blk_k=256, stages=3), FP8_4096)
    assert (deep.atoms, deep.stage_bytes, deep.k_tiles) == (2, (128 + 128) * 256, 16)
    assert rules.smem_bytes(BASE, FP8_4096.element_bytes) == 4 * 32768 + rules.SMEM_OVERHEAD_BYTES


def test_the_plan_of_a_16_bit_problem_is_unchanged() -> None:
    p = plan(BASE.replace(stages=3), Problem(4096, 4096, 4096, "bfloat16"))
    assert (p.element_bytes, p.atom_k, p.atoms, p.wgmma_k) == (2, 64, 2, 16)
    assert p.stage_bytes == (128 + 128) * 128 * 2
    assert p.wgmma_name == "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"
    assert p.wgmma_transposes and p.out_dtype == "bfloat16"
    assert rules.smem_bytes(BASE) == 4 * 65536 + rules.SMEM_OVERHEAD_BYTES


# --- lowered kernels -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        (BASE.replace(blk_k=256, stages=3), Problem(1000, 3000, 1040, FP8, "bias")),
        (hopper_config(128, 64, 256, 4, 2, True, swap_ab=True), Problem(64, 4096, 4096, FP8, "scale_row+scale_col")),
        (
            hopper_config(128, 128, 128, 6, 2, True, persistent=True, schedule="pingpong", cluster=2, raster_group=8),
            FP8_4096,
        ),
    ],
)
def test_a_lowered_fp8_kernel_loads_128_byte_rows_and_asks_the_shared_memory_the_rule_counts(
    config: Config, problem: Problem
) -> None:
    from tirtune.builder import device_build

    assert HOPPER.is_valid(config, problem)
    _, launch = device_build.lower_device(config, problem)
    # The rule's overhead covers the barriers below the first 1024-aligned tile, with 1 KiB to spare.
    assert rules.smem_bytes(config, 1) - launch.dyn_smem == rules.SMEM_OVERHEAD_BYTES - 1024
    assert launch.tensor_maps and {t.dtype for t in launch.tensor_maps} == {FP8}
    for t in launch.tensor_maps:
        # One 128-element (128-byte) box row along K, 128B-swizzled, rows K bytes apart.
        assert t.box[0] == 128 and t.swizzle == 3 and t.strides == (problem.k,)
    assert launch.operands == tuple(o.name for o in problem.operands)


# --- one kernel, built -------------------------------------------------------------------------


def _count(sass: str, opcode: str) -> int:
    return len(re.findall(rf"\b{opcode}\b", sass))


@pytest.mark.nvcc
def test_an_fp8_kernel_builds_for_sm_90a_with_qgmma_and_no_spill(tmp_path: Path) -> None:
    from tirtune.builder import toolchain

    problem = Problem(4096, 4096, 4096, FP8, "scale_row+scale_col")
    p = plan(BASE, problem)
    source = toolchain.lower_to_cuda(BASE, problem)
    # D is bf16, A and B e4m3 in shared memory, the k32 e4m3 wgmma without transpose immediates.
    assert "nv_bfloat16* __restrict__ D_ptr" in source
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in source
    assert "tirtune_store_bf16x2" in source
    (tmp_path / "kernel.cu").write_text(source)
    output = toolchain.nvcc_shared_library(
        tmp_path / "kernel.cu", tmp_path / "kernel.so", timeout_s=600, cache_dir=tmp_path
    )
    sass = toolchain.sass(tmp_path / "kernel.so")
    # Hopper's FP8 wgmma is QGMMA in SASS: one per k32 step and m64 block, the main loop at least.
    qgmma = re.findall(r"\bQGMMA\.64x128x32\.F32\.E4M3\.E4M3\b", sass)
    assert len(qgmma) >= (BASE.blk_k // 32) * p.m_blocks, sass[:2000]
    assert _count(sass, "HGMMA") == 0
    assert len(re.findall(r"\bUTMALDG\.2D\b", sass)) >= 2
    assert _count(sass, "STG") > 0 and _count(sass, "UTMASTG") == 0  # register epilogue
    assert _count(sass, "LDG") > 0  # the scales
    assert _count(sass, "STL") == 0 and _count(sass, "LDL") == 0
    resources = toolchain.ptxas_resources(output)
    assert resources is not None and not resources.spills, output[-2000:]
    assert resources.registers * p.threads <= 65536


@pytest.mark.nvcc
def test_an_fp8_kernel_with_an_fp16_d_builds_for_sm_90a_storing_half_pairs(tmp_path: Path) -> None:
    from tirtune.builder import toolchain

    problem = Problem(2048, 4096, 4096, FP8, "scale_a+scale_b+bias+out_float16")
    assert plan(BASE, problem).out_dtype == "float16"
    source = toolchain.lower_to_cuda(BASE, problem)
    # D and the bias are fp16; the product is the same e4m3 wgmma as with a bf16 D.
    assert "half* __restrict__ D_ptr" in source and "half* __restrict__ bias_ptr" in source
    assert "nv_bfloat16" not in source and "tirtune_store_f16x2" in source
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in source
    (tmp_path / "kernel.cu").write_text(source)
    output = toolchain.nvcc_shared_library(
        tmp_path / "kernel.cu", tmp_path / "kernel.so", timeout_s=600, cache_dir=tmp_path
    )
    sass = toolchain.sass(tmp_path / "kernel.so")
    assert len(re.findall(r"\bQGMMA\.64x128x32\.F32\.E4M3\.E4M3\b", sass)) >= (BASE.blk_k // 32) * 2
    assert _count(sass, "F2FP.F16.F32.PACK_AB") > 0 and _count(sass, "F2FP.BF16.F32.PACK_AB") == 0
    resources = toolchain.ptxas_resources(output)
    assert resources is not None and not resources.spills, output[-2000:]
