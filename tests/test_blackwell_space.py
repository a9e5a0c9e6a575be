"""The Blackwell (sm_100a) space: knob ranges, named rules, the branch switch, and the pure parts of
the static gate (descriptor decoding, launch parsing, SASS fingerprints). No nvcc here."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import static_gate
from tirtune.builder import toolchain
from tirtune.kernels import blackwell as blackwell_kernel
from tirtune.kernels import gemm
from tirtune.space import HOPPER, Config, Problem, SpaceError
from tirtune.space.blackwell import BLACKWELL, JOURNEY, STATUS, TEMPLATE_VERSION
from tirtune.space.blackwell.rules import SMEM_LIMIT_BYTES, TMEM_COLUMNS, smem_bytes
from tirtune.space.branches import (
    branch,
    branch_for_gpu,
    branch_for_gpu_name,
    branch_for_version,
    parse_compute_capability,
)
from tirtune.space.hopper.knobs import config as hopper_config

P4096 = Problem(4096, 4096, 4096)


def _bw(**knobs: object) -> Config:
    base: dict[str, object] = {
        "blk_m": 128,
        "blk_n": 128,
        "blk_k": 64,
        "stages": 2,
        "consumers": 1,
        "warp_specialized": True,
    }
    return hopper_config(**{**base, **knobs})  # type: ignore[arg-type]


def test_the_space_and_its_size_at_the_seed_problem() -> None:
    assert (BLACKWELL.arch, BLACKWELL.template_version) == ("sm_100a", TEMPLATE_VERSION)
    assert sum(1 for _ in BLACKWELL.configs()) == 14336
    valid = BLACKWELL.valid_configs(P4096)
    assert len(valid) == 972
    threads = [c for c in valid if c.loader == "threads"]
    assert len(threads) == 96 and all(c.stages == 1 and not c.warp_specialized and c.cluster == 1 for c in threads)
    assert {c.cluster for c in valid} == {1, 2} and {c.consumers for c in valid} == {1, 2}
    assert all(smem_bytes(c) <= SMEM_LIMIT_BYTES and c.consumers * c.blk_n <= TMEM_COLUMNS for c in valid)


@pytest.mark.parametrize(
    "config, rule",
    [
        (_bw(blk_m=256), "consumers_own_128_rows"),  # 2 x 128 rows need 2 consumers
        (_bw(consumers=3, blk_m=384), "consumers_own_128_rows"),
        (_bw(cluster=4), "cluster_is_a_cta_pair"),
        (_bw(cluster=2, cluster_dim="n"), "cluster_is_a_cta_pair"),  # a CTA pair splits M
        (_bw(cluster=2, warp_specialized=False, stages=2), "cluster_is_a_cta_pair"),
        (_bw(blk_n=136), "tcgen05_shape_supported"),  # N % 16
        (_bw(blk_n=272), "tcgen05_shape_supported"),  # N > 256
        (_bw(blk_n=16, cluster=2), "tcgen05_shape_supported"),  # M=256 needs N >= 32
        (_bw(blk_n=40, cluster=2), "tcgen05_shape_supported"),
        (_bw(blk_k=96), "blk_k_matches_swizzle"),
        (_bw(stages=1), "pipeline_depth_in_range"),  # warp-specialized needs 2
        (_bw(stages=9), "pipeline_depth_in_range"),
        (_bw(blk_m=256, consumers=2, blk_n=256, blk_k=128, stages=3), "smem_fits"),
        (_bw(raster_group=8), "raster_group_valid"),  # needs persistent
        (_bw(epilogue="stmatrix"), "epilogue_supported"),
        (_bw(loader="threads"), "loader_supported"),  # thread copies: one stage, no producer
        (_bw(loader="threads", warp_specialized=False, stages=2), "loader_supported"),
        (_bw(blk_m=256, consumers=2, persistent=True, schedule="pingpong"), "hopper_knobs_at_default"),
    ],
)
def test_each_rule_refuses_with_its_name(config: Config, rule: str) -> None:
    names = [v.rule for v in BLACKWELL.violations(config, P4096)]
    assert rule in names, names
    with pytest.raises(SpaceError, match="blackwell_gemm cannot build"):
        blackwell_kernel.plan(config, P4096)


def test_tmem_rule_counts_both_consumers() -> None:
    from tirtune.space.blackwell.rules import tmem_columns_fit

    assert tmem_columns_fit(_bw(blk_m=256, consumers=2, blk_n=256), P4096) is None
    reason = tmem_columns_fit(_bw(blk_m=384, consumers=3, blk_n=256), P4096)
    assert reason is not None and "768 TMEM columns > 512" in reason


def test_knobs_only_hopper_implements_are_refused_off_their_default() -> None:
    from tirtune.space.blackwell.rules import hopper_knobs_at_default

    assert hopper_knobs_at_default(_bw(), P4096) is None
    reason = hopper_knobs_at_default(_bw(blk_m=256, consumers=2, persistent=True, schedule="pingpong"), P4096)
    assert reason is not None and "schedule='pingpong'" in reason


def test_tma_needs_16_byte_rows_on_blackwell_too() -> None:
    assert [v.rule for v in BLACKWELL.problem_violations(Problem(64, 64, 12))] == ["tma_row_stride_aligned"]
    assert "tma_store_row_stride_aligned" in [
        v.rule for v in BLACKWELL.violations(_bw(epilogue="tma"), Problem(1000, 1001, 64))
    ]


def test_a_fused_epilogue_is_refused_by_its_problem_rule() -> None:
    """The Blackwell template writes A @ B.T alone (docs/design.md, "Epilogues"): any other
    epilogue is refused before anything is proposed or traced, by name."""

    for text in ("bias", "residual", "bias+residual", "scale_row", "scale_col"):
        fused = Problem.parse("4096x4096x4096", "float16", text)
        refused = BLACKWELL.problem_violations(fused)
        assert [v.rule for v in refused] == ["fused_epilogue_supported"]
        assert f"epilogue={text}: the Blackwell branch has no fused epilogue" in refused[0].reason
        assert not BLACKWELL.is_valid(_bw(), fused) and BLACKWELL.is_valid(_bw(), P4096)
        with pytest.raises(SpaceError, match="fused_epilogue|no fused epilogue"):
            gemm.build(_bw(), fused, "sm_100a")
    assert BLACKWELL.problem_violations(Problem.parse("4096x4096x4096", "float16", "none")) == []


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(BLACKWELL.valid_configs(P4096)))
def test_every_valid_config_plans_within_the_budgets(config: Config) -> None:
    p = blackwell_kernel.plan(config, P4096)
    assert p.tmem_columns <= TMEM_COLUMNS and p.threads <= 1024
    assert p.mma_shape == (128 * config.cluster, config.blk_n, 16)
    assert p.ctas % config.cluster == 0 and p.ctas <= (148 if config.persistent else p.ctas)
    assert p.tiles_per_cluster * p.clusters >= p.tiles


def test_plan_of_the_journey_ends() -> None:
    v1, v8, v9 = (blackwell_kernel.plan(JOURNEY[k].config, JOURNEY[k].problem) for k in ("v1", "v8", "v9"))
    assert (v1.ctas, v1.threads, v1.k_tiles, v1.tiles) == (1, 128, 1, 1)
    assert (v8.cluster_tile, v8.b_rows, v8.ctas, v8.threads, v8.tmem_columns) == ((256, 256), 128, 148, 256, 256)
    assert blackwell_kernel.tx_bytes(v8) == 2 * (128 + 128) * 64 * 2
    assert (v9.cluster_tile, v9.tiles, v9.ctas, v9.threads, v9.tmem_columns) == ((512, 256), 128, 148, 384, 512)
    assert v9.mma_shape == (256, 256, 16) and v9.tiles_per_cluster == 2
    assert blackwell_kernel.plan(JOURNEY["v3"].config, P4096).ctas == 1024


def test_journey_configs_are_valid_points_of_the_space() -> None:
    assert list(JOURNEY) == [f"v{i}" for i in range(1, 10)]
    for name, step in JOURNEY.items():
        assert BLACKWELL.is_valid(step.config, step.problem), (name, BLACKWELL.violations(step.config, step.problem))
    # V3 and V4 differ only in who copies A and B: all threads, then TMA.
    assert JOURNEY["v3"].config.loader == "threads" and JOURNEY["v4"].config.loader == "tma"
    assert JOURNEY["v3"].config.replace(loader="tma") == JOURNEY["v4"].config


# --- the branch switch --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cc, arch", [("9.0", "sm_90a"), ((9, 0), "sm_90a"), ("10.0", "sm_100a"), ("sm_100a", "sm_100a"), ("10", "sm_100a")]
)
def test_branch_for_gpu_picks_the_branch(cc: str, arch: str) -> None:
    assert branch_for_gpu(cc).arch == arch
    assert branch_for_gpu(cc).space is (BLACKWELL if arch == "sm_100a" else HOPPER)


@pytest.mark.parametrize(
    "cc, words",
    [
        ("8.0", "no GEMM template branch"),
        ("12.0", "no GEMM template branch"),
        ("10.3", "sm_103a"),
        ("x.y", "bad compute capability"),
    ],
)
def test_branch_for_gpu_refuses_other_gpus(cc: str, words: str) -> None:
    with pytest.raises(SpaceError, match=words):
        branch_for_gpu(cc)


def test_branch_names_and_status() -> None:
    assert parse_compute_capability("sm_90a") == (9, 0)
    assert branch_for_version(TEMPLATE_VERSION).arch == "sm_100a"
    assert branch_for_version("hopper-gemm/2").arch == "sm_90a"
    assert branch("sm_100a").status_text == STATUS == "compile-checked, not yet run on a B200"
    blackwell = branch("sm_100a")
    assert branch_for_gpu_name("NVIDIA B200") is blackwell and branch_for_gpu_name("NVIDIA GB200") is blackwell
    assert branch_for_gpu_name("NVIDIA H200") is None and branch_for_gpu_name("NVIDIA H100 80GB HBM3") is None


def test_gemm_entry_dispatches_by_arch() -> None:
    assert gemm.template_for("sm_100a") == "tirtune.kernels.blackwell:build"
    with pytest.raises(SpaceError, match="no GEMM template branch for 'sm_80'"):
        gemm.build(hopper_config(), P4096, arch="sm_80")
    with pytest.raises(SpaceError, match="blackwell_gemm cannot build"):
        gemm.build(_bw(stages=1), P4096, arch="sm_100a")


def test_gencode_per_arch() -> None:
    assert toolchain.gencode() == toolchain.GENCODE
    assert toolchain.gencode("sm_100a") == "-gencode=arch=compute_100a,code=sm_100a"
    with pytest.raises(toolchain.ToolchainError, match="unknown target arch"):
        toolchain.gencode("sm_80")


# --- the static gate's pure parts ---------------------------------------------------------------


def test_instruction_descriptor_decoding() -> None:
    # Values TVM 0.27 emitted for the seed's V7 (M=128) and V9 (M=256, N=256) kernels.
    v7 = static_gate.InstrDescriptor.decode(136314896)
    assert (v7.m, v7.n, v7.a_type, v7.b_type, v7.d_type, v7.a_k_major, v7.b_k_major) == (
        128,
        128,
        "f16",
        "f16",
        "f32",
        True,
        True,
    )
    v9 = static_gate.InstrDescriptor.decode(272629776)
    assert (v9.m, v9.n) == (256, 256)
    bf16 = static_gate.InstrDescriptor.decode(272629776 | (1 << 7) | (1 << 10) | (1 << 16))
    assert (bf16.a_type, bf16.b_type, bf16.b_k_major) == ("bf16", "bf16", False)
    call = (
        "tvm_builtin_ptx_tcgen05_mma_ss_mma_cta_group__2_kind__f16((uint)256, (*(uint64_t *)(&(v__2))), "
        "(*(uint64_t *)(&(v__5))), (uint)272629776, (uint)0"
    )
    [parsed] = static_gate.instr_descriptors(call)
    assert (parsed.cta_group, parsed.tmem_column, parsed.descriptor.n) == (2, 256, 256)


HOST = """
  auto cuda_arg_3 = 2;
  auto cuda_arg_4 = 1;
  auto cuda_arg_5 = 148;
  auto cuda_arg_6 = 384;
  auto cuda_arg_7 = 230400;
  size_t cuda_dim = static_cast<size_t>(cuda_arg_5);
  size_t cuda_dim_1 = static_cast<size_t>(cuda_arg_6);
  size_t cuda_dim_2 = static_cast<size_t>(cuda_arg_3);
  size_t cuda_dim_3 = static_cast<size_t>(cuda_arg_4);
  cuda_config.gridDim = dim3(cuda_dim, 1, 1);
  cuda_config.blockDim = dim3(cuda_dim_1, 1, 1);
  cuda_config.dynamicSmemBytes = cuda_arg_7;
  cuda_attrs[0].val.clusterDim.x = cuda_dim_2;
  cuda_attrs[0].val.clusterDim.y = cuda_dim_3;
  cuda_attrs[0].val.clusterDim.z = 1;
"""


def test_launch_dimensions_from_the_host_wrapper() -> None:
    launch = static_gate.launch_dims(HOST)
    assert (launch.grid, launch.block, launch.cluster, launch.dynamic_smem) == (
        (148, 1, 1),
        (384, 1, 1),
        (2, 1, 1),
        230400,
    )
    plain = static_gate.launch_dims(HOST.split("  cuda_attrs")[0])
    assert plain.cluster == (1, 1, 1)


SASS = """
        /*0010*/                   UTCHMMA.2CTA gdesc[UR4], gdesc[UR6], tmem[UR8], idesc[UR11], UPT ;  /* 0x00 */
        /*0020*/              @!P0 UTMALDG.2D.2CTA [UR8], [UR12] ;                    /* 0x00 */
        /*0030*/                   LDTM.x64 R4, tmem[UR4] ;                                /* 0x00 */
        /*0040*/                   EXIT ;                                                  /* 0x00 */
"""


def test_fingerprint_moves_with_any_instruction() -> None:
    first = static_gate.sass_fingerprint(SASS)
    assert first["opcodes"] == {"EXIT": 1, "LDTM.x64": 1, "UTCHMMA.2CTA": 1, "UTMALDG.2D.2CTA": 1}
    assert first["instructions"] == 4 and static_gate.sass_fingerprint(SASS) == first
    changed = static_gate.sass_fingerprint(SASS.replace("LDTM.x64 R4", "LDTM.x64 R6"))
    assert changed["sha256"] != first["sha256"] and changed["opcodes"] == first["opcodes"]


def test_gate_failures_are_named() -> None:
    report = static_gate.GateReport(_bw(), P4096)
    report.check("families", True)
    assert report.passed
    report.check("families", False, "unexpected instruction families: no HGMMA")
    assert not report.passed and report.failures == ["families: unexpected instruction families: no HGMMA"]
    assert report.to_json()["checks"] == {"families": False}
