"""The GPU kits of bench/prebuild.py: the sets that ran keep their configs, the new kit is valid.

A kit that already ran on the H200 (its smoke and timing results are on file) must draw the same
configs when it is rebuilt, whatever knobs the space gains later: its random draws leave out the
knobs added to hopper-gemm/5 after its first kit. The digests below are of the sets as built for
those runs (branch wtk, before the later knobs existed).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tirtune.space import HOPPER, Config, Problem
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.space.hopper.knobs import config as hopper_config

# sha256 of json.dumps([[config.canonical(), str(problem)], ...]) of each set as it ran.
RAN = {
    "v4": "214b9c67111fbc41a8ac2d7128000b0a474c78c34f3916e72370728e325ef24d",
    "v4-fuzz": "f0e55b9120f25f6456e1fcc6c42b461b81d42b537aa16d454efb1ba46c274e19",
    "v5-fuzz": "ea785a89ce3f9475307d56e09b6946bf85b882d08e51a337dcaf5c6f7811a83d",
}
LATER = {"l2_hint": "none/none", "l2_promotion": "128B", "prefetch_tensormap": False}


def _prebuild() -> Any:
    from bench import prebuild  # bench is a package: no sys.path edits

    return prebuild


def _pairs(name: str) -> list[tuple[Config, Problem]]:
    return [(item[-2], item[-1]) for item in _prebuild().SETS[name]()]


def _uses_a_later_option(config: Config) -> bool:
    return any(getattr(config, k) != v for k, v in LATER.items()) or config.blk_k > 128


@pytest.mark.parametrize("name", sorted(RAN))
def test_the_sets_that_ran_draw_the_same_configs(name: str) -> None:
    pairs = _pairs(name)
    assert not any(_uses_a_later_option(c) for c, _ in pairs)
    listed = json.dumps([[c.canonical(), str(p)] for c, p in pairs])
    assert hashlib.sha256(listed.encode()).hexdigest() == RAN[name]


def test_the_second_round_kit_is_valid_and_each_problem_starts_from_its_baseline() -> None:
    prebuild = _prebuild()
    from bench.prebuild import _valid_as_drawn

    pairs = _pairs("v5b")
    assert all(_valid_as_drawn(HOPPER, c, p) for c, p in pairs)  # valid when it ran (LATER_RULES)
    assert len({prebuild._slug(c, p) for c, p in pairs}) == len(pairs)  # one .so name each
    first: dict[Problem, Config] = {}
    for config, problem in prebuild.SET_V5B_PERF:
        first.setdefault(problem, config)
    # Every timed problem's first entry is a run-1 kernel (no later option): the same-process
    # baseline of the variants after it.
    assert len(first) == 12 and not any(_uses_a_later_option(c) for c in first.values())
    assert sum(_uses_a_later_option(c) for c, _ in prebuild.SET_V5B_PERF) >= 40


def test_the_new_fuzz_sets_use_a_later_option_in_every_config() -> None:
    from bench.prebuild import _valid_as_drawn

    pairs = _pairs("v5b-fuzz")
    assert len(pairs) == 120 and all(_uses_a_later_option(c) and _valid_as_drawn(HOPPER, c, p) for c, p in pairs)
    assert {c.l2_hint for c, _ in pairs} >= {"first/none", "none/first", "first/last", "last/first"}
    assert any(c.blk_k == 256 for c, _ in pairs) and any(c.split_k > 1 for c, _ in pairs)


def test_the_bisect_kit_starts_from_the_suites_wrong_config_and_holds_only_points_valid_when_it_ran() -> None:
    """v5-wrong: the config the suite's run found wrong (its digest as stored on the H200), then
    configs one knob away from it that were valid when it ran, then it on neighbouring problems.
    It ran (bench/results/sweeps/2026-11-30-wrong-kernel-neighbours.md); the rule added after it refuses
    its failing points."""
    from bench.prebuild import LATER_RULES, SETS, _valid_as_drawn
    from tirtune.space import HOPPER

    kit = SETS["v5-wrong"]()
    first, problem = kit[0]
    assert first.digest() == "0f16cf09c6e5f8aa" and (problem.m, problem.n, problem.k) == (1024, 1024, 1024)
    assert len(kit) == 28 and all(_valid_as_drawn(HOPPER, c, p) for c, p in kit)
    near = [c for c, p in kit[1:] if p == problem]
    assert near and all(
        sum(a != b for a, b in zip(c.to_json().values(), first.to_json().values(), strict=True)) == 1 for c in near
    )
    refused = [(c, p) for c, p in kit if not HOPPER.is_valid(c, p)]
    assert (first, problem) in refused
    assert all(v.rule in {r.__name__ for r in LATER_RULES} for c, p in refused for v in HOPPER.violations(c, p))
    # Swapped ping-pong in a cluster (swap_ab_pingpong_unclustered), or without one on 64-row tiles
    # wider than 120 (swap_ab_pingpong_wide).
    assert all(c.swap_ab and c.schedule == "pingpong" and (c.cluster > 1 or c.blk_n > 120) for c, _ in refused)


def test_the_trim_kit_times_each_tile_untrimmed_then_trimmed_and_checks_trim_on_every_path() -> None:

    from bench.prebuild import SET_TRIM_CHECK, SET_TRIM_PERF
    from tirtune.space.hopper.rules import trim_work

    pairs = _pairs("trim")
    assert all(HOPPER.is_valid(c, p) for c, p in pairs) and len(set(pairs)) == len(pairs)
    for (base, problem), (trimmed, same) in zip(SET_TRIM_PERF[::2], SET_TRIM_PERF[1::2], strict=True):
        assert same == problem and not base.trim and trimmed == base.replace(trim=True)
    works = [trim_work(c, p) for c, p in SET_TRIM_CHECK]
    assert all(c.trim for c, _ in SET_TRIM_CHECK)
    assert any(n for n, _, _ in works) and any(k for _, k, _ in works) and any(m for _, _, m in works)
    assert {c.schedule for c, _ in SET_TRIM_CHECK} == {"cooperative", "pingpong"}
    assert any(c.swap_ab for c, _ in SET_TRIM_CHECK) and any(c.epilogue_warpgroup for c, _ in SET_TRIM_CHECK)
    assert any(c.cluster > 1 for c, _ in SET_TRIM_CHECK) and any(c.loader == "threads" for c, _ in SET_TRIM_CHECK)


# The kits whose draws are cheap to list (the fuzz and sweep sets draw hundreds: left to their own tests).
NAMED = (
    "trim",
    "ragged-tail",
    "decode-best",
    "v5-wrong",
    "v3-final",
    "waves",
    "round4",
    "journey",
    "ragged-starts",
    "decode-deep",
    "decode-rotate",
    "decode-narrow",
)


def test_the_rotation_kits_pair_each_rotated_tile_with_its_plain_twin() -> None:
    """Kits decode-rotate / decode-narrow (bench/results/decode/2026-12-02-probes-k-rotate.md and
    bench/results/decode/2026-12-02-probes-narrow.md): every kernel valid; the suite's decode best
    is the first kernel of each, and every rotated decode tile of decode-rotate has its unrotated
    twin in the same kit, on the same problem, so a run reads the rotation's effect in one
    process."""

    from bench.prebuild import _DECODE_BEST

    for name in ("decode-rotate", "decode-narrow"):
        pairs = _pairs(name)
        assert all(HOPPER.is_valid(c, p) for c, p in pairs)
        assert pairs[0] == (_DECODE_BEST, Problem(16, 4096, 4096, "float16"))
        assert any(c.k_rotate for c, _ in pairs) and any(not c.k_rotate for c, _ in pairs)
    pairs = _pairs("decode-rotate")
    twins = [
        (c, p)
        for c, p in pairs
        if c.k_rotate and c.stages == 8 and c.blk_k == 128 and c.split_k == 1 and not c.prefetch_tensormap
    ]
    assert len(twins) == 5 and all((c.replace(k_rotate=False), p) in pairs for c, p in twins)


def test_the_rotation_sweep_draws_valid_rotated_configs_over_every_path() -> None:
    """krot-fuzz: 48 valid configs, each with k_rotate, none of them twice, over both dtypes, the
    decode shapes and K tails, and through the paths the rotation must leave intact: persistent
    CTAs (a CTA's later tiles rotate by their own index), split-K (DSMEM and serial: each rank's
    share rotates within it), ping-pong consumers, the prefetching consumer without a producer."""
    from bench.prebuild import _valid_as_drawn

    pairs = _pairs("krot-fuzz")
    assert len(pairs) == len(set(pairs)) == 48
    assert all(c.k_rotate and _valid_as_drawn(HOPPER, c, p) for c, p in pairs)  # valid when it ran
    assert {p.dtype for _, p in pairs} == {"float16", "bfloat16"}
    assert any(p.k % c.blk_k for c, p in pairs) and any(p.m == 1 for _, p in pairs)
    assert any(c.persistent for c, _ in pairs) and any(c.schedule == "pingpong" for c, _ in pairs)
    assert {c.split_k_reduce for c, _ in pairs if c.split_k > 1} == {"dsmem", "serial"}
    assert any(not c.warp_specialized for c, _ in pairs) and any(c.swap_ab for c, _ in pairs)


def test_the_split_sweep_draws_valid_deep_splits_over_both_reductions() -> None:
    """split-fuzz: 300 valid configs, none twice, each split over 3, 5, 6, 7, 12, 14 or 16 CTAs
    (every one of them drawn), through a cluster up to 8 and serially past it, swapped and not,
    both dtypes, K tails, every problem of SPLIT_PROBLEMS."""
    from bench.prebuild import DEEP_SPLITS, SPLIT_PROBLEMS

    pairs = _pairs("split-fuzz")
    assert len(pairs) == len(set(pairs)) == 300
    assert all(c.split_k in DEEP_SPLITS and HOPPER.is_valid(c, p) for c, p in pairs)
    assert {c.split_k for c, _ in pairs} == set(DEEP_SPLITS) and {p for _, p in pairs} == set(SPLIT_PROBLEMS)
    assert {c.split_k_reduce for c, _ in pairs if c.split_k <= 8} == {"dsmem", "serial"}
    assert all(c.split_k_reduce == "serial" for c, _ in pairs if c.split_k > 8)
    assert {c.swap_ab for c, _ in pairs} == {True, False} and {p.dtype for _, p in pairs} == {"float16", "bfloat16"}
    assert any(p.k % c.blk_k for c, p in pairs)


def test_the_deep_decode_kit_is_valid_and_goes_past_the_grid() -> None:
    """Kit decode-deep: every kernel passes the rules (prebuild refuses the set otherwise), the
    control is the grid's 8 stages, and the rest go deeper than the grid draws."""
    pairs = _pairs("decode-deep")
    assert all(HOPPER.is_valid(c, p) for c, p in pairs)
    depths = {c.stages for c, _ in pairs}
    assert 8 in depths and max(depths) == 20 and {p.m for _, p in pairs} == {1, 16}
    assert any(not HOPPER.holds(c) for c, _ in pairs)


@pytest.mark.parametrize("name", NAMED)
def test_every_kernel_of_a_kit_gets_a_folder_of_its_own(name: str) -> None:
    """A kernel's folder is named by `_slug`: two configs that differ in any knob (their labels
    differ) must not share one, or the second build overwrites the first and the kit times one
    kernel twice (the first trim kit did: `_slug` left out trim, and every pair timed the same)."""
    pairs = [(c, p) for c, p in _pairs(name)]
    by_slug: dict[str, set[tuple[str, str]]] = {}
    for c, p in pairs:
        by_slug.setdefault(_prebuild()._slug(c, p), set()).add((c.label(), str(p)))
    assert [s for s, kernels in by_slug.items() if len(kernels) > 1] == []


def test_every_knob_that_names_a_config_also_names_its_folder() -> None:
    """Each knob flipped from the default config (to a value the label shows) changes the folder name."""

    base, problem = hopper_config(), Problem(4096, 4096, 4096, "float16")
    other = {bool: lambda v: not v, int: lambda v: v * 2 if v else 1}
    strings = {
        "epilogue": "tma",
        "schedule": "pingpong",
        "reg_split": "240/24",
        "loader": "threads",
        "split_k_reduce": "serial",
        "l2_hint": "none/first",
        "l2_promotion": "256B",
        "cluster_dim": "n",
        "split_k_scope": "tail",
        "stream_k_scope": "tail",
    }
    for f in HOPPER_KNOBS:
        value = getattr(base, f.name)
        changed = base.replace(**{f.name: strings[f.name] if isinstance(value, str) else other[type(value)](value)})
        if f.name == "split_k_reduce":
            base_, changed = base.replace(split_k=2), changed.replace(split_k=2)
        elif f.name == "cluster_dim":
            base_, changed = base.replace(cluster=2), changed.replace(cluster=2)
        else:
            base_ = base
        if changed.label() != base_.label():
            assert _prebuild()._slug(changed, problem) != _prebuild()._slug(base_, problem), f.name


def test_the_ragged_starts_kit_times_what_a_ragged_job_asks_first() -> None:
    """Kit `ragged-starts` (bench/results/kits/2026-12-01-ragged-starts.md) holds, per ragged suite
    problem, the first five configs the branch hands a job there, in that order, each valid; the
    ping-pong head also unpeeled; then the peeled path's correctness edges."""

    from bench.prebuild import SET_PEEL_CHECK
    from tirtune.space.branches import branch

    pairs = _pairs("ragged-starts")
    hopper = branch("sm_90a")
    problems = [
        Problem(3000, 5000, 2000, "float16"),
        Problem(3000, 5000, 2000, "bfloat16"),
        Problem(4000, 4000, 4000, "float16"),
        Problem(4000, 4000, 4000, "bfloat16"),
    ]
    assert pairs[:20] == [(c, p) for p in problems for c in hopper.start_configs(p)[:5]]
    head = pairs[0][0]
    assert head.schedule == "pingpong" and head.peel_k and pairs[20] == (head.replace(peel_k=False), problems[0])
    assert pairs[21:] == SET_PEEL_CHECK
    assert all(HOPPER.is_valid(c, p) for c, p in pairs)


def test_the_swapped_ping_pong_and_stream_k_sweeps_draw_what_the_space_takes_now() -> None:
    """swap-pingpong-fuzz: 200 swapped ping-pong configs without a cluster that the space takes
    now (64 rows up to 120 wide, 128 rows at any width); stream-fuzz: 300 stream-K configs, valid,
    none twice, the three epilogues; stream-perf: each drawn problem's base tiles without and with
    stream_k, one .so name each."""
    prebuild = _prebuild()
    swapped = _pairs("swap-pingpong-fuzz")
    assert len(swapped) == len(set(swapped)) == 200
    assert all(c.swap_ab and c.schedule == "pingpong" and c.cluster == 1 and HOPPER.is_valid(c, p) for c, p in swapped)
    assert {c.blk_m for c, _ in swapped} == {64, 128} and max(c.blk_n for c, _ in swapped if c.blk_m == 64) <= 120
    stream = _pairs("stream-fuzz")
    assert len(stream) == len(set(stream)) == 300
    assert all(c.stream_k and HOPPER.is_valid(c, p) for c, p in stream)
    assert {c.epilogue for c, _ in stream} == {"register", "tma", "tma_chunked"}
    perf = _pairs("stream-perf")
    assert perf and all(HOPPER.is_valid(c, p) for c, p in perf)
    assert {c.stream_k for c, _ in perf} == {False, True}
    assert len({prebuild._slug(c, p) for c, p in perf}) == len(perf)


def test_the_stream_k_tail_sets_run_data_parallel_rounds_before_the_share() -> None:
    """stream-tail-fuzz: 300 valid stream-K configs scoped to the tail, none twice, the three
    epilogues, a good part of them (two rounds of tiles or more) with data-parallel rounds before
    the share; stream-tail-perf: each problem of stream-perf with two rounds or more as three
    kernels of one tile (data-parallel, shared out whole, tail), one .so name each."""
    from tirtune.kernels.hopper.plan import plan

    prebuild = _prebuild()
    fuzz = _pairs("stream-tail-fuzz")
    assert len(fuzz) == len(set(fuzz)) == 300
    assert all(c.stream_k and c.stream_k_scope == "tail" and HOPPER.is_valid(c, p) for c, p in fuzz)
    assert {c.epilogue for c, _ in fuzz} == {"register", "tma", "tma_chunked"}
    assert sum(plan(c, p).stream_rounds > 0 for c, p in fuzz) >= 100
    perf = _pairs("stream-tail-perf")
    assert perf and len(perf) % 3 == 0 and all(HOPPER.is_valid(c, p) for c, p in perf)
    for (base, p0), (whole, p1), (tail, p2) in zip(perf[::3], perf[1::3], perf[2::3], strict=True):
        assert p0 == p1 == p2 and plan(tail, p2).stream_rounds > 0
        assert (base.stream_k, whole.stream_k_scope, tail.stream_k_scope) == (False, "all", "tail")
        assert tail.replace(stream_k=False, stream_k_scope="all") == base == whole.replace(stream_k=False)
    assert len({prebuild._slug(c, p) for c, p in perf}) == len(perf)


def test_the_epilogue_sweep_covers_every_spec_and_every_path_that_writes_d() -> None:
    """epilogue-fuzz: 300 valid configs, none twice, each problem with a fused epilogue (every
    spec of EPILOGUE_SPECS), over the register, swapped, staged, split-K and epilogue-warpgroup
    paths; the .so names tell the epilogues apart."""
    prebuild = _prebuild()
    fuzz = _pairs("epilogue-fuzz")
    assert len(fuzz) == len(set(fuzz)) == 300 and all(HOPPER.is_valid(c, p) for c, p in fuzz)
    assert {str(p.epilogue) for _, p in fuzz} == set(prebuild.EPILOGUE_SPECS)
    assert any(c.swap_ab for c, _ in fuzz) and any(c.split_k > 1 and c.split_k_reduce == "dsmem" for c, _ in fuzz)
    assert any(c.split_k > 1 and c.split_k_reduce == "serial" for c, _ in fuzz)
    assert {c.epilogue for c, _ in fuzz} == {"register", "tma", "tma_chunked"}
    assert any(c.epilogue_warpgroup for c, _ in fuzz)
    assert len({prebuild._slug(c, p) for c, p in fuzz}) == 300
    plain = replace(fuzz[0][1], epilogue="none")
    assert prebuild._slug(fuzz[0][0], plain) != prebuild._slug(*fuzz[0])


def test_the_losers_kit_holds_each_draws_kept_config_below_the_line_and_valid_now() -> None:
    from bench.prebuild import LOSER_MIN_M, LOSER_RATIO, SETS
    from tirtune.core import Config, Problem
    from tirtune.space import HOPPER

    kit = SETS["draw-losers"]()
    assert kit and len({p for _, p in kit}) == len(kit)
    results = Path(__file__).resolve().parents[1] / "bench" / "results" / "generalize"
    kept: dict[Problem, list[Config]] = {}
    for path in results.glob("*.json"):
        if not path.stem.rsplit("-", 1)[-1].isdigit():
            continue
        for row in json.loads(path.read_text())["problems"]:
            if row.get("ratio") is not None and row["ratio"] < LOSER_RATIO:
                kept.setdefault(Problem.parse(row["problem"], row["dtype"]), []).append(Config.from_json(row["config"], HOPPER_KNOBS))
    for config, problem in kit:
        assert problem.m >= LOSER_MIN_M and config in kept[problem] and HOPPER.is_valid(config, problem)


def test_the_swiglu_sweep_draws_valid_register_paths_over_decode_ragged_and_prefill() -> None:
    """swiglu-fuzz: 100 valid configs, none twice, over SWIGLU_PROBLEMS (decode, ragged M, prefill,
    N off 16), each stored from registers with whole sums, swapped and not; epilogue-fuzz unchanged
    (its problems carry no swiglu)."""
    prebuild = _prebuild()
    fuzz = _pairs("swiglu-fuzz")
    assert len(fuzz) == len(set(fuzz)) == 100 and all(HOPPER.is_valid(c, p) for c, p in fuzz)
    assert {p for _, p in fuzz} == set(prebuild.SWIGLU_PROBLEMS)
    assert all(str(p.epilogue) == "swiglu" for _, p in fuzz)
    assert all(c.epilogue == "register" and c.split_k == 1 and not c.stream_k for c, _ in fuzz)
    assert any(c.swap_ab for c, _ in fuzz) and any(not c.swap_ab for c, _ in fuzz)
    assert any(c.persistent for c, _ in fuzz) and any(c.schedule == "pingpong" for c, _ in fuzz)
    assert len({prebuild._slug(c, p) for c, p in fuzz}) == 100
    assert not any(p.epilogue.gated for _, p in _pairs("epilogue-fuzz"))


def test_the_fitted_widths_cover_an_extent_with_the_least_padding_first() -> None:
    from bench.prebuild import fitted_widths

    widths = [56, 64, 72, 96, 104, 112, 128, 144, 192, 256]
    assert fitted_widths(217, widths, 2) == [112, 56]  # 224 (two tiles) and 224 (four), fewer tiles first
    assert fitted_widths(286, widths, 2) == [144, 96]  # two of 144, three of 96: 288 both
    assert fitted_widths(64, widths, 3)[0] == 64


def test_the_swap_fitted_kit_lays_swapped_fitted_tiles_beside_each_kept_config() -> None:
    from bench.prebuild import FITTED_MIN_M, SETS

    kit = SETS["swap-fitted"]()
    kept = {p: c for c, p in SETS["draw-losers"]() if p.m >= FITTED_MIN_M}
    assert {p for _, p in kit} == set(kept) and all((c, p) in kit for p, c in kept.items())
    fitted = [(c, p) for c, p in kit if kept[p] != c]
    assert fitted and all(HOPPER.is_valid(c, p) and c.swap_ab and c.consumers == 2 for c, p in fitted)
    # Each width covers M with less padding than a 64-row step would.
    assert all((-(-p.m // c.blk_n)) * c.blk_n - p.m < 64 for c, p in fitted)


def test_the_fp8_sweep_draws_valid_fp8_configs_over_every_scaling() -> None:
    """fp8-fuzz: 200 valid configs, none twice, over e4m3 problems unscaled and scaled per tensor
    and per row and column, each TMA-fed, register-stored and unsplit, swapped and not."""
    fuzz = _pairs("fp8-fuzz")
    assert len(fuzz) == len(set(fuzz)) == 200
    assert all(p.is_fp8 and HOPPER.is_valid(c, p) for c, p in fuzz)
    assert {str(p.epilogue) for _, p in fuzz} >= {"none", "scale_a+scale_b", "scale_row+scale_col"}
    assert {c.swap_ab for c, _ in fuzz} == {False, True} and {c.blk_k for c, _ in fuzz} == {128, 256}
    assert max(p.k for _, p in fuzz) == 16384


def test_the_block_scaled_fp8_sweep_draws_valid_configs_over_every_path_its_k_loop_runs_in() -> None:
    """fp8-block-fuzz: 200 valid configs, none twice, over block-scaled e4m3 problems (K and N off
    128 among them), 128-deep k-tiles, swapped and not, split and not, ping-pong, staged stores."""
    fuzz = _pairs("fp8-block-fuzz")
    assert len(fuzz) == len(set(fuzz)) == 200
    assert all(p.is_fp8 and p.epilogue.block_scaled and HOPPER.is_valid(c, p) for c, p in fuzz)
    assert {c.blk_k for c, _ in fuzz} == {128} and {c.swap_ab for c, _ in fuzz} == {False, True}
    assert {c.schedule for c, _ in fuzz} == {"cooperative", "pingpong"}
    assert {c.epilogue for c, _ in fuzz} == {"register", "tma", "tma_chunked"}
    assert {c.split_k_reduce for c, _ in fuzz if c.split_k > 1} == {"dsmem", "serial"}
    assert any(p.k % 128 for _, p in fuzz) and any(p.n % 128 for _, p in fuzz)


def test_the_fp8_paths_sweep_took_only_what_the_product_refused_then_and_built_it_apart() -> None:
    """fp8-paths-fuzz: every config uses a path the FP8 rules refused until the sweep ran (split-K,
    a staged epilogue: fp8_paths.SWEPT) and breaks no other rule; since the sweep, the product's
    space takes each of them; they are built by their own template (a build key of their own)."""
    from bench import fp8_paths, prebuild

    fuzz = _pairs("fp8-paths-fuzz")
    assert len(fuzz) == len(set(fuzz)) == 200
    space, template = prebuild.SET_SPACES["fp8-paths-fuzz"]
    assert template == fp8_paths.TEMPLATE != prebuild.DEFAULT_TEMPLATE
    for c, p in fuzz:
        assert p.is_fp8 and space.is_valid(c, p) and HOPPER.is_valid(c, p)
        assert any(rule(c, p) for rule in fp8_paths.SWEPT)
        assert not c.stream_k and c.loader == "tma"
    splits = [c for c, _ in fuzz if c.split_k > 1]
    assert len(splits) >= 90 and {c.split_k_reduce for c in splits} == {"dsmem", "serial"}
    assert any(c.split_k_scope == "tail" for c in splits) and max(c.split_k for c in splits) == 16
    staged = [c for c, _ in fuzz if c.split_k == 1]
    assert {c.epilogue for c in staged} == {"tma", "tma_chunked"} and any(c.epilogue_warpgroup for c in staged)


def test_the_fp8_paths_template_plans_with_the_product_rules_now_that_the_sweep_ran() -> None:
    from bench import fp8_paths
    from tirtune.kernels.hopper import build
    from tirtune.space.hopper import rules

    assert fp8_paths.config_rules() == tuple(rules.CONFIG_RULES)
    split = hopper_config(64, 16, 128, 4, 1, True, swap_ab=True, split_k=4, split_k_reduce="serial")
    problem = Problem(16, 4096, 8192, "float8_e4m3fn")
    assert fp8_paths.whole_sums(split, problem) and not fp8_paths.register_epilogue(split, problem)
    assert fp8_paths.build(split, problem) is not None and build(split, problem) is not None
    with pytest.raises(Exception, match="stream_k"):  # stream-K stays refused for FP8
        fp8_paths.build(split.replace(split_k=1, persistent=True, stream_k=True), Problem(4096, 4096, 4096, "fp8"))


def test_the_uneven_sweep_holds_only_valid_points_whose_multicast_slices_differ() -> None:
    from tirtune.kernels.hopper.plan import plan

    pairs = _pairs("uneven-fuzz")
    assert len(pairs) == 300 and len(set(pairs)) == 300
    assert all(HOPPER.is_valid(c, p) for c, p in pairs)
    plans = [plan(c, p) for c, p in pairs]
    assert not any(k.multicast_even for k in plans)
    # Both cluster sizes, and each slice whole 8-row atoms, the lower ranks never the smaller.
    assert {k.cluster for k in plans} == {2, 4}
    for k in plans:
        sizes = [hi - lo for lo, hi in k.multicast_slices]
        assert all(size % 8 == 0 and size > 0 for size in sizes) and sizes == sorted(sizes, reverse=True)
        assert sum(sizes) == k.blk_n


def test_the_mid_l2_kit_changes_only_the_weights_hint_of_each_best() -> None:
    pairs = _pairs("mid-l2")
    by_problem: dict[Problem, list[Config]] = {}
    for c, p in pairs:
        assert HOPPER.is_valid(c, p)
        by_problem.setdefault(p, []).append(c)
    assert len(by_problem) == 6
    for configs in by_problem.values():
        best, *variants = configs
        assert variants and len(set(configs)) == len(configs)
        weights = 0 if best.swap_ab else 1  # the hint is "<A>/<B>"; swapped, the weights are A
        seen = {c.l2_hint.split("/")[weights] for c in configs}
        assert seen == {"none", "first", "last"}  # the weights under each policy the space has
        assert all(c.replace(l2_hint=best.l2_hint) == best for c in variants)


def test_the_swapped_tma_store_sets_draw_what_the_space_takes_now() -> None:
    """swap-staged-fuzz: 300 swapped configs storing through the chunked TMA store, valid, none
    twice, over 16-bit, fused-epilogue and FP8 problems, most with a last box of D's rows, with and
    without the epilogue warpgroup, ping-pong and clusters among them. swap-staged-mid: each
    problem's best, a swapped register-store tile and that tile with the TMA store."""
    fuzz = _pairs("swap-staged-fuzz")
    assert len(fuzz) == len(set(fuzz)) == 300
    assert all(c.swap_ab and c.epilogue == "tma_chunked" and HOPPER.is_valid(c, p) for c, p in fuzz)
    assert sum(1 for c, _ in fuzz if c.blk_n % 64) > 150 and {c.epilogue_warpgroup for c, _ in fuzz} == {False, True}
    assert {c.schedule for c, _ in fuzz} == {"cooperative", "pingpong"} and {c.cluster for c, _ in fuzz} == {1, 2, 4}
    assert {p.dtype for _, p in fuzz} == {"float16", "bfloat16", "float8_e4m3fn"}
    assert any(p.epilogue.ops and not p.is_fp8 for _, p in fuzz)
    mid = _pairs("swap-staged-mid")
    assert all(HOPPER.is_valid(c, p) for c, p in mid)
    for problem in {p for _, p in mid}:
        configs = [c for c, p in mid if p == problem]
        register = [c for c in configs if c.swap_ab and c.epilogue == "register"]
        staged = [c for c in configs if c.swap_ab and c.epilogue == "tma_chunked"]
        assert len(register) == 1 and staged, problem
        assert all(c.replace(epilogue="register", epilogue_warpgroup=False, stages=register[0].stages,
                             reg_split=register[0].reg_split) == register[0] for c in staged)


def test_the_block_stagger_sets_hold_the_knob_on_every_path_and_twins_apart() -> None:
    """fp8-stagger-fuzz: 200 drawn points and the tail split's, none twice, each valid with
    block_stagger on (two product buffers, two to four cooperative consumers, the three stores,
    swapped and not, split-K); fp8-stagger: each tile with and without the knob, one .so name each."""
    from tirtune.kernels.hopper.plan import plan

    prebuild = _prebuild()
    fuzz = _pairs("fp8-stagger-fuzz")
    assert len(fuzz) == len(set(fuzz)) >= 200
    assert all(c.block_stagger and HOPPER.is_valid(c, p) and plan(c, p).block_buffers == 2 for c, p in fuzz)
    assert {c.consumers for c, _ in fuzz} >= {2, 3, 4}
    assert {c.epilogue for c, _ in fuzz} == {"register", "tma", "tma_chunked"}
    assert any(c.swap_ab for c, _ in fuzz) and any(c.split_k_scope == "tail" for c, _ in fuzz)
    assert any(c.split_k > 1 and c.split_k_scope == "all" for c, _ in fuzz)
    perf = _pairs("fp8-stagger")
    assert perf and len(perf) % 2 == 0 and all(HOPPER.is_valid(c, p) for c, p in perf)
    for (off, p0), (on, p1) in zip(perf[::2], perf[1::2], strict=True):
        assert p0 == p1 and (off.block_stagger, on.block_stagger) == (False, True)
        assert on.replace(block_stagger=False) == off
    assert len({prebuild._slug(c, p) for c, p in perf}) == len(perf)
