"""The cost model (tirtune/model): features, the shipped prior, training, the ranked search, the
per-job guide, the keeper, and the database rows it learns from (real SQLite and PostgreSQL)."""

from __future__ import annotations

import random
import threading
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy.orm import Session, sessionmaker

from bench import model_prior
from tirtune.core import Candidate, Config, Outcome, Problem, Provenance, RunResult, Sample, Source, Stack
from tirtune.db import repo, transaction
from tirtune.model import prior as prior_module
from tirtune.model.features import FEATURES, features, matrix
from tirtune.model.guide import Guide
from tirtune.model.keeper import ModelKeeper
from tirtune.model.learner import MIN_SAMPLES, problem_weights, train
from tirtune.model.prior import OWN_PROBLEMS_ALONE, Prior, load_prior, prior_for, prior_gpus, prior_path
from tirtune.model.search import SearchSettings, rank_space, tile_key, transposed_order
from tirtune.space import TEMPLATE_VERSION
from tirtune.space.hopper import HOPPER
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.space.hopper.knobs import config as hopper_config

H200 = "NVIDIA H200"
PRIOR = load_prior(H200)
WIDE = Problem(512, 6144, 4096, "bfloat16")  # 128x128 tiles: 192 over 132 SMs, 1.45 rounds
SMALL = SearchSettings(population=48, overlay=2, generations=1, expand=6)


@pytest.fixture(scope="module")
def model():  # type: ignore[no-untyped-def]
    trained = train(PRIOR.samples)
    assert trained is not None
    return trained


def test_features_are_one_row_of_named_figures_per_pair() -> None:
    row = features(hopper_config(), Problem(4096, 4096, 4096))
    assert len(row) == len(FEATURES) and all(np.isfinite(row))
    assert matrix([(hopper_config(), Problem(16, 4096, 4096)), (hopper_config(blk_n=64), WIDE)]).shape == (2, len(FEATURES))


def test_the_wave_figures_see_a_tile_count_that_fills_the_sms() -> None:
    fill = FEATURES.index("wave_fill")
    rounds = FEATURES.index("rounds")
    square = hopper_config(blk_m=128, blk_n=128, persistent=True)
    fitted = square.replace(blk_n=192)  # 4 x 32 = 128 tiles: one round, 97% of the SMs
    assert features(square, WIDE)[rounds] == 2 and features(fitted, WIDE)[rounds] == 1
    assert features(fitted, WIDE)[fill] > 0.95 > 0.73 > features(square, WIDE)[fill]  # 192 / 264


def test_the_wave_figures_count_a_split_tail_as_a_fraction_of_a_round() -> None:
    """split_k_scope "tail": 168 tiles of 128x128 are a whole wave and 36 tiles split 3 ways, so
    about 1.33 rounds of work (fill 168 / 176) where the unsplit tile runs 2 (168 / 264); the
    reduction traffic counts the tail's tiles alone."""
    fill, split_tail = FEATURES.index("wave_fill"), FEATURES.index("split_tail")
    reduce_share = FEATURES.index("reduce_share")
    problem = Problem(1680, 1536, 1536, "bfloat16")
    plain = hopper_config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2)
    tail = plain.replace(split_k=3, split_k_reduce="serial", split_k_scope="tail")
    everywhere = tail.replace(split_k_scope="all")
    assert features(plain, problem)[fill] == pytest.approx(168 / 264)
    assert features(tail, problem)[fill] == pytest.approx(168 / 176)
    assert (features(tail, problem)[split_tail], features(everywhere, problem)[split_tail]) == (1.0, 0.0)
    shared = features(everywhere, problem)[reduce_share]
    assert 0 < features(tail, problem)[reduce_share] == pytest.approx(shared * 36 / 168)


def test_swap_ab_puts_the_problems_n_on_the_kernels_m() -> None:
    plain, swapped = hopper_config(blk_m=64, blk_n=16), hopper_config(blk_m=64, blk_n=16, swap_ab=True)
    tiles_m = FEATURES.index("tiles_m")
    assert features(swapped, Problem(16, 4096, 4096))[tiles_m] == 64  # 4096 / 64 along the kernel's M
    assert features(plain, Problem(16, 4096, 4096))[tiles_m] == 1


def test_the_prior_holds_valid_configs_of_the_current_space() -> None:
    assert len(PRIOR) >= MIN_SAMPLES and len({s.problem for s in PRIOR.samples}) >= 20
    for s in PRIOR.samples[::7]:
        assert HOPPER.holds(s.config) and HOPPER.is_valid(s.config, s.problem), s
    assert load_prior("NVIDIA B200").samples == () and load_prior(None).digest == ""


@pytest.mark.parametrize("gpu", [H200, "NVIDIA H100 80GB HBM3"])
def test_the_prior_is_rebuilt_byte_for_byte_from_the_results_on_file(tmp_path: Path, gpu: str) -> None:
    rows, _ = model_prior.build(model_prior.RESULTS, gpu=gpu)
    out = tmp_path / "prior.csv.gz"
    model_prior.write(rows, out)
    assert rows and {r["gpu_name"] for r in rows} == {gpu}
    assert out.read_bytes() == prior_path(gpu).read_bytes()


def test_a_kits_timing_names_the_gpu_whose_prior_is_rebuilt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--gpu-of KIT.json` rebuilds the prior of the GPU model the kit ran on (its report's
    environment), as file_kit.sh and the GPU host's file-kit step do: an H100 kit, the H100's."""
    kit = model_prior.RESULTS / "kits" / "2026-12-06-swap-mid.json"
    out = tmp_path / "prior.csv.gz"
    assert model_prior.main(["--gpu-of", str(kit), "--out", str(out)]) == 0
    assert out.read_bytes() == prior_path("NVIDIA H100 80GB HBM3").read_bytes()
    unnamed = tmp_path / "kit.json"
    unnamed.write_text('{"environment": {}}')
    assert model_prior.main(["--gpu-of", str(unnamed), "--out", str(out)]) == 2
    assert "no GPU named in" in capsys.readouterr().err


def test_another_gpus_measurement_table_is_never_read_as_the_h200s_trials(tmp_path: Path) -> None:
    """An H100 run filed as `...32trials...-measurements.csv` holds "trials" in its name: the
    H200's prior skips it; the H100's reads its tables by the report beside each."""
    header = "problem,dtype,trial,origin,config,outcome,ratio,tflops,cublas_tflops,epilogue\n"
    row = "4096x4096x4096,float16,0,start,128x256x64 s4 c2 ws persist g8 tma_chunked,OK,1.007,749.4,744.6,none\n"
    (tmp_path / "x-32trials-h100-measurements.csv").write_text(header + row)
    (tmp_path / "x-32trials-h100.json").write_text('{"gpu": "NVIDIA H100 80GB HBM3"}')
    assert list(model_prior.trial_tables(tmp_path)) == []
    filed = "bench/results/suite/2026-12-07-suite-h100-cut-measurements.csv"
    h100 = list(model_prior.measurement_tables(model_prior.RESULTS, "NVIDIA H100 80GB HBM3"))
    assert any(r["origin"] == filed for r in h100)
    assert all(r["origin"] != filed for r in model_prior.trial_tables(model_prior.RESULTS))


def test_training_is_reproducible_and_refuses_too_little(model) -> None:  # type: ignore[no-untyped-def]
    again = train(PRIOR.samples)
    assert again is not None and again.digest == model.digest
    configs = [s.config for s in PRIOR.samples[:50]]
    assert np.array_equal(again.predict(configs, WIDE), model.predict(configs, WIDE))
    assert train(PRIOR.samples[: MIN_SAMPLES - 1]) is None
    one_problem = [s for s in PRIOR.samples if s.problem == PRIOR.samples[0].problem]
    assert train(one_problem * 10) is None  # many samples, one problem: nothing to generalize from


def test_every_problem_weighs_the_same_in_the_fit() -> None:
    samples = PRIOR.samples
    weights = problem_weights(samples)
    assert weights.shape == (len(samples),) and abs(float(weights.mean()) - 1.0) < 1e-9
    totals: dict[Problem, float] = {}
    for s, w in zip(samples, weights, strict=True):
        totals[s.problem] = totals.get(s.problem, 0.0) + float(w)
    assert max(totals.values()) - min(totals.values()) < 1e-6  # 434 samples of one problem or 1 of another
    counts = {p: sum(1 for s in samples if s.problem == p) for p in totals}
    assert max(counts.values()) > 100 * min(counts.values())


def test_the_model_ranks_a_problems_measured_configs_better_than_chance(model) -> None:  # type: ignore[no-untyped-def]
    problem = Problem(4096, 4096, 4096)
    ratios: dict[Config, float] = {s.config: s.ratio for s in PRIOR.samples if s.problem == problem}
    configs = list(ratios)
    predicted = model.predict(configs, problem)
    measured = np.array([ratios[c] for c in configs])
    assert np.corrcoef(predicted, measured)[0, 1] > 0.5


def test_the_search_returns_valid_distinct_kernels_best_first(model) -> None:  # type: ignore[no-untyped-def]
    seeds = [hopper_config(blk_m=128, blk_n=128, stages=4, persistent=True, raster_group=8, epilogue="tma_chunked")]
    ranked = rank_space(HOPPER, WIDE, lambda cs: model.predict(cs, WIDE), seeds=seeds, rng=random.Random(1),
                        settings=SMALL)
    configs = [c for c, _ in ranked]
    scores = [v for _, v in ranked]
    assert scores == sorted(scores, reverse=True) and len(configs) > 100
    assert all(HOPPER.is_valid(c, WIDE) for c in configs)
    assert len({HOPPER.normal_form(c) for c in configs}) == len(configs)  # type: ignore[misc]
    assert seeds[0] in configs


def test_every_tile_is_considered_even_when_no_seed_has_it() -> None:
    """A scorer that likes one tile no seed or random draw would hit: the overlay finds it."""
    def score(configs):  # type: ignore[no-untyped-def]
        return np.array([2.0 if (c.blk_m, c.blk_n) == (192, 176) else 1.0 for c in configs])

    seeds = [hopper_config(blk_m=128, blk_n=128, stages=4, persistent=True, raster_group=8, epilogue="tma_chunked")]
    ranked = rank_space(HOPPER, WIDE, score, seeds=seeds, rng=random.Random(2),
                        settings=SearchSettings(population=0, overlay=1, generations=0))
    assert (ranked[0][0].blk_m, ranked[0][0].blk_n) == (192, 176)


def test_the_overlay_lays_a_tile_swapped_the_other_way_in_the_transposed_order_too() -> None:
    """Over an unswapped seed in groups of 16 rows, a swapped tile comes in that order and in
    row-major order (its rows are the seed's columns); an unswapped tile only in the seed's."""
    seed = hopper_config(blk_m=128, blk_n=128, stages=4, persistent=True, raster_group=16, epilogue="tma_chunked")
    problem = Problem(647, 22016, 4096, "bfloat16")
    settings = SearchSettings(population=0, overlay=1, generations=0)
    laid = [c for c, _ in rank_space(HOPPER, problem, lambda cs: np.ones(len(cs)), seeds=[seed], settings=settings)]
    swapped = {c.raster_group for c in laid if c.swap_ab and (c.blk_m, c.blk_n) == (128, 216)}
    plain = {c.raster_group for c in laid if not c.swap_ab and (c.blk_m, c.blk_n) == (128, 216)}
    assert swapped == {16, 1} and plain == {16}
    assert all(HOPPER.is_valid(c, problem) for c in laid)
    assert [transposed_order(g) for g in (0, 1, 8, 16)] == [1, 0, 1, 1]


def test_the_overlay_lays_swapped_tiles_over_a_tma_store_with_a_store_they_take() -> None:
    """A swapped tile takes the chunked TMA store (and the epilogue warpgroup) but not "tma": laid
    over a seed that stores through tma_chunked it keeps the seed's store; over one that stores
    through "tma" it takes the register epilogue rather than being dropped."""
    def score(configs):  # type: ignore[no-untyped-def]
        return np.array([2.0 if c.swap_ab and (c.blk_m, c.blk_n) == (128, 136) else 1.0 for c in configs])

    problem = Problem(398, 11008, 4096, "bfloat16")
    settings = SearchSettings(population=0, overlay=1, generations=0)
    chunked = hopper_config(blk_m=128, blk_n=128, stages=4, persistent=True, raster_group=8, epilogue="tma_chunked",
                            epilogue_warpgroup=True)
    whole = chunked.replace(epilogue="tma", epilogue_warpgroup=False)
    for seed, store in ((chunked, ("tma_chunked", True)), (whole, ("register", False))):
        assert HOPPER.is_valid(seed, problem)
        ranked = rank_space(HOPPER, problem, score, seeds=[seed], rng=random.Random(2), settings=settings)
        top = ranked[0][0]
        assert top.swap_ab and (top.blk_m, top.blk_n) == (128, 136)
        assert (top.epilogue, top.epilogue_warpgroup) == store
        assert sum(1 for c, _ in ranked if not c.swap_ab and c.epilogue == seed.epilogue) > 10  # unswapped keep theirs


def test_the_search_reaches_a_tail_split_only_through_the_spaces_jump() -> None:
    """A scorer that likes the tail split of the seed's tile: five knobs from the seed, so the
    one-knob expansion alone never gets there; the space's jump (tail_twins) does."""
    problem = Problem(1680, 1536, 1536, "bfloat16")  # 168 tiles of 128x128: a wave and 36

    def score(configs):  # type: ignore[no-untyped-def]
        return np.array([2.0 if c.split_k_scope == "tail" and c.blk_n == 128 else 1.0 for c in configs])

    seed = hopper_config(blk_m=128, blk_n=128, stages=4, persistent=True, raster_group=8, epilogue="tma_chunked")
    settings = SearchSettings(population=0, overlay=0, generations=1, expand=1)
    ranked = rank_space(HOPPER, problem, score, seeds=[seed], rng=random.Random(4), settings=settings)
    assert ranked[0][0].split_k_scope == "tail" and (ranked[0][0].blk_m, ranked[0][0].blk_n) == (128, 128)
    without = replace(HOPPER, jumps=())
    ranked = rank_space(without, problem, score, seeds=[seed], rng=random.Random(4), settings=settings)
    assert all(c.split_k_scope == "all" for c, _ in ranked)


def test_the_guides_first_picks_spread_over_tiles(model) -> None:  # type: ignore[no-untyped-def]
    guide = Guide(model, HOPPER, WIDE, rng=random.Random(3), settings=SMALL)
    picks = guide.first(8, per_tile=2)
    assert len(picks) == 8 == len(set(picks))
    counts: dict[tuple[int, int, bool, int], int] = {}
    for c in picks:
        counts[tile_key(c)] = counts.get(tile_key(c), 0) + 1
    assert max(counts.values()) <= 2 and len(counts) >= 4
    assert len({tile_key(c) for c in guide.first(8)}) == 8  # by default one a tile


def test_the_guide_gives_a_structure_it_measured_less_a_bonus(model) -> None:  # type: ignore[no-untyped-def]
    """With every config predicted alike, the pick is the first offered until the job has tried
    its tile (failures count): then a config of a tile not tried wins on its bonus alone."""
    guide = Guide(model, HOPPER, WIDE, rng=random.Random(6), settings=SMALL)
    a = guide.ranked[0][0]
    b = next(c for c, _ in guide.ranked if tile_key(c) != tile_key(a))
    guide.predict = lambda configs: np.ones(len(configs))  # type: ignore[method-assign]
    rest = [c for c, _ in guide.ranked if c not in (a, b)]
    assert guide.best_of([a, b], exclude=rest) == a
    twin = next(c for c, _ in guide.ranked if tile_key(c) == tile_key(a) and c != a)
    guide.tell(twin, None)
    assert guide.best_of([a, b], exclude=rest) == b


def test_the_guide_learns_from_the_jobs_own_results(model) -> None:  # type: ignore[no-untyped-def]
    guide = Guide(model, HOPPER, WIDE, rng=random.Random(4), settings=SMALL)
    top, predicted = guide.ranked[0]
    guide.tell(top, predicted * 0.5)  # measured at half what the model thought
    assert guide.predicted(top) < predicted * 0.9
    assert guide.best_of([], exclude=[top]) != top


def _loader(stored: list[Sample], calls: list[int]):  # type: ignore[no-untyped-def]
    def load(gpu: str, prefix: str, source: Source, after: int) -> tuple[list[Sample], int]:
        calls.append(after)
        return stored[after:], len(stored)
    return load


def test_the_keeper_retrains_when_the_database_grows_and_not_otherwise() -> None:
    stored: list[Sample] = []
    calls: list[int] = []
    keeper = ModelKeeper(_loader(stored, calls))
    first = keeper.model(H200, "hopper-")
    assert first is not None and first.samples == len(PRIOR)  # the prior alone
    assert keeper.model(H200, "hopper-") is first  # nothing new: the same trees
    stored.extend(Sample(WIDE, s.config, s.ratio) for s in PRIOR.samples[:40])
    second = keeper.model(H200, "hopper-")
    assert second is not None and second is not first and second.samples == len(PRIOR) + 40
    assert second.digest != first.digest and calls == [0, 0, 0]
    assert keeper.model(None, "hopper-") is None
    assert ModelKeeper(_loader([], []), use_prior=False).model(H200, "hopper-") is None  # nothing to learn from


def test_a_gpu_model_without_a_prior_learns_from_its_branchs_shipped_one() -> None:
    """No prior is shipped for the H800: its model starts from the H200's (same branch), says so,
    and learns its own measurements beside them; a branch nobody shipped measurements for gets none."""
    h800 = "NVIDIA H800"
    assert (prior_for(H200).gpu_name, prior_for(H200).digest) == (H200, PRIOR.digest)
    borrowed = prior_for(h800)
    assert borrowed.gpu_name == H200 and borrowed.samples == PRIOR.samples and load_prior(h800).samples == ()
    assert prior_for("NVIDIA B200", "blackwell-").samples == () and prior_for(None).gpu_name == ""
    stored = [Sample(WIDE, s.config, s.ratio) for s in PRIOR.samples[:40]]
    keeper = ModelKeeper(_loader(stored, []))
    model = keeper.model(h800, "hopper-")
    assert model is not None and model.samples == len(PRIOR) + 40 and keeper.prior_gpu(h800, "hopper-") == H200
    assert keeper.model(H200, "hopper-") is not model and keeper.prior_gpu(H200, "hopper-") == H200
    assert keeper.prior_gpu("NVIDIA H100 PCIe", "hopper-") == ""  # not asked for yet
    assert ModelKeeper(_loader([], [])).model("NVIDIA B200", "blackwell-") is None


def test_a_gpu_model_with_a_small_prior_learns_from_it_beside_the_lent_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU model whose shipped prior covers fewer than OWN_PROBLEMS_ALONE problems learns from
    those rows followed by the H200's, and names both; one that covers as many stands alone, as the
    H200's does. The H100's shipped prior, cut to its first 30 problems, stands in for a small one."""
    h100 = "NVIDIA H100 80GB HBM3"
    shipped = load_prior(h100)
    assert shipped.samples and shipped.gpu_name == h100  # shipped: bench/model_prior.py --gpu
    problems = list(dict.fromkeys(s.problem for s in shipped.samples))
    assert len(problems) >= OWN_PROBLEMS_ALONE <= len({s.problem for s in PRIOR.samples})
    alone = prior_for(h100)
    assert (alone.samples, alone.digest, alone.gpu_name) == (shipped.samples, shipped.digest, h100)  # stands alone
    assert prior_for(H200).samples == PRIOR.samples

    kept = set(problems[:30])
    small = Prior(tuple(s for s in shipped.samples if s.problem in kept), "small", h100)
    real = prior_module.load_prior
    monkeypatch.setattr(
        prior_module, "load_prior", lambda gpu, prefix="hopper-": small if gpu == h100 else real(gpu, prefix)
    )
    joined = prior_for(h100)
    assert joined.samples == small.samples + PRIOR.samples and joined.gpu_name == f"{h100} + {H200}"
    assert joined.digest not in (small.digest, PRIOR.digest) and prior_gpus(joined.gpu_name) == (h100, H200)
    assert prior_gpus("") == () and prior_for(H200).samples == PRIOR.samples
    keeper = ModelKeeper(_loader([], []))
    model = keeper.model(h100, "hopper-")
    assert model is not None and model.samples == len(small) + len(PRIOR)
    assert keeper.prior_gpu(h100, "hopper-") == f"{h100} + {H200}"


def test_the_keeper_trains_once_for_threads_asking_together() -> None:
    keeper = ModelKeeper(_loader([], []))
    got = []
    threads = [threading.Thread(target=lambda: got.append(keeper.model(H200, "hopper-"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(m) for m in got}) == 1


STACK = Stack(H200, "580.159.04", "13.0", "0.27.0", "9.0")


def _measure(factory: sessionmaker[Session], problem: Problem, config: Config, ratio: float, *,
             outcome: Outcome = Outcome.OK, stack: Stack = STACK, source: Source = Source.GPU,
             key: str | None = None) -> None:
    c = Candidate(config, problem, TEMPLATE_VERSION)
    result = RunResult(c, outcome, time_ms=1.0 if outcome is Outcome.OK else None,
                       cublas_ms=ratio if outcome is Outcome.OK else None, repetitions=10, rel_error=1e-4,
                       provenance=Provenance(stack, TEMPLATE_VERSION, source=source))
    with transaction(factory) as s:
        repo.record_measurement(s, job_id=None, trial_number=0, key=key or uuid.uuid4().hex, candidate=c,
                                outcome=outcome, message="", result=result, source=source)


def test_the_database_gives_the_correct_trials_of_one_gpu_and_source_in_order(db_factory) -> None:  # type: ignore[no-untyped-def]
    a, b = hopper_config(blk_n=64), hopper_config(blk_n=192)
    _measure(db_factory, WIDE, a, 1.1)
    _measure(db_factory, WIDE, b, 0.9, outcome=Outcome.WRONG_RESULT)
    _measure(db_factory, WIDE, b, 1.2, stack=replace(STACK, gpu_name="NVIDIA H100 80GB HBM3"))
    _measure(db_factory, WIDE, b, 1.3, source=Source.REPLAY)
    _measure(db_factory, WIDE, b, 1.05, key="same")
    _measure(db_factory, WIDE, b, 1.05, key="same")  # a reused measurement: one sample
    with transaction(db_factory) as s:
        samples, newest = repo.training_samples(s, H200, "hopper-")
        later, _ = repo.training_samples(s, H200, "hopper-", after_id=newest)
        replayed, _ = repo.training_samples(s, H200, "hopper-", source=Source.REPLAY)
        other, _ = repo.training_samples(s, H200, "blackwell-")
    assert [(x.config, x.ratio) for x in samples] == [(a, 1.1), (b, 1.05)]
    assert later == [] and [x.ratio for x in replayed] == [1.3] and other == []


def test_the_guides_local_trees_reorder_what_the_job_measured(model) -> None:  # type: ignore[no-untyped-def]
    """The job finds that one knob (k_rotate here) costs a fifth on this problem: configs with it
    fall below their twins without it, though the global model ranked them alike."""
    guide = Guide(model, HOPPER, Problem(16, 4096, 4096), rng=random.Random(5), settings=SMALL)
    plain = [c for c, _ in guide.ranked if not c.k_rotate and HOPPER.is_valid(c.replace(k_rotate=True), guide.problem)]
    assert len(plain) >= 8
    for c in plain[:6]:
        base = guide.predicted(c)
        guide.tell(c, base)
        guide.tell(c.replace(k_rotate=True), base * 0.8)
    twin = plain[6]
    assert guide.predicted(twin.replace(k_rotate=True)) < guide.predicted(twin)


def test_a_guided_job_starts_from_the_models_picks_and_searches_by_it(db_url: str) -> None:
    """The job loop with a keeper, on measurements recorded on the H200 for a problem the prior
    does not hold (48x4096x2048 bf16): its first trials are the model's picks in the model's
    order (nothing transferred: the database is empty), later ones its neighbour and pool picks,
    every config once, and the job ends with its best named."""
    import optuna

    from tirtune.db import open_database
    from tirtune.runner.replay_runner import ReplayBuilder, ReplayRunner
    from tirtune.space.hopper import space_for
    from tirtune.tuner.job import JobLoop
    from tirtune.tuner.models import model_keeper

    data = Path(__file__).resolve().parents[1] / "bench" / "data" / "hopper-gemm-3-48x4096x2048-bfloat16.jsonl"
    problem = Problem(48, 4096, 2048, "bfloat16")
    assert problem not in {s.problem for s in PRIOR.samples}
    runner = ReplayRunner([data])
    space = runner.restrict(space_for(runner.template_version))
    sessions = open_database(db_url)
    keeper = model_keeper(sessions)
    with transaction(sessions) as s:
        job = repo.create_job(s, problem, space.arch, 20, None)
        repo.claim_job(s, job.id)
    model = keeper.model(H200, "hopper-", Source.REPLAY)  # what the job will be given: nothing new since
    assert model is not None
    expected = Guide(model, space, problem).first(12)
    summary = JobLoop(sessions, db_url, space, ReplayBuilder(), runner, batch_size=4, remeasure_top=0,
                      models=keeper).run(job.id)
    assert summary.state == "DONE" and summary.best is not None
    with transaction(sessions) as s:
        rows = repo.list_measurements(s, job_id=job.id, limit=1000)
    trials = sorted((r for r in rows if r.trial_number is not None and r.outcome is not Outcome.INVALID),
                    key=lambda r: r.trial_number or 0)
    assert len(trials) == 20 and len({r.config for r in trials}) == 20
    assert [r.config for r in trials[:12]] == expected
    study = optuna.load_study(study_name=job.study_name, storage=db_url)
    attrs = [t.user_attrs for t in study.get_trials(deepcopy=False)]
    assert any("model_pick" in a or "neighbour_of" in a for a in attrs)
    sessions.kw["bind"].dispose()


def test_a_guided_jobs_last_trials_refine_its_best_config(model, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """With a trial budget, the guided local picks among the last REFINE_LAST proposals are the
    best config's own one-knob neighbours, marked `refine`; before them, and without a budget,
    the picks range over the neighbours and jumps of the two best and the ranked pool."""

    from tirtune.tuner.optuna_proposer import REFINE_LAST, OptunaProposer
    from tirtune.tuner.proposer import Feedback

    def one_knob(a: Config, b: Config) -> bool:
        return sum(getattr(a, f.name) != getattr(b, f.name) for f in HOPPER_KNOBS) == 1

    guide = Guide(model, HOPPER, WIDE, rng=random.Random(7), settings=SMALL)
    starts = guide.first(2)
    budget = 2 + REFINE_LAST
    proposer = OptunaProposer(f"sqlite:///{tmp_path / 'r.db'}", "refine", HOPPER, problem=WIDE, guide=guide,
                              start_with=starts, budget=budget, local_share=1.0)
    first = proposer.ask(2)
    assert [p.config for p in first] == starts
    # The second start measures best: every later local pick is one of its neighbours.
    proposer.tell([Feedback(first[0].trial, 0.9, "OK"), Feedback(first[1].trial, 1.1, "OK")])
    asked = proposer.ask(REFINE_LAST)
    attrs = [proposer.study.trials[p.trial].user_attrs for p in asked]
    assert all(a.get("refine") and a["neighbour_of"] == first[1].trial for a in attrs)
    assert all(one_knob(p.config, starts[1]) for p in asked)
    proposer.abandon()
    # Without a budget the same job never refines.
    free = OptunaProposer(f"sqlite:///{tmp_path / 'f.db'}", "free", HOPPER, problem=WIDE, guide=guide,
                          start_with=starts, local_share=1.0)
    first = free.ask(2)
    free.tell([Feedback(first[0].trial, 0.9, "OK"), Feedback(first[1].trial, 1.1, "OK")])
    asked = free.ask(REFINE_LAST)
    assert not any(free.study.trials[p.trial].user_attrs.get("refine") for p in asked)
    free.abandon()


def test_a_refused_tpe_sample_is_repaired_to_the_models_best_near_it(model, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """With a guide, the repair of a sample a rule refuses is the best predicted of the nearest
    valid config and its valid neighbours: a config near TPE's sample, never the pool's top."""
    from tirtune.tuner.optuna_proposer import OptunaProposer

    guide = Guide(model, HOPPER, WIDE, rng=random.Random(7), settings=SMALL)
    proposer = OptunaProposer(f"sqlite:///{tmp_path / 'study.db'}", "repair", HOPPER, problem=WIDE, guide=guide,
                              local_share=0.0)
    nearest = hopper_config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2, persistent=True, raster_group=8,
                     epilogue="tma_chunked")
    assert HOPPER.is_valid(nearest, WIDE)
    repaired = proposer._guided_repair(nearest)
    near = [nearest, *HOPPER.neighbours(nearest, WIDE)]
    assert repaired in near
    assert guide.predicted(repaired) == max(guide.predicted(c) for c in near)
    asked = proposer.ask(4)  # TPE alone: every refused sample comes back repaired, valid and new
    assert all(HOPPER.is_valid(p.config, WIDE) for p in asked) and len({p.config for p in asked}) == 4
    proposer.abandon()


def test_with_a_guide_tpe_keeps_one_slot_of_an_eight_wide_batch(model, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The local share defaults to GUIDED_LOCAL_SHARE with a guide and LOCAL_SHARE without: an
    8-wide ask with no starts left holds 7 guided picks and one TPE sample (repaired or not)."""
    from tirtune.tuner.optuna_proposer import GUIDED_LOCAL_SHARE, LOCAL_SHARE, OptunaProposer

    guide = Guide(model, HOPPER, WIDE, rng=random.Random(7), settings=SMALL)
    starts = guide.first(2)
    guided = OptunaProposer(f"sqlite:///{tmp_path / 'g.db'}", "guided", HOPPER, problem=WIDE, guide=guide,
                            start_with=starts)
    plain = OptunaProposer(f"sqlite:///{tmp_path / 'p.db'}", "plain", HOPPER, problem=WIDE)
    assert guided.local_share == GUIDED_LOCAL_SHARE > LOCAL_SHARE == plain.local_share
    assert [p.config for p in guided.ask(2)] == starts
    asked = guided.ask(8)
    assert guided.asked_local == 7 and len({p.config for p in asked}) == 8
    attrs = [guided.study.trials[p.trial].user_attrs for p in asked]
    assert sum("model_pick" in a or "neighbour_of" in a for a in attrs) == 7
    assert not set(starts) & {p.config for p in asked}
    guided.abandon()
    plain.abandon()
