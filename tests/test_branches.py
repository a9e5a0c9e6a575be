"""The registry of template branches (tirtune.space.branches): every entry is consistent, and every
place that lists architectures reads it (so adding one means adding one entry)."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tirtune.api.schemas import TuneRequest
from tirtune.builder import compile_one, toolchain
from tirtune.core import Candidate, Config, Outcome, Problem, Provenance, RunResult, Stack
from tirtune.db import repo, transaction
from tirtune.kernels import gemm
from tirtune.space import SpaceError
from tirtune.space.branches import (
    ARCHS,
    BRANCHES,
    DEFAULT_ARCH,
    HOPPER_START,
    Branch,
    branch,
    branch_for_gpu,
    branch_for_template,
    branch_for_version,
    check_problem,
)
from tirtune.space.hopper.knobs import config as hopper_config
from tirtune.space.shapes import ShapeClass

# One problem per shape class (the classes' own docstring examples).
CLASS_EXAMPLES = {
    ShapeClass.DECODE: Problem(8, 4096, 4096),
    ShapeClass.SMALL_BATCH: Problem(256, 4096, 4096),
    ShapeClass.TALL_SKINNY: Problem(4096, 64, 4096),
    ShapeClass.FEW_TILES: Problem(1024, 1024, 1024),
    ShapeClass.K_HEAVY: Problem(2048, 2048, 16384),
    ShapeClass.RAGGED: Problem(4000, 4000, 4000),
    ShapeClass.SQUARE: Problem(4096, 4096, 4096),
}


@pytest.mark.parametrize("b", BRANCHES.values(), ids=ARCHS)
def test_each_entry_is_consistent(b: Branch) -> None:
    assert b.space.arch == b.arch
    assert b.space.template_version.startswith(b.version_prefix)
    assert branch_for_version(b.space.template_version) is b
    assert b.gencode == f"-gencode=arch=compute_{b.arch[3:]},code={b.arch}"
    assert callable(gemm.load(b.template)) and branch_for_template(b.template) is b
    assert b.status in ("run", "compile-checked") and b.status_text
    for cc in b.compute_capabilities:
        major, _, minor = cc.partition(".")
        assert branch_for_gpu(f"{major}.{0 if minor == 'x' else minor}") is b


@pytest.mark.parametrize("b", BRANCHES.values(), ids=ARCHS)
def test_every_shape_class_has_starting_configs_of_the_branchs_own_space(b: Branch) -> None:
    assert set(b.start_with) == set(ShapeClass)
    for shape, problem in CLASS_EXAMPLES.items():
        starts = b.start_configs(problem)
        # The class's list, its tiles fitted to the problem (shapes.fitted), in the same order; a
        # fitted start that comes out as an earlier one is not asked twice.
        assert len(starts) <= len(b.start_with[shape])
        flags = iter(c.swap_ab for c in dict.fromkeys(b.start_with[shape]))
        assert all(any(c.swap_ab == f for f in flags) for c in starts), (b.arch, shape)
        assert starts and all(b.space.holds(c) for c in starts), (b.arch, shape)
        if b.measured:  # a class's own problem takes its start configs as they are: valid, none repaired
            assert all(b.space.is_valid(c, problem) for c in starts), (b.arch, shape)


def test_hopper_starts_each_class_from_its_own_points_and_blackwell_from_those_it_can_express() -> None:
    """Hopper: the squares from the 4096^3 points, decode from swap-AB split-K tiles, and so on
    (space/hopper/starts.py); Blackwell: the 4096^3 points its knobs take, for every class."""
    from tirtune.space.blackwell import BLACKWELL

    hopper = branch("sm_90a")
    assert hopper.start_with[ShapeClass.SQUARE] == HOPPER_START
    assert all(c.swap_ab for c in hopper.start_with[ShapeClass.DECODE][:4])
    assert hopper.start_with[ShapeClass.DECODE] != hopper.start_with[ShapeClass.FEW_TILES]
    expressible = tuple(c for c in HOPPER_START if BLACKWELL.holds(c))
    assert all(branch("sm_100a").start_with[c] == expressible for c in ShapeClass)


def test_the_archs_every_layer_lists_are_the_registrys() -> None:
    assert ARCHS == ("sm_90a", "sm_100a") and DEFAULT_ARCH in ARCHS
    assert gemm.TEMPLATES == {arch: b.template for arch, b in BRANCHES.items()}
    assert toolchain.ARCHS == ARCHS and toolchain.gencode("sm_100a") == BRANCHES["sm_100a"].gencode
    assert compile_one.DEFAULT_TEMPLATE == BRANCHES[DEFAULT_ARCH].template
    schema = TuneRequest.model_json_schema()["properties"]["arch"]
    assert schema["enum"] == list(ARCHS) and schema["default"] == DEFAULT_ARCH


def test_compile_one_builds_for_the_branch_of_the_template_module() -> None:
    assert branch_for_template("tirtune.kernels.blackwell:plan").arch == "sm_100a"
    assert branch_for_template("tirtune.kernels.hopper:plan").arch == "sm_90a"
    assert branch_for_template("bench.faults.kernels:deadlock").arch == DEFAULT_ARCH  # Hopper's fault variants


def test_unknown_archs_and_gpus_are_refused_with_the_known_ones_named() -> None:
    with pytest.raises(SpaceError, match=r"no GEMM template branch for 'sm_80'; known: sm_100a, sm_90a"):
        branch("sm_80")
    with pytest.raises(SpaceError) as refused:
        branch_for_gpu("10.3")
    assert str(refused.value) == (
        "compute capability 10.3: the Blackwell branch builds sm_100a, which runs on 10.0 (B200/GB200) only; "
        "this GPU would need an sm_103a build, which tirtune does not make yet"
    )
    with pytest.raises(SpaceError) as refused:
        branch_for_gpu("8.0")
    assert str(refused.value) == (
        "compute capability 8.0 has no GEMM template branch: tirtune builds sm_90a (Hopper, 9.x) and sm_100a "
        "(Blackwell B200/GB200, 10.0) kernels only"
    )


def test_a_problem_is_refused_before_the_branch_is_known_only_if_no_branch_takes_it() -> None:
    check_problem(Problem(1000, 1000, 4000))
    with pytest.raises(SpaceError, match="multiple of 8"):
        check_problem(Problem(128, 128, 4001))


def test_older_template_versions_belong_to_their_branch() -> None:
    for version in ("hopper-gemm/1", "hopper-gemm/3", "hopper-gemm/4"):
        assert branch_for_version(version) is BRANCHES["sm_90a"]
    assert branch_for_version("blackwell-gemm/1") is BRANCHES["sm_100a"]


# --- the repository's serving policy reads each branch's status ------------------------------------


def _record(factory: sessionmaker[Session], cc: str) -> None:
    problem = Problem(4096, 4096, 4096)
    candidate = Candidate(hopper_config(), problem, BRANCHES["sm_90a"].space.template_version)
    stack = Stack("NVIDIA H200", "580", "13.0", "0.27", cc)
    result = RunResult(candidate, Outcome.OK, time_ms=0.2, cublas_ms=0.21,
                       provenance=Provenance(stack, candidate.template_version))
    with transaction(factory) as s:
        repo.record_measurement(s, job_id=None, trial_number=None, key=candidate.measurement_key(stack) + cc,
                                candidate=candidate, outcome=Outcome.OK, message="", result=result, build_seconds=1.0)


def test_a_branch_marked_compile_checked_is_served_only_from_its_own_gpus(
    db_factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The policy is the registry's: with Hopper marked compile-checked, a Hopper row is served only
    when it was measured on a 9.x GPU (its "9.x" entry matches any minor)."""
    factory, problem = db_factory, Problem(4096, 4096, 4096)
    unproven = {**BRANCHES, "sm_90a": dataclasses.replace(BRANCHES["sm_90a"], status="compile-checked")}
    monkeypatch.setattr(repo, "BRANCHES", unproven)
    _record(factory, "")  # a replay's row: no compute capability
    with transaction(factory) as s:
        assert repo.best_of(s, problem) is None
    _record(factory, "9.0")
    with transaction(factory) as s:
        best = repo.best_of(s, problem)
    assert best is not None and best.best.trial.compute_capability == "9.0"
    monkeypatch.setattr(repo, "BRANCHES", BRANCHES)  # as registered: Hopper's figures are served from anywhere
    with transaction(factory) as s:
        assert len(repo.tuned_problems(s, "float16", epilogue=problem.epilogue)) == 1


def test_a_ragged_job_starts_from_tiles_fitted_to_fill_the_sms() -> None:
    """The ragged class's WAVE_FITTED configs take the blk_n that best fills the SMs' rounds for
    the problem (3000x5000: 152 wide, 792 tiles in 6 rounds of 132; chunked TMA stores with a
    24-wide last box), each valid there; the others keep their tiles. The first start, ping-pong
    consumers on 128x152, has that width fixed (it was measured at 3000x5000x2000), so it fills
    those rounds as well as the fitted tiles and no better."""
    from tirtune.space.hopper.starts import RAGGED, WAVE_FITTED
    from tirtune.space.shapes import wave_fill

    hopper = branch("sm_90a")
    problem = Problem(3000, 5000, 2000, "bfloat16")
    starts = hopper.start_configs(problem)
    assert [(c.blk_m, c.blk_n, c.schedule, c.peel_k) for c in starts if c.epilogue == "tma_chunked"][:7] == [
        (128, 152, "pingpong", True), (128, 256, "cooperative", True), (128, 152, "cooperative", True),
        (128, 256, "cooperative", False), (128, 152, "cooperative", False), (128, 192, "cooperative", False),
        (192, 128, "cooperative", False)]
    assert all(hopper.space.is_valid(c, problem) for c in starts)

    def wave(c: Config) -> bool:
        return c.replace(peel_k=False) in WAVE_FITTED

    fitted = [c for c, own in zip(starts, RAGGED, strict=True) if wave(own)]
    kept = [c for c, own in zip(starts, RAGGED, strict=True) if not wave(own)]
    assert len(fitted) == 2 * len(WAVE_FITTED) and kept == [c for c in RAGGED if not wave(c)]
    pingpong, *others = kept
    assert pingpong.schedule == "pingpong" and all(c.schedule != "pingpong" or c.blk_n != 152 for c in others)
    assert min(wave_fill(c, problem) for c in fitted) == wave_fill(pingpong, problem)
    assert min(wave_fill(c, problem) for c in fitted) > max(wave_fill(c, problem) for c in others)


def test_a_peeled_start_is_kept_only_where_k_has_a_tail_to_skip() -> None:
    """The ragged class starts from its three best tiles with the last k-tile peeled (peel_k)
    where K is not whole in k-tiles (3000x5000x2000, 4000^3), the two cooperative ones followed by
    their unpeeled twins; where K is whole (3000x5000x4096) the peel has nothing to skip, so the
    branch drops it: the cooperative twins are not asked twice, the ping-pong tile starts unpeeled."""
    hopper = branch("sm_90a")
    for problem in (Problem(3000, 5000, 2000), Problem(4000, 4000, 4000, "bfloat16")):
        starts = hopper.start_configs(problem)
        assert [c.peel_k for c in starts[:4]] == [True, True, True, False]
        assert all(hopper.space.is_valid(c, problem) for c in starts)
        assert {c.replace(peel_k=False) for c in starts[1:3]} == set(starts[3:5])
    whole = Problem(3000, 5000, 4096)
    starts = hopper.start_configs(whole)
    assert not any(c.peel_k for c in starts) and len(starts) == len(set(starts)) == len(
        hopper.start_configs(Problem(3000, 5000, 2000))) - 2
    assert starts[0] == hopper.start_configs(Problem(3000, 5000, 2000))[0].replace(peel_k=False)
    assert all(hopper.space.is_valid(c, whole) for c in starts)


def test_no_start_is_trimmed_and_the_search_does_not_draw_trim() -> None:
    """trim was measured slower in every pair (bench/results/kits/2026-11-30-trim.md): no shape class
    starts from it, and the
    space's grid holds only trim=False (the template still builds trim=True: the kits, the tests)."""
    hopper = branch("sm_90a")
    assert hopper.space.knobs["trim"] == (False,)
    for problem in (Problem(3000, 5000, 2000), Problem(4000, 4000, 4000), Problem(16, 4096, 4096)):
        assert not any(c.trim for c in hopper.start_configs(problem))


def test_rounds_count_ctas_over_the_sms_as_shared_memory_and_threads_let_them_share_one() -> None:
    """rules.rounds: a persistent grid walks its tiles over at most 132 CTAs; otherwise the CTAs
    (tiles x split_k) fill 132 SMs x the CTAs one SM holds, by shared memory at the problem's
    element size (an e4m3 ring is half a 16-bit one's bytes) and threads, two at most."""
    from tirtune.core.epilogue import EpilogueSpec
    from tirtune.core.problem import FP8
    from tirtune.space.hopper.rules import ctas_per_sm, rounds

    tile = hopper_config(blk_m=128, blk_n=64, blk_k=128, stages=4, consumers=2)  # 196 KB at 2 bytes
    assert ctas_per_sm(tile, Problem(128, 4096, 4096)) == 1
    assert rounds(tile, Problem(128, 4096, 4096)) == 1  # 64 tiles
    assert rounds(tile.replace(split_k=2), Problem(128, 4096, 4096)) == 1  # 128 CTAs
    assert rounds(tile.replace(split_k=2), Problem(512, 4096, 4096)) == 4  # 512 CTAs, one an SM
    fp8 = Problem(512, 4096, 4096, FP8, EpilogueSpec(("scale_a", "scale_b")))
    assert ctas_per_sm(tile, fp8) == 2 and rounds(tile, fp8) == 1  # 98 KB: 256 tiles, two an SM
    # split in two, its parked fragments (rules.split_k_bytes) leave room for one an SM: 512 CTAs
    assert ctas_per_sm(tile.replace(split_k=2), fp8) == 1 and rounds(tile.replace(split_k=2), fp8) == 4
    assert rounds(tile.replace(persistent=True, warp_specialized=True), Problem(4096, 4096, 4096)) == 16  # 2048 tiles


def test_a_start_splits_k_no_deeper_than_adds_no_round_of_ctas() -> None:
    """A start that splits every tile keeps its split where the split CTAs take no more rounds
    than the unsplit kernel (128x4096x4096: 64 tiles of 128x64, 128 CTAs split in two), takes the
    deepest shallower split that adds none (3000x40x4096: 47 tiles a split of 4 would spread over
    two rounds, a split of 2 over one), else none (512 rows: 256 tiles already fill two rounds; the
    swapped 64x256 tile's 128 tiles one). In every measured pair on file where the split added
    rounds, it lost but twice (bench/results/generalize/2026-12-06-split-rounds.md). A split of
    the last round's tiles alone is left as it is."""
    from tirtune.core.epilogue import EpilogueSpec
    from tirtune.core.problem import FP8
    from tirtune.space.hopper import _split_fitted
    from tirtune.space.hopper.rules import rounds

    hopper = branch("sm_90a")
    small = hopper_config(blk_m=128, blk_n=64, blk_k=128, stages=4, consumers=2, split_k=2, l2_hint="none/first")
    assert _split_fitted(small, Problem(128, 4096, 4096)) == small
    unsplit = _split_fitted(small, Problem(512, 4096, 14336))
    assert unsplit == small.replace(split_k=1) and hopper.space.is_valid(unsplit, Problem(512, 4096, 14336))
    skinny = hopper_config(blk_m=64, blk_n=40, blk_k=128, stages=6, consumers=1, split_k=4)
    problem = Problem(3000, 40, 4096)
    assert rounds(skinny, problem) == 2 and _split_fitted(skinny, problem).split_k == 2
    assert rounds(skinny.replace(split_k=2), problem) == rounds(skinny.replace(split_k=1), problem) == 1
    tail = hopper_config(
        blk_m=64, blk_n=8, blk_k=128, stages=4, consumers=1, swap_ab=True, split_k=2, split_k_reduce="serial",
        split_k_scope="tail")
    assert _split_fitted(tail, Problem(5, 20480, 7168)) == tail
    # Through the branch: a small batch of 512 rows starts unsplit, 128 rows split as before, and an
    # FP8 job of 512 rows from the swapped 64x256 tile unsplit.
    assert all(c.split_k == 1 for c in hopper.start_configs(Problem(512, 4096, 14336)))
    assert [c.split_k for c in hopper.start_configs(Problem(128, 4096, 4096))][:2] == [2, 2]
    fp8 = Problem(512, 4096, 14336, FP8, EpilogueSpec(("scale_a", "scale_b")))
    swapped = [c for c in hopper.start_configs(fp8) if c.swap_ab]
    assert [(c.blk_m, c.blk_n, c.split_k) for c in swapped] == [(64, 256, 1)]
