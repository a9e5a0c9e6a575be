"""Problems, configs and the validity rules of the Hopper space."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import configs, grid_configs, problems, tma_problems

from tirtune.space import (
    HOPPER,
    HOPPER_V1,
    HOPPER_V2,
    HOPPER_V3,
    HOPPER_V4,
    TEMPLATE_VERSION,
    Config,
    Problem,
    SearchSpace,
    SpaceError,
    space_for,
)
from tirtune.space.hopper import knobs, rules
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.space.hopper.knobs import config as hopper_config


@pytest.mark.parametrize(
    "text,expected",
    [
        ("4096x4096x4096", (4096, 4096, 4096)),
        (" 1x2X3 ", (1, 2, 3)),
        ("8192x1024x64", (8192, 1024, 64)),
    ],
)
def test_parse_shapes(text: str, expected: tuple[int, int, int]) -> None:
    p = Problem.parse(text)
    assert (p.m, p.n, p.k) == expected
    assert p.dtype == "float16"


@pytest.mark.parametrize(
    "text", ["", "4096", "4096x4096", "0x1x1", "-1x2x3", "axbxc", "1x2x3x4", "1.5x2x3", "4096x4096x99999999"]
)
def test_parse_rejects_bad_shapes_with_a_reason(text: str) -> None:
    with pytest.raises(SpaceError) as err:
        Problem.parse(text)
    assert str(err.value)  # a message a person can read
    assert "Traceback" not in str(err.value)


@pytest.mark.parametrize(
    "text",
    [
        "\uff14\uff10\uff19\uff16x4096x4096",  # full-width digits
        "4096x4096x\u0664\u0660\u0669\u0666",  # Arabic-Indic digits
        "4096\u3000x4096x4096",  # an ideographic space
        "4096x4096x4096\u00a0",  # a no-break space
        "4096x4096x4096\n",
    ],
)
def test_parse_takes_only_ascii_digits_and_spaces(text: str) -> None:
    with pytest.raises(SpaceError, match="bad shape"):
        Problem.parse(text)


def test_errors_quote_only_a_short_prefix_of_the_input() -> None:
    for call in (lambda: Problem.parse("x" * 100_000), lambda: Problem(8, 8, 8, "y" * 100_000),
                 lambda: Problem.parse("9" * 5000 + "x8x8"), lambda: Problem(10**5000, 8, 8)):
        with pytest.raises(SpaceError) as err:
            call()
        assert len(str(err.value)) < 200


@pytest.mark.parametrize("alias,name", [("fp16", "float16"), ("BF16", "bfloat16"), ("half", "float16")])
def test_dtype_aliases(alias: str, name: str) -> None:
    assert Problem.parse("8x8x8", alias).dtype == name


def test_unsupported_dtype_names_the_choices() -> None:
    with pytest.raises(SpaceError, match="float16, bfloat16"):
        Problem(8, 8, 8, "int8")


def test_problem_flops_and_tflops() -> None:
    p = Problem.parse("4096x4096x4096")
    assert p.flops == 2 * 4096**3
    assert p.tflops(1.0) == pytest.approx(137.438953472)


@given(grid_configs())
def test_config_round_trips_through_json(config: Config) -> None:
    text = json.dumps(config.to_json())
    again = Config.from_json(json.loads(text), HOPPER_KNOBS)
    assert again == config and hash(again) == hash(config)
    assert again.digest() == config.digest()


def test_config_is_frozen_and_rejects_unknown_or_mistyped_knobs() -> None:
    c = hopper_config()
    with pytest.raises(AttributeError):
        c.blk_m = 64  # type: ignore[misc]
    with pytest.raises(SpaceError, match="unknown config knob"):
        Config.from_json({"blk_q": 1}, HOPPER_KNOBS)
    with pytest.raises(SpaceError, match="integer"):
        Config.from_json({"blk_m": "128"}, HOPPER_KNOBS)
    with pytest.raises(SpaceError, match="true or false"):
        Config.from_json({"warp_specialized": 1}, HOPPER_KNOBS)
    with pytest.raises(SpaceError, match="string"):
        Config.from_json({"epilogue": 1}, HOPPER_KNOBS)


def test_hopper_gemm_1_configs_keep_their_json_and_digest() -> None:
    """Old records (six knobs) parse to the same config, and knobs added by hopper-gemm/2 stay
    out of the canonical form at their defaults, so its digest (stored identity) is unchanged."""
    old = {"blk_m": 128, "blk_n": 256, "blk_k": 64, "stages": 4, "consumers": 2, "warp_specialized": True}
    c = Config.from_json(old, HOPPER_KNOBS)
    assert c.to_json() == {
        **old,
        "persistent": False,
        "raster_group": 1,
        "epilogue": "register",
        "cluster": 1,
        "cluster_dim": "m",
        "schedule": "cooperative",
        "reg_split": "232/40",
        "loader": "tma",
        "epilogue_warpgroup": False,
        "swap_ab": False,
        "split_k": 1,
        "split_k_reduce": "dsmem",
        "l2_hint": "none/none",
        "l2_promotion": "128B",
        "prefetch_tensormap": False,
        "trim": False,
        "peel_k": False,
        "k_rotate": False,
        "split_k_scope": "all",
        "stream_k": False,
        "stream_k_scope": "all",
        "block_stagger": False,
    }
    assert c.canonical() == json.dumps(old, sort_keys=True, separators=(",", ":"))
    canonical = json.dumps(old, sort_keys=True, separators=(",", ":"))
    assert c.digest() == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    new = hopper_config(128, 256, 64, 3, 2, True, persistent=True, raster_group=8, epilogue="tma")
    assert new.to_json()["epilogue"] == "tma" and Config.from_json(new.to_json(), HOPPER_KNOBS) == new
    assert new.label() == "128x256x64 s3 c2 ws persist g8 tma"


def test_spaces_by_template_version() -> None:
    assert space_for(TEMPLATE_VERSION) is HOPPER and TEMPLATE_VERSION == "hopper-gemm/5"
    assert space_for("hopper-gemm/1") is HOPPER_V1 and space_for("hopper-gemm/2") is HOPPER_V2
    assert space_for("hopper-gemm/3") is HOPPER_V3 and space_for("hopper-gemm/4") is HOPPER_V4
    assert set(HOPPER_V1.knobs) == {"blk_m", "blk_n", "blk_k", "stages", "consumers", "warp_specialized"}
    assert set(HOPPER_V2.knobs) == set(HOPPER_V1.knobs) | {"persistent", "raster_group", "epilogue"}
    p = Problem(4096, 4096, 4096)
    v1, v2 = set(HOPPER_V1.valid_configs(p)), set(HOPPER_V2.valid_configs(p))
    assert len(v1) == 156 and len(v2) == 596  # the recorded hopper-gemm/1 sweep, the hopper-gemm/2 tune
    v3 = set(HOPPER_V3.valid_configs(p))
    assert v1 < v2 < v3 and len(v3) == 13945  # the space the bench/data recordings sample
    # hopper-gemm/4 and /5 keep every hopper-gemm/3 point (/4's 7M-point grid is too slow to list
    # here: 28,880 valid at 4096^3 fp16, 40 s; /5's 180M points: 79,544, 20-90 s).
    assert all(HOPPER_V4.is_valid(c, p) and HOPPER.is_valid(c, p) for c in v3)
    assert set(HOPPER_V4.knobs) == set(HOPPER_V3.knobs) | {"epilogue_warpgroup"}
    assert set(HOPPER.knobs) == set(HOPPER_V4.knobs) | {
        "swap_ab", "split_k", "split_k_reduce", "l2_hint", "l2_promotion", "prefetch_tensormap", "trim",
        "peel_k", "k_rotate", "split_k_scope", "stream_k", "stream_k_scope", "block_stagger",
    }
    assert set(HOPPER.knobs["blk_n"]) > set(HOPPER_V4.knobs["blk_n"]) == set(rules.V4_BLK_N)
    with pytest.raises(SpaceError, match="unknown template version"):
        space_for("hopper-gemm/0")


def test_older_spaces_refuse_the_knobs_they_do_not_have() -> None:
    p = Problem(4096, 4096, 4096)
    pingpong = hopper_config(64, 256, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma", schedule="pingpong")
    assert HOPPER.is_valid(pingpong, p)
    assert [v.rule for v in HOPPER_V2.violations(pingpong, p)] == ["knobs_of_this_space"]
    assert not HOPPER_V2.is_valid(pingpong, p)
    assert [v.rule for v in HOPPER_V1.violations(hopper_config(persistent=True), p)] == ["knobs_of_this_space"]
    # hopper-gemm/2 needed a producer for persistent CTAs; hopper-gemm/3 restarts the ring per tile.
    mono = hopper_config(128, 128, 64, 3, 2, False, persistent=True)
    assert [v.rule for v in HOPPER_V2.violations(mono, p)] == ["persistent_needs_producer"]
    assert HOPPER.is_valid(mono, p)


def test_one_check_holds_the_knobs_a_space_or_branch_lacks_at_their_defaults() -> None:
    from tirtune.space.blackwell import BLACKWELL
    from tirtune.space.blackwell.rules import hopper_knobs_at_default

    p = Problem(4096, 4096, 4096)
    pingpong = hopper_config(128, 128, 64, 4, 2, True, persistent=True, schedule="pingpong", reg_split="240/24")
    assert rules.knobs_off_default(pingpong, HOPPER.knobs) == [] and HOPPER.holds(pingpong)
    assert rules.knobs_off_default(pingpong, HOPPER_V2.knobs) == ["schedule='pingpong'", "reg_split='240/24'"]
    assert [(v.rule, v.reason) for v in HOPPER_V2.violations(pingpong, p)] == [
        ("knobs_of_this_space", "hopper-gemm/2 has no knob schedule='pingpong', reg_split='240/24' (only the default)")
    ]
    assert not HOPPER_V2.holds(pingpong) and not BLACKWELL.holds(pingpong)
    assert hopper_knobs_at_default(pingpong, p) == (
        "the Blackwell branch has no code path for schedule='pingpong', reg_split='240/24' (only the default)"
    )
    # The Blackwell template reads cluster_dim (only "m" is a CTA pair); its space has no such knob.
    assert hopper_knobs_at_default(hopper_config(cluster_dim="n"), p) is None and not BLACKWELL.holds(hopper_config(cluster_dim="n"))
    # holds: a grid point of the space (its knobs' values), rules and problems not asked.
    assert not HOPPER_V2.holds(hopper_config(blk_n=8)) and HOPPER.holds(hopper_config(blk_n=8))


def test_new_knobs_at_their_defaults_keep_hopper_gemm_2_digests() -> None:
    old = {
        "blk_m": 128,
        "blk_n": 256,
        "blk_k": 64,
        "stages": 3,
        "consumers": 2,
        "warp_specialized": True,
        "persistent": True,
        "raster_group": 8,
        "epilogue": "tma",
    }
    c = Config.from_json(old, HOPPER_KNOBS)
    canonical = json.dumps(old, sort_keys=True, separators=(",", ":"))
    assert c.digest() == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    assert Config.from_json({**old, "schedule": "pingpong"}, HOPPER_KNOBS).digest() != c.digest()
    assert (
        hopper_config(schedule="pingpong", reg_split="240/24", loader="threads", cluster=2)
        .label()
        .endswith("cl2m pingpong r240/24 threads-load")
    )


SQUARE = Problem(4096, 4096, 4096)


def _rules(config: Config, problem: Problem = SQUARE) -> list[str]:
    return [v.rule for v in HOPPER.violations(config, problem)]


P8 = {"persistent": True, "raster_group": 8}


def test_rules_of_the_schedule_and_register_knobs() -> None:
    assert _rules(hopper_config(64, 256, 64, 4, 2, True, **P8, epilogue="tma", schedule="pingpong")) == []
    assert _rules(hopper_config(64, 256, 64, 4, 2, True, epilogue="tma", schedule="pingpong")) == ["schedule_supported"]
    assert _rules(hopper_config(64, 256, 64, 4, 1, True, **P8, schedule="pingpong")) == ["schedule_supported"]
    assert _rules(hopper_config(128, 128, 64, 4, 2, True, **P8, schedule="zigzag")) == ["schedule_supported"]
    # Ping-pong consumers own whole tiles: 256 rows is more than one warpgroup's wgmma tiles, and
    # 128x256 would be 256 accumulators a thread.
    assert _rules(hopper_config(256, 64, 64, 3, 2, True, **P8, schedule="pingpong")) == ["consumers_split_m"]
    assert _rules(hopper_config(128, 256, 64, 3, 2, True, **P8, schedule="pingpong")) == ["accumulator_fits_registers"]
    assert _rules(hopper_config(128, 256, 64, 4, 2, True, reg_split="240/24")) == []
    assert _rules(hopper_config(128, 128, 64, 4, 1, True, reg_split="240/24")) == ["reg_split_valid"]
    assert _rules(hopper_config(128, 256, 64, 4, 2, True, reg_split="256/0")) == ["reg_split_valid"]
    # 128x64 over two consumers is 32 accumulators a thread: ptxas ignores setmaxnreg there.
    assert not rules.rebalances_registers(hopper_config(128, 64, 64, 4, 2, True))
    assert _rules(hopper_config(128, 64, 64, 4, 2, True, reg_split="240/24")) == ["reg_split_valid"]
    assert rules.rebalances_registers(hopper_config(128, 128, 64, 4, 2, True))


def test_a_consumer_thread_holds_up_to_192_accumulators_in_hopper_gemm_5() -> None:
    """cuBLAS's tile at 3000x5000x2000 (256x152 cooperative: 152 accumulators a consumer thread) is
    in hopper-gemm/5's space; 200 is past the limit; hopper-gemm/1-4 keep 128 (their recordings)."""
    ragged = Problem(3000, 5000, 2000)
    cublas_tile = hopper_config(256, 152, 64, 3, 2, True, **P8, epilogue="tma_chunked")
    assert _rules(cublas_tile, ragged) == []
    assert _rules(cublas_tile.replace(blk_n=200), ragged) == ["accumulator_fits_registers"]
    wide = hopper_config(128, 192, 64, 4, 1, True)  # one consumer of 128 rows: 192 accumulators
    assert _rules(wide) == []
    assert [v.rule for v in HOPPER_V4.violations(wide, SQUARE)] == ["v4_accumulator_limit"]


def test_three_consumer_warpgroups_where_their_registers_fit() -> None:
    # 4 warpgroups with the producer get 128 registers a thread: 64 accumulators fit, 96 do not.
    assert _rules(hopper_config(192, 128, 64, 4, 3, True, **P8, epilogue="tma_chunked")) == []
    assert _rules(hopper_config(192, 192, 64, 4, 3, True, **P8)) == ["registers_fit"]
    # Without a producer (3 warpgroups, 168 registers) 64x256 per consumer fits.
    assert _rules(hopper_config(192, 256, 64, 3, 3, False)) == []
    assert _rules(hopper_config(192, 128, 64, 4, 2, True)) == ["consumers_split_m"]
    assert rules.register_budget(hopper_config(128, 256, 64, 4, 2, True, reg_split="240/24")) == 240
    assert rules.register_budget(hopper_config(192, 128, 64, 4, 3, True)) == 128


def test_rules_of_the_epilogue_staging() -> None:
    # Whole-tile staging (64 KiB) leaves room for 3 stages of 128x256x64, 64x64 chunks for 4.
    assert _rules(hopper_config(128, 256, 64, 4, 2, True, **P8, epilogue="tma")) == ["smem_fits"]
    assert _rules(hopper_config(128, 256, 64, 4, 2, True, **P8, epilogue="tma_chunked")) == []
    assert _rules(hopper_config(128, 256, 64, 5, 2, True, **P8, epilogue="tma_chunked")) == ["smem_fits"]
    # Ping-pong stages two whole tiles (2 x 32 KiB): 4 stages of 64x256x64 fit beside them, 5 do not.
    assert _rules(hopper_config(64, 256, 64, 4, 2, True, **P8, epilogue="tma", schedule="pingpong")) == []
    assert _rules(hopper_config(64, 256, 64, 5, 2, True, **P8, epilogue="tma", schedule="pingpong")) == ["smem_fits"]
    assert rules.staging_bytes(hopper_config(64, 256, 64, 4, 2, True, epilogue="tma", schedule="pingpong")) == 65536
    assert rules.staging_bytes(hopper_config(128, 256, 64, 4, 2, True, epilogue="tma_chunked")) == 32768
    assert _rules(hopper_config(128, 96, 64, 3, 2, True, epilogue="tma_chunked")) == ["store_box_divides_tile"]
    assert _rules(hopper_config(128, 96, 64, 3, 2, True)) == []
    assert _rules(hopper_config(128, 128, 64, 3, 2, True, epilogue="tma_chunked"), Problem(777, 333, 136)) == [
        "tma_store_row_stride_aligned"
    ]


def test_rules_of_clusters() -> None:
    ok = hopper_config(128, 256, 64, 4, 2, True, **P8, epilogue="tma_chunked", cluster=2)
    assert _rules(ok) == [] and _rules(hopper_config(**{**ok.to_json(), "cluster_dim": "n"})) == []
    assert _rules(hopper_config(128, 128, 64, 4, 2, True, cluster=2)) == ["cluster_supported"]  # not persistent
    assert _rules(hopper_config(128, 128, 64, 4, 2, False, persistent=True, cluster=2)) == ["cluster_supported"]
    assert _rules(hopper_config(128, 128, 64, 4, 2, True, **P8, cluster=3)) == ["cluster_supported"]
    assert _rules(hopper_config(128, 128, 64, 4, 2, True, **P8, cluster=2, cluster_dim="k")) == ["cluster_supported"]
    # 1100 rows are 9 tiles of 128: no pairs; along N (4096/128 = 32 tiles) they pair up.
    odd_m = Problem(1100, 4096, 4096)
    assert _rules(hopper_config(128, 128, 64, 4, 2, True, **P8, cluster=2), odd_m) == ["cluster_divides_grid"]
    assert _rules(hopper_config(128, 128, 64, 4, 2, True, **P8, cluster=2, cluster_dim="n"), odd_m) == []
    # A 4-CTA cluster along M splits B's rows into slices of whole 8-row swizzle atoms: 48 rows are
    # 16 + 16 + 8 + 8, but 24 rows are three atoms, one short of a slice for every CTA.
    assert _rules(hopper_config(128, 48, 64, 4, 2, True, **P8, cluster=4)) == []
    assert _rules(hopper_config(128, 24, 64, 4, 2, True, **P8, cluster=4)) == ["multicast_slice_aligned"]
    assert _rules(hopper_config(128, 64, 64, 4, 2, True, **P8, cluster=4)) == []


def test_rules_of_the_thread_loader() -> None:
    assert _rules(hopper_config(128, 128, 64, 1, 1, False, loader="threads")) == []
    assert _rules(hopper_config(128, 128, 64, 2, 1, False, loader="threads")) == ["loader_supported"]
    assert _rules(hopper_config(128, 128, 64, 2, 2, True, loader="threads")) == ["loader_supported"]
    assert _rules(hopper_config(128, 128, 64, 1, 1, False, loader="cp.async")) == ["loader_supported"]
    # One stage with the copy engine is the journey's V4: load, wait, multiply.
    assert _rules(hopper_config(128, 128, 64, 1, 1, False)) == []
    assert _rules(hopper_config(128, 128, 64, 1, 2, True)) == ["pipeline_depth_in_range"]


def test_deep_rings_build_where_shared_memory_fits_but_the_grid_stops_at_8() -> None:
    decode = Problem(16, 4096, 4096)
    tile = hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, l2_hint="first/none")
    # 20 KB stages: 11 fit the 227 KB (225 KB), 12 do not; past MAX_STAGES the ring refuses.
    assert _rules(tile.replace(stages=11), decode) == []
    assert _rules(tile.replace(stages=12), decode) == ["smem_fits"]
    assert _rules(tile.replace(blk_k=64, stages=20), decode) == []
    assert _rules(tile.replace(blk_k=64, stages=21), decode) == ["pipeline_depth_in_range"]
    # Measured slower than 8 (bench/results/kits/2026-12-01-decode-deep.md): valid for a kit, never drawn by a search.
    assert HOPPER.holds(tile) and not HOPPER.holds(tile.replace(stages=11))


def test_rules_of_the_persistent_and_tma_store_knobs() -> None:
    p = Problem(4096, 4096, 4096)
    tma = hopper_config(128, 256, 64, 3, 2, True, persistent=True, raster_group=8, epilogue="tma")
    assert HOPPER.is_valid(tma, p)
    # The staging tile (128x256x2 B = 64 KiB) leaves room for 3 stages of 128x256x64, not 4.
    assert [v.rule for v in HOPPER.violations(hopper_config(128, 256, 64, 4, 2, True, epilogue="tma"), p)] == ["smem_fits"]
    assert HOPPER.is_valid(hopper_config(128, 256, 64, 4, 2, True, persistent=True), p)
    assert [v.rule for v in HOPPER.violations(tma, Problem(777, 333, 136))] == ["tma_store_row_stride_aligned"]
    assert HOPPER.is_valid(hopper_config(128, 128, 64, 3, 2, True, persistent=True), Problem(777, 333, 136))
    assert [v.rule for v in HOPPER_V2.violations(hopper_config(128, 128, 64, 4, 2, False, persistent=True), p)] == [
        "persistent_needs_producer"
    ]
    assert [v.rule for v in HOPPER.violations(hopper_config(raster_group=8), p)] == ["raster_group_valid"]
    assert [v.rule for v in HOPPER.violations(hopper_config(epilogue="smem"), p)] == ["epilogue_supported"]


def test_tma_refuses_misaligned_k_before_compiling() -> None:
    with pytest.raises(SpaceError, match="multiple of 8"):
        HOPPER.check_problem(Problem(128, 128, 4001))
    HOPPER.check_problem(Problem(1000, 1000, 4000))  # M, N need no alignment


@pytest.mark.parametrize("space", [HOPPER, HOPPER_V4, HOPPER_V3, HOPPER_V2, HOPPER_V1],
                         ids=lambda s: s.template_version)
@pytest.mark.parametrize("k", [4, 4092, 8188])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_hopper_refuses_k_4_mod_8(space: SearchSpace, k: int, dtype: str) -> None:
    """K = 4 (mod 8): a row of 8 B more than a multiple of 16 B. Odd K breaks any even alignment;
    only this one tells TMA's 16-byte rule from an 8-byte one."""
    assert k % 8 == 4
    refused = space.problem_violations(Problem(64, 64, k, dtype))
    assert [v.rule for v in refused] == ["tma_row_stride_aligned"]
    assert f"row stride of {2 * k} B" in refused[0].reason and "multiple of 8" in refused[0].reason
    assert not space.is_valid(hopper_config(), Problem(64, 64, k, dtype))
    assert space.problem_violations(Problem(64, 64, k + 4, dtype)) == []  # the next multiple of 8


@settings(deadline=None)
@given(tma_problems())
def test_every_tma_addressable_problem_has_valid_configs(problem: Problem) -> None:
    # The rule-pruned walk a job's repairs use (a scan of the grid in order passed 737,281 invalid
    # points before the first valid one once k_rotate doubled the innermost knob: 12-18 s a problem).
    assert HOPPER.problem_violations(problem) == []
    found = HOPPER.nearest_valid(hopper_config(), problem)
    assert found is not None and HOPPER.is_valid(found, problem), "each addressable problem must be tunable"


@given(configs(), problems())
def test_violations_are_named_and_explained(config: Config, problem: Problem) -> None:
    for v in HOPPER.violations(config, problem):
        assert v.rule in {r.__name__ for r in (*HOPPER.config_rules, *HOPPER.problem_rules)}
        assert len(v.reason) > 10


@given(grid_configs())
def test_valid_configs_respect_the_hardware_budgets(config: Config) -> None:
    problem = Problem(4096, 4096, 4096)
    if HOPPER.is_valid(config, problem):
        assert rules.smem_bytes(config) <= rules.SMEM_LIMIT_BYTES
        rows = rules.consumer_rows(config)
        assert rows in (64, 128)
        assert rows * config.blk_n // 128 <= rules.MAX_ACCUMULATOR_REGS
        # setmaxnreg only redistributes the CTA's launch allocation: asking for more hangs.
        groups, launch = rules.warpgroups(config), rules.launch_registers(config)
        if rules.rebalances_registers(config):
            consumer, other = (int(v) for v in config.reg_split.split("/"))
            assert config.consumers * consumer + (groups - config.consumers) * other <= groups * launch
            assert other <= launch <= consumer
        assert config.blk_n // 2 + rules.WGMMA_OPERAND_REGS <= launch
        # hopper-gemm/5: a split-K cluster is one tile per cluster, reduced from registers, over
        # equal shares of the k-tiles; the swapped fragment leaves through registers.
        if config.split_k > 1:
            assert not config.persistent and config.cluster == 1 and config.epilogue == "register"
            assert -(-problem.k // config.blk_k) % config.split_k == 0
            assert rules.split_k_bytes(config) == config.blk_m * config.blk_n * 4
        if config.swap_ab:
            assert config.epilogue == "register" and not config.epilogue_warpgroup


def test_known_points() -> None:
    p = Problem(4096, 4096, 4096)
    assert HOPPER.is_valid(hopper_config(128, 256, 64, 4, 2, True), p)
    big = hopper_config(128, 256, 128, 6, 2, True)
    assert [v.rule for v in HOPPER.violations(big, p)] == ["smem_fits"]
    assert [v.rule for v in HOPPER.violations(hopper_config(256, 256, 64, 2, 1, True), p)] == [
        "consumers_split_m",
        "accumulator_fits_registers",
    ]


@given(st.text(max_size=30))
def test_parse_never_raises_anything_but_space_error(text: str) -> None:
    try:
        Problem.parse(text)
    except SpaceError:
        pass


def test_the_journey_is_nine_valid_configs_of_this_space() -> None:
    from bench import journey

    steps = journey.JOURNEY
    assert [s.name for s in steps] == [f"V{i}" for i in range(1, 10)]
    assert all(HOPPER.is_valid(s.config, s.problem) for s in steps)
    assert all(s.problem == SQUARE for s in steps[2:])
    # V3 -> V4 is the loader, V4 -> V5 the second stage: each step differs from the one before.
    assert steps[2].config.loader == "threads" and steps[3].config.loader == "tma"
    assert len({(s.config, s.problem) for s in steps}) == 9


def test_hopper_gemm_4_layouts_and_their_register_rules() -> None:
    p = Problem(4096, 4096, 4096)
    ewg = hopper_config(256, 128, 64, 4, 2, True, persistent=True, epilogue="tma_chunked", epilogue_warpgroup=True)
    # Four warpgroups start at 128 registers a thread: 2 x 232 + 2 x 40 > 512, so the epilogue
    # warpgroup's layout needs the 232/24 split; hopper-gemm/3 has no such knob.
    assert [v.rule for v in HOPPER.violations(ewg, p)] == ["reg_split_valid"]
    assert HOPPER.is_valid(ewg.replace(reg_split="232/24"), p)
    assert [v.rule for v in HOPPER_V3.violations(ewg.replace(reg_split="232/24"), p)] == [
        "v3_values",
        "knobs_of_this_space",
    ]
    # It stores what the consumers staged: a TMA-store epilogue and a producer.
    assert "epilogue_warpgroup_supported" in [
        v.rule for v in HOPPER.violations(ewg.replace(epilogue="register", reg_split="232/24"), p)
    ]
    # One m64n256 wgmma holds 128 accumulators: ptxas needs 154 registers, 4 warpgroups give 128.
    wide = hopper_config(128, 256, 64, 4, 2, True, persistent=True, epilogue="tma_chunked", epilogue_warpgroup=True,
                  reg_split="232/24")
    assert [v.rule for v in HOPPER.violations(wide, p)] == ["wgmma_fits_launch_registers"]
    # Four consumers of 64 rows: 5 warpgroups start at 96 registers; 64 accumulators + 40 need the
    # 112/24 split, and 3 stages leave room for four consumers' staging buffers.
    four = hopper_config(256, 128, 64, 3, 4, True, persistent=True, epilogue="tma_chunked")
    assert [v.rule for v in HOPPER.violations(four, p)] == ["reg_split_valid"]
    assert HOPPER.is_valid(four.replace(reg_split="112/24"), p)
    assert [v.rule for v in HOPPER_V3.violations(four.replace(reg_split="112/24"), p)] == ["v3_values"]
    assert rules.launch_registers(four) == 96 and rules.register_budget(four.replace(reg_split="112/24")) == 112
    # setmaxnreg.inc takes registers only from the CTA's launch allocation (5 x 96 a thread of one
    # warpgroup): 4 x 120 + 24 = 504 would make the consumers wait forever (it hung on the H200).
    assert "wait forever" in str(HOPPER.violations(four.replace(reg_split="240/24"), p))
    # Without a producer four consumers start at 128 registers: 64 accumulators fit without setmaxnreg.
    assert HOPPER.is_valid(hopper_config(256, 128, 64, 3, 4, False), p)
    assert not rules.rebalances_registers(hopper_config(256, 128, 64, 3, 4, False))


def test_column_major_raster_is_one_group_of_every_tile_row() -> None:
    from types import SimpleNamespace

    from tirtune.kernels.skeleton import TileSchedule, raster

    T = SimpleNamespace(min=min)  # raster's only TIR call, on plain ints here
    sched = TileSchedule.of((5, 3), 1, True, 132, 0)
    assert sched.raster_group == 5
    assert [raster(T, t, 5, 3, sched.raster_group) for t in range(15)] == [(t % 5, t // 5) for t in range(15)]
    assert [raster(T, t, 5, 3, 1) for t in range(15)] == [(t // 3, t % 3) for t in range(15)]  # row-major
    assert hopper_config(persistent=True, raster_group=0).label().endswith("persist gcol")
    p = Problem(4096, 4096, 4096)
    assert HOPPER.is_valid(hopper_config(128, 128, 64, 4, 2, True, persistent=True, raster_group=0), p)
    assert [v.rule for v in HOPPER.violations(hopper_config(raster_group=0), p)] == ["raster_group_valid"]
    assert "v3_values" in [v.rule for v in HOPPER_V3.violations(hopper_config(persistent=True, raster_group=0), p)]


DECODE = Problem(16, 4096, 4096)
GEMV = Problem(1, 4096, 4096)


def test_hopper_gemm_5_knobs_keep_older_digests_and_name_themselves() -> None:
    old = hopper_config(128, 256, 64, 3, 2, True, persistent=True, raster_group=8, epilogue="tma")
    assert not {"swap_ab", "split_k", "split_k_reduce"} & set(json.loads(old.canonical()))
    sk = hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, split_k=2)
    assert sk.label() == "64x16x128 s8 c1 ws sk2 swap"
    assert len({sk.digest(), sk.replace(swap_ab=False).digest(), sk.replace(split_k=1).digest()}) == 3
    assert Config.from_json(sk.to_json(), HOPPER_KNOBS) == sk


def test_rules_of_swap_ab() -> None:
    ok = hopper_config(64, 16, 128, 8, 1, True, swap_ab=True)
    assert _rules(ok, DECODE) == []
    # The transposed fragment leaves through registers or box by box through the chunked TMA store
    # (stmatrix .trans), not through "tma"'s whole rows.
    assert _rules(hopper_config(64, 64, 64, 4, 1, True, swap_ab=True, epilogue="tma_chunked"), DECODE) == []
    assert _rules(hopper_config(64, 64, 64, 4, 1, True, swap_ab=True, epilogue="tma"), DECODE) == [
        "swap_ab_supported"
    ]
    # Swapped, the chunked store's narrower last box is D's last rows: any width of 64 or more
    # takes it; unswapped, only the ragged widths past 128 (a narrower last box of columns).
    mid = Problem(398, 11008, 4096)
    for width in (72, 96, 120, 136, 216):
        swapped = hopper_config(128, width, 64, 4, 2, True, persistent=True, swap_ab=True, epilogue="tma_chunked")
        assert _rules(swapped, mid) == [], width
    assert _rules(hopper_config(128, 96, 64, 4, 2, True, persistent=True, epilogue="tma_chunked"), mid) == [
        "store_box_divides_tile"
    ]
    assert _rules(hopper_config(128, 56, 64, 4, 2, True, persistent=True, swap_ab=True, epilogue="tma_chunked"),
                  mid) == ["store_box_divides_tile"]
    # Clusters pair the kernel's tiles: swapped, its M is the problem's N (4096 = 32 tiles of 128),
    # where the problem's M (1100 = 9 tiles) does not pair up.
    pairs = hopper_config(128, 64, 64, 4, 2, True, persistent=True, cluster=2)
    ragged = Problem(1100, 4096, 4096)
    assert _rules(pairs, ragged) == ["cluster_divides_grid"]
    assert _rules(pairs.replace(swap_ab=True), ragged) == []
    assert rules.kernel_shape(pairs.replace(swap_ab=True), ragged) == (4096, 1100)


def test_swapped_ping_pong_kernels_in_multicast_clusters_are_refused() -> None:
    """The suite's one wrong kernel (bench/prebuild.SUITE_WRONG) and its wrong neighbours on the
    H200 (bench/results/sweeps/2026-11-30-wrong-kernel-neighbours.md: clusters of 2 along M and N, 4 and 8
    stages) are refused; the same
    kernel without swap, or without a cluster, was right and stays valid."""
    from bench.prebuild import SUITE_WRONG

    square = Problem(1024, 1024, 1024)
    both = ["swap_ab_pingpong_unclustered", "swap_ab_pingpong_wide"]  # 64 rows, 128 wide
    assert _rules(SUITE_WRONG, square) == both
    for wrong in (SUITE_WRONG.replace(stages=4), SUITE_WRONG.replace(cluster_dim="n"),
                  SUITE_WRONG.replace(cluster=4)):
        assert _rules(wrong, square) == both
    assert _rules(SUITE_WRONG.replace(blk_n=96, reg_split="232/40"), square) == ["swap_ab_pingpong_unclustered"]
    assert _rules(SUITE_WRONG.replace(swap_ab=False), square) == []
    # Without a cluster the 64x128 tile is refused too, as a wide swapped ping-pong tile (below);
    # narrower, it is valid.
    assert _rules(SUITE_WRONG.replace(cluster=1), square) == ["swap_ab_pingpong_wide"]
    assert _rules(SUITE_WRONG.replace(cluster=1, blk_n=96, reg_split="232/40"), square) == []
    reason = HOPPER.violations(SUITE_WRONG, square)[0].reason
    assert "cluster=1" in reason and "sweeps/2026-11-30-wrong-kernel-neighbours.md" in reason


def test_wide_swapped_ping_pong_tiles_of_64_rows_are_refused_with_or_without_a_cluster() -> None:
    """The unclustered swapped ping-pong kernels that jobs' checks found wrong on the H200
    (bench/results/generalize/tuner-quality-2026-12-03-trials.csv and the draw's trials, the
    WRONG_RESULT rows) are refused by swap_ab_pingpong_wide; the narrow ones that are the decode
    and small-M bests, 128-row tiles, and the same tiles unswapped or cooperative stay valid."""
    found_wrong = (
        (Config.from_label("64x224x64 s4 c2 ws persist g8 pingpong swap l2 none/first", HOPPER_KNOBS),
         Problem(1748, 1024, 1536, "bfloat16")),
        (Config.from_label("64x256x64 s4 c2 ws persist pingpong r240/24 swap l2 first/last p256B", HOPPER_KNOBS),
         Problem(1748, 1024, 1536, "bfloat16")),
        (Config.from_label("64x144x64 s5 c2 ws persist g8 pingpong swap l2 none/first p256B", HOPPER_KNOBS),
         Problem(285, 17920, 5120)),
        (Config.from_label("64x256x64 s5 c2 ws persist g8 pingpong swap l2 none/first", HOPPER_KNOBS), Problem(5861, 13824, 5120)),
    )
    for config, problem in found_wrong:
        assert _rules(config, problem) == ["swap_ab_pingpong_wide"], config.label()
        assert _rules(config.replace(swap_ab=False), problem) == [], config.label()
        alone = config.replace(schedule="cooperative", consumers=1, reg_split="232/40")
        assert _rules(alone, problem) == [], config.label()
    reason = HOPPER.violations(*found_wrong[0])[0].reason
    assert "blk_n <= 120" in reason and "tuner-quality-2026-12-03-trials.csv" in reason
    for label, problem in (
        ("64x64x128 s6 c2 ws persist g8 pingpong swap l2 first/none", Problem(61, 4096, 2048)),
        ("64x40x128 s5 c2 ws persist g16 pingpong swap l2 first/last p256B", Problem(38, 8192, 1024, "bfloat16")),
        ("64x120x64 s4 c2 ws persist g8 pingpong swap", Problem(1748, 1024, 1536, "bfloat16")),
        ("128x184x64 s4 c2 ws persist g16 pingpong swap p256B pftm", Problem(1911, 8192, 2048)),
    ):
        assert _rules(Config.from_label(label, HOPPER_KNOBS), problem) == [], label


def test_trim_takes_what_lies_past_a_ragged_problems_edges_and_nothing_else() -> None:
    """rules.trim_work in the kernel's axes: 3000x5000x2000 in 128x192x64 tiles leaves 8 valid
    columns in the last tile column (m64n8), one k16 step in the last k-tile and 56 rows in the
    last tile row (a dead second m64 block); swapped, the problem's M runs along the kernel's N.
    trim where nothing is ragged, or with split-K, is refused."""
    tile = hopper_config(128, 192, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked", trim=True)
    assert rules.trim_work(tile, Problem(3000, 5000, 2000)) == (8, 1, True)
    assert rules.trim_work(tile.replace(blk_n=256), Problem(4000, 4000, 4000)) == (160, 2, True)
    assert _rules(tile, Problem(3000, 5000, 2000)) == []
    aligned = Problem(3072, 4992, 2048)  # 24 x 128 rows, 26 x 192 columns, 32 k-tiles
    assert rules.trim_work(tile, aligned) == (0, 0, False)
    assert _rules(tile, aligned) == ["trim_supported"] and _rules(tile.replace(trim=False), aligned) == []
    swapped = hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, trim=True)
    assert rules.trim_work(swapped, Problem(13, 4095, 1000)) == (0, 7, False)  # n = 13 -> m64n16 is the tile
    assert "split_k=1" in HOPPER.violations(swapped.replace(split_k=2), Problem(13, 4095, 1000))[0].reason
    assert tile.label().endswith(" trim") and tile.replace(trim=False).digest() != tile.digest()
    assert "trim" not in json.loads(tile.replace(trim=False).canonical())  # old configs keep their digests


def test_k_rotate_only_where_one_operand_is_streamed_once() -> None:
    """k_rotate: valid on the decode tile (one tile along the swapped kernel's N) and the small
    batch's (one along M); refused where tiles share both operands (4096^3), in a cluster (its
    multicast loads one k-tile into every CTA at once), with peel_k or trim (they treat the last
    k-tile apart) and for the thread loader (no ring to order)."""
    decode = hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, l2_hint="first/none", k_rotate=True)
    assert _rules(decode, Problem(16, 4096, 4096)) == [] and _rules(decode, Problem(1, 4096, 14336)) == []
    batch = hopper_config(128, 64, 128, 4, 2, True, l2_hint="none/first", k_rotate=True)
    assert _rules(batch, Problem(128, 4096, 4096)) == []
    assert _rules(batch, Problem(256, 4096, 4096)) == ["k_rotate_supported"]  # two tile rows share B
    square = hopper_config(128, 256, 64, 4, 2, True, **P8, epilogue="tma_chunked", k_rotate=True)
    reason = HOPPER.violations(square, SQUARE)[0]
    assert reason.rule == "k_rotate_supported" and "streamed once" in reason.reason
    assert "k_rotate_supported" in _rules(decode.replace(cluster=2, persistent=True), Problem(16, 4096, 4096))
    assert "k_rotate_supported" in _rules(decode.replace(trim=True), Problem(16, 4096, 4000))
    assert "k_rotate_supported" in _rules(decode.replace(peel_k=True), Problem(16, 4096, 4000))
    threads = hopper_config(64, 16, 64, 1, 1, False, swap_ab=True, loader="threads", k_rotate=True)
    assert "k_rotate_supported" in _rules(threads, Problem(16, 4096, 4096))
    assert _rules(decode.replace(split_k=2), Problem(16, 4096, 4096)) == []
    assert decode.label().endswith(" krot") and decode.replace(k_rotate=False).digest() != decode.digest()
    assert "k_rotate" not in json.loads(decode.replace(k_rotate=False).canonical())  # old configs keep digests
    assert not HOPPER_V4.is_valid(decode, Problem(16, 4096, 4096))


def test_peel_k_skips_the_last_k_tiles_padding_and_nothing_else() -> None:
    """rules.k_tail_steps: K = 2000 in 64-deep k-tiles leaves 16 live columns in the last, 1 k16
    step of 4; 4000 leaves 2; 1000 in 128-deep tiles 7 of 8; a K whose last k-tile is whole, or
    whose last step count is the tile's (K = 2040: 56 columns, 4 steps), has nothing to peel and
    peel_k is refused there, beside trim and split-K."""
    tile = hopper_config(128, 152, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked", peel_k=True)
    assert rules.k_tail_steps(tile, Problem(3000, 5000, 2000)) == 1
    assert rules.k_tail_steps(tile, Problem(4000, 4000, 4000)) == 2
    assert rules.k_tail_steps(tile.replace(blk_k=128), Problem(700, 900, 1000)) == 7
    assert rules.k_tail_steps(tile, Problem(1000, 1000, 8)) == 1  # one k-tile in all
    for k in (2048, 2040, 1984):
        assert rules.k_tail_steps(tile, Problem(3000, 5000, k)) == 0
        assert _rules(tile, Problem(3000, 5000, k)) == ["peel_k_supported"]
    assert _rules(tile, Problem(3000, 5000, 2000)) == [] and _rules(tile, Problem(4000, 4000, 4000)) == []
    assert _rules(tile.replace(trim=True), Problem(3000, 5000, 2000)) == ["peel_k_supported"]
    split = hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, split_k=2, peel_k=True)
    assert "peel_k_supported" in _rules(split, Problem(16, 4096, 4000))
    assert _rules(split.replace(split_k=1), Problem(16, 4096, 4000)) == []
    # trim's K cut is the same count.
    assert rules.trim_work(tile.replace(peel_k=False, trim=True), Problem(3000, 5000, 2000))[1] == 1
    assert tile.label().endswith(" peelk") and tile.replace(peel_k=False).digest() != tile.digest()
    assert "peel_k" not in json.loads(tile.replace(peel_k=False).canonical())  # old configs keep their digests
    # The older spaces hold it at its default.
    assert not HOPPER_V4.is_valid(tile, Problem(3000, 5000, 2000))
    assert HOPPER.is_valid(tile, Problem(3000, 5000, 2000))


def test_rules_of_split_k() -> None:
    sk = hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, split_k=2)
    assert _rules(sk, DECODE) == []
    # DECODE's K = 4096 is 32 k-tiles of 128: 3 CTAs cannot share them evenly, 9 is no split of the space.
    assert _rules(sk.replace(split_k=3), DECODE) == ["split_k_divides_k_tiles"]
    assert _rules(sk.replace(split_k=9), DECODE) == ["split_k_supported", "split_k_divides_k_tiles"]
    assert _rules(sk.replace(split_k_reduce="atomic"), DECODE) == ["split_k_supported"]
    # One tile per cluster, the cluster is the split, the reduced tile leaves from registers.
    for other in ({"persistent": True}, {"persistent": True, "cluster": 2}, {"loader": "threads", "stages": 1,
                                                                             "warp_specialized": False}):
        assert "split_k_supported" in _rules(sk.replace(**other), DECODE), other
    # K = 896 is 7 k-tiles of 128: no even split over 2, 4 or 8 CTAs, but over 7; 1024 is 8.
    assert _rules(sk.replace(split_k=8), Problem(16, 4096, 896)) == ["split_k_divides_k_tiles"]
    assert _rules(sk.replace(split_k=7), Problem(16, 4096, 896)) == []
    assert _rules(sk.replace(split_k=8), Problem(16, 4096, 1024)) == []
    # Past the portable cluster of 8 CTAs a split reduces serially (no cluster); both divide K = 8192's 64.
    assert _rules(sk.replace(split_k=16), Problem(16, 512, 8192)) == ["split_k_supported"]
    assert _rules(sk.replace(split_k=16, split_k_reduce="serial"), Problem(16, 512, 8192)) == []
    assert "serial takes deeper splits" in HOPPER.violations(sk.replace(split_k=16), Problem(16, 512, 8192))[0].reason
    # The parked fp32 fragments count in shared memory: 5 stages of 128x128x64 (160 KiB) + 64 KiB
    # fit, 6 (192 KiB) only without them.
    assert rules.split_k_bytes(hopper_config(128, 128, 64, 4, 2, True, split_k=2)) == 65536
    assert _rules(hopper_config(128, 128, 64, 5, 2, True, split_k=2), Problem(1024, 1024, 1024)) == []
    assert _rules(hopper_config(128, 128, 64, 6, 2, True, split_k=2), Problem(1024, 1024, 1024)) == ["smem_fits"]
    assert _rules(hopper_config(128, 128, 64, 6, 2, True), Problem(1024, 1024, 1024)) == []
    # The serial reduction keeps its partial tiles in global memory: no shared memory for them,
    # and no cluster (the same one-tile grid, register epilogue and TMA loads).
    serial = hopper_config(128, 128, 64, 6, 2, True, split_k=2, split_k_reduce="serial")
    assert rules.split_k_bytes(serial) == 0 and _rules(serial, Problem(1024, 1024, 1024)) == []
    assert _rules(serial.replace(persistent=True), Problem(1024, 1024, 1024)) == ["split_k_supported"]
    assert serial.label() == "128x128x64 s6 c2 ws sk2-serial"
    # Its static workspace (an fp32 tile per output tile) is capped at 256 MiB: 8192^2 fits, 8200^2 not.
    assert _rules(serial, Problem(8192, 8192, 1024)) == []
    assert _rules(serial, Problem(8200, 8192, 1024)) == ["split_k_workspace_fits"]
    assert _rules(serial.replace(split_k_reduce="dsmem", stages=4), Problem(8200, 8192, 1024)) == []
    assert [v.rule for v in HOPPER_V4.violations(sk, DECODE)] == ["v4_values", "knobs_of_this_space"]


def test_tma_load_options_name_themselves_and_keep_older_digests() -> None:
    old = hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, split_k=2)
    assert not {"l2_hint", "l2_promotion", "prefetch_tensormap"} & set(json.loads(old.canonical()))
    tuned = old.replace(l2_hint="first/last", l2_promotion="256B", prefetch_tensormap=True)
    assert tuned.label() == "64x16x128 s8 c1 ws sk2 swap l2 first/last p256B pftm"
    assert Config.from_json(tuned.to_json(), HOPPER_KNOBS) == tuned
    assert len({old.digest(), tuned.digest(), tuned.replace(prefetch_tensormap=False).digest()}) == 3
    with pytest.raises(SpaceError, match="prefetch_tensormap must be true or false"):
        hopper_config(prefetch_tensormap=1)  # type: ignore[arg-type]


def test_rules_of_the_tma_load_options() -> None:
    sk = hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, split_k=2)
    for hint in knobs.L2_HINTS:
        for promotion in knobs.L2_PROMOTIONS:
            assert _rules(sk.replace(l2_hint=hint, l2_promotion=promotion, prefetch_tensormap=True), DECODE) == []
    # Any "<A>/<B>" pair of policies is buildable; anything else is named.
    assert _rules(sk.replace(l2_hint="last/last"), DECODE) == []
    for bad in ("first", "first/", "evict_first/none", "first/none/last", "none"):
        assert _rules(sk.replace(l2_hint=bad), DECODE) == ["tma_load_options_supported"], bad
    assert _rules(sk.replace(l2_promotion="64B"), DECODE) == ["tma_load_options_supported"]
    # The thread loader has no TMA load to carry them.
    threads = hopper_config(128, 128, 64, 1, 2, False, loader="threads")
    assert _rules(threads) == []
    for option in ({"l2_hint": "first/none"}, {"l2_promotion": "256B"}, {"prefetch_tensormap": True}):
        assert _rules(threads.replace(**option)) == ["tma_load_options_supported"], option
    # hopper-gemm/4 and older have none of them.
    assert [v.rule for v in HOPPER_V4.violations(hopper_config().replace(l2_hint="first/none"), SQUARE)] == [
        "knobs_of_this_space"
    ]


def test_rules_of_four_atom_stages() -> None:
    deep = hopper_config(64, 16, 256, 5, 1, True, swap_ab=True, split_k=2)
    assert _rules(deep, DECODE) == [] and 256 in HOPPER.knobs["blk_k"]
    # Five stages of (64 + 16) x 256 x 2 B = 200 KiB fit; six do not.
    assert _rules(deep.replace(stages=6), DECODE) == ["smem_fits"]
    # At most four 128-byte atoms a stage (one TMA box each).
    assert _rules(hopper_config(64, 16, 320, 2, 1, True, swap_ab=True), DECODE) == ["blk_k_boxes_supported"]
    # K = 3840 is 15 k-tiles of 256: no even split over 2 CTAs (it is 30 of 128).
    assert _rules(deep, Problem(16, 4096, 3840)) == ["split_k_divides_k_tiles"]
    assert _rules(deep.replace(blk_k=128, stages=8), Problem(16, 4096, 3840)) == []
    # hopper-gemm/1-4 loaded one or two atoms a stage.
    unswapped = hopper_config(64, 64, 256, 3, 1, True)
    assert _rules(unswapped) == []
    assert [v.rule for v in HOPPER_V4.violations(unswapped, SQUARE)] == ["v4_values"]
    assert [v.rule for v in HOPPER_V2.violations(unswapped, SQUARE)] == ["v4_values"]


def test_rules_of_one_row_operands() -> None:
    assert _rules(hopper_config(64, 8, 128, 8, 1, True, swap_ab=True), GEMV) == []
    assert _rules(hopper_config(64, 64, 64, 4, 1, True), GEMV) == []
    # One row a stage: no multicast slices of it, and no TMA store of a one-row D.
    assert _rules(hopper_config(128, 16, 64, 4, 2, True, persistent=True, cluster=2, swap_ab=True), GEMV) == [
        "one_row_operand_supported"
    ]
    assert _rules(hopper_config(64, 64, 64, 4, 1, True, persistent=True, epilogue="tma"), GEMV) == [
        "one_row_operand_supported"
    ]
    assert _rules(hopper_config(64, 64, 64, 4, 1, True, persistent=True, epilogue="tma"), Problem(2, 4096, 4096)) == []


@given(grid_configs(), tma_problems(max_dim=5000))
def test_plans_of_valid_configs_are_consistent(config: Config, problem: Problem) -> None:
    """Whatever the knobs, the plan of a valid pair launches whole tiles over the problem: the
    swapped kernel's shape is the problem's transposed, every CTA of a split-K cluster gets the same
    positive number of k-tiles, and a stage's bytes fit its shared memory."""
    from tirtune.kernels.hopper import plan

    if not HOPPER.is_valid(config, problem):
        return
    p = plan(config, problem)
    assert p.problem_shape == (problem.m, problem.n)
    assert (p.m, p.n) == rules.kernel_shape(config, problem)
    assert p.cta_k_tiles >= 1 and p.cta_k_tiles * config.split_k == p.k_tiles
    assert p.ctas == p.tile_schedule.ctas * config.split_k
    assert p.stages * p.stage_bytes <= rules.smem_bytes(config)
    assert p.one_row_a == (p.m == 1) and p.one_row_b == (p.n == 1)


def _rule_functions() -> list[rules.ConfigRule]:
    every = (*HOPPER.config_rules, *HOPPER_V4.config_rules, *HOPPER_V3.config_rules, *HOPPER_V2.config_rules)
    return list(dict.fromkeys(every))


def test_every_config_rule_declares_what_it_reads() -> None:
    for rule in _rule_functions():
        read = rules.knobs_read(rule)
        assert read, f"{rule.__name__} declares no knobs (rules.reads)"
        assert read <= set(HOPPER.table.names), (rule.__name__, read)


@given(st.one_of(grid_configs(), configs()), st.one_of(grid_configs(), configs()), problems(max_dim=5000))
def test_rules_read_only_the_knobs_they_declare(a: Config, b: Config, problem: Problem) -> None:
    """A rule's answer for `a` is its answer for any config that agrees with `a` on the knobs the
    rule declares: what SearchSpace.valid_configs relies on to cut a prefix of the grid."""
    for rule in _rule_functions():
        read = rules.knobs_read(rule)
        assert read is not None
        spliced = b.replace(**{k: getattr(a, k) for k in read})
        assert rule(spliced, problem) == rule(a, problem), rule.__name__


# Two values of every knob (three of the hopper-gemm/5 ones): ~1.2M points, listed both ways.
_SMALL_GRID = {
    "blk_m": (64, 128), "blk_n": (8, 16, 64, 128), "blk_k": (64, 128), "stages": (1, 4, 8), "consumers": (1, 2),
    "warp_specialized": (False, True), "persistent": (False, True), "raster_group": (0, 1),
    "epilogue": ("register", "tma"), "schedule": ("cooperative", "pingpong"), "reg_split": ("232/40", "240/24"),
    "cluster": (1, 2), "cluster_dim": ("m", "n"), "loader": ("tma", "threads"), "epilogue_warpgroup": (False, True),
    "swap_ab": (False, True), "split_k": (1, 2, 8), "split_k_reduce": ("dsmem",),
    "l2_hint": ("none/none", "first/none"),
}


@pytest.mark.parametrize(
    "problem", [Problem(16, 4096, 4096), Problem(1, 200, 72, "bfloat16"), Problem(1000, 1024, 200)]
)
def test_the_pruned_search_lists_exactly_the_valid_points(problem: Problem) -> None:
    space = SearchSpace("sm_90a", "small", _SMALL_GRID, HOPPER.table, HOPPER.problem_rules, HOPPER.config_rules)
    found = space.valid_configs(problem)
    assert found == space.brute_force_valid_configs(problem) and found  # same points, same order


def _distance(a: Config, b: Config, names: list[str]) -> int:
    return sum(getattr(a, n) != getattr(b, n) for n in names)


@pytest.mark.parametrize("problem", [Problem(16, 4096, 4096), Problem(1000, 1024, 200)])
def test_the_nearest_valid_config_is_as_near_as_any_valid_point(problem: Problem) -> None:
    """SearchSpace.nearest_valid (the tuner's repair of a refused sample) against every valid
    point of a small grid: valid, never excluded, and at the least distance there is."""
    import random

    space = SearchSpace("sm_90a", "small", _SMALL_GRID, HOPPER.table, HOPPER.problem_rules, HOPPER.config_rules)
    valid = space.brute_force_valid_configs(problem)
    names = list(_SMALL_GRID)
    rng = random.Random(3)
    for _ in range(12):
        target = hopper_config(**{n: rng.choice(v) for n, v in _SMALL_GRID.items()})
        exclude = set(rng.sample(valid, 200)) | ({target} if target in valid else set())
        found = space.nearest_valid(target, problem, exclude=exclude, rng=random.Random(0))
        assert found is not None and space.is_valid(found, problem) and found not in exclude
        assert _distance(found, target, names) == min(_distance(c, target, names) for c in valid if c not in exclude)


def test_the_nearest_valid_config_in_the_whole_hopper_space_is_valid_and_near() -> None:
    """The same repair in the current template's grid (~1e10 points, too many to list): a valid
    config, and no farther than the start configs of the problem's class, which are valid."""
    import random

    from tirtune.space.branches import branch

    problem = Problem(16, 4096, 4096)
    names = list(HOPPER.knobs)
    rng = random.Random(5)
    for _ in range(4):
        target = hopper_config(**{n: rng.choice(list(v)) for n, v in HOPPER.knobs.items()})
        found = HOPPER.nearest_valid(target, problem, rng=random.Random(0))
        assert found is not None and HOPPER.is_valid(found, problem)
        starts = [c for c in branch("sm_90a").start_configs(problem) if HOPPER.is_valid(c, problem)]
        assert starts and _distance(found, target, names) <= min(_distance(c, target, names) for c in starts)


def test_stream_k_is_built_for_the_plain_persistent_kernel_with_a_round_of_tiles() -> None:
    """stream_k_supported: a producer, cooperative consumers, no cluster, split, trim, peel,
    rotation or epilogue warpgroup, TMA loads, persistent CTAs; and at least one round of tiles
    (132 on the H200), so that no three CTAs share a tile. The search does not draw it (the knob
    table's values: it measured slower than the same tile data-parallel), but a valid config is valid."""
    base = Config.from_label("128x256x64 s4 c2 ws persist g16 tma_chunked r240/24 streamk", HOPPER_KNOBS)
    big = Problem(2502, 3072, 3072, "bfloat16")  # 20 x 12 = 240 tiles
    assert _rules(base, big) == []
    assert not HOPPER.holds(base) and HOPPER.holds(base.replace(stream_k=False))
    small = Problem(1748, 1024, 1536, "bfloat16")  # 14 x 4 = 56 tiles
    assert _rules(base, small) == ["stream_k_supported"]
    assert "at least one round of tiles (56 tiles on 132 SMs)" in HOPPER.violations(base, small)[0].reason
    for knob, value in (("persistent", False), ("schedule", "pingpong"), ("cluster", 2), ("split_k", 2),
                        ("k_rotate", True), ("epilogue_warpgroup", True), ("peel_k", True), ("trim", True),
                        ("warp_specialized", False)):
        reasons = [str(v) for v in HOPPER.violations(base.replace(**{knob: value}), big)]
        assert any(r.startswith("stream_k_supported: stream_k is built for the plain persistent kernel")
                   for r in reasons), (knob, reasons)
    # Each CTA's share is computed in 32-bit integers: a stream past 2**31 / 132 k-tiles is refused.
    narrow = Config.from_label("64x64x64 s4 c1 ws persist streamk", HOPPER_KNOBS)
    assert _rules(narrow, Problem(4096, 4096, 4096)) == []
    assert "would overflow" in str(HOPPER.violations(narrow, Problem(65536, 65536, 65536))[0])


def test_stream_k_scope_tail_needs_stream_k_and_is_not_drawn_yet() -> None:
    """stream_k_tail_supported: the "tail" scope scopes stream_k, so without it the config is
    refused with the reason; with it, stream_k's own rules apply. The knob table does not draw
    "tail" until its sweep has run on the GPU; its label round-trips."""
    base = Config.from_label("128x128x64 s5 c2 ws persist g8 tma_chunked r240/24 streamk stream-tail", HOPPER_KNOBS)
    assert base.stream_k and base.stream_k_scope == "tail" and Config.from_label(base.label(), HOPPER_KNOBS) == base
    big = Problem(273, 22016, 4096, "bfloat16")  # 3 x 172 = 516 tiles, 3.9 rounds
    assert _rules(base, big) == []
    off = base.replace(stream_k=False)
    assert _rules(off, big) == ["stream_k_tail_supported"]
    assert 'stream_k_scope "tail" scopes stream_k, which is off' in str(HOPPER.violations(off, big)[0])
    assert _rules(base, Problem(1748, 1024, 1536, "bfloat16")) == ["stream_k_supported"]  # 56 tiles
    assert HOPPER.knobs["stream_k_scope"] == ("all",) and not HOPPER.holds(base)
    # The scope changes nothing else about a config's identity: at its default it is not in the text.
    assert "stream_k_scope" not in base.replace(stream_k_scope="all").canonical()
    assert "stream_k_scope" in base.canonical()
