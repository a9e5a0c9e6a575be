"""The local search: a job's batches spend most of their slots one knob away from its best configs.

Real Optuna storage (SQLite), the real hopper-gemm/5 space and rules; the measurements are ours
(ratios told by the test). The claim that configs with one normal form build one kernel is checked
by lowering them through TVM (no nvcc).
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from tirtune.core import Config, Problem
from tirtune.space import HOPPER
from tirtune.space.branches import branch
from tirtune.space.hopper import same_kernel
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.space.hopper.knobs import config as hopper_config
from tirtune.tuner.optuna_proposer import LOCAL_SHARE, OptunaProposer
from tirtune.tuner.proposer import Feedback

RAGGED = Problem(3000, 5000, 2000, "float16")
DECODE = Problem(16, 4096, 4096, "float16")
STARTS = tuple(branch("sm_90a").start_configs(RAGGED))


def changed(a: Config, b: Config) -> list[str]:
    return [f.name for f in HOPPER_KNOBS if getattr(a, f.name) != getattr(b, f.name)]


def is_ring_twin(a: Config, b: Config) -> bool:
    """The same ring bytes cut the other way (hopper/spaces.ring_twins): blk_k and stages alone
    changed, their product kept."""
    return changed(a, b) == ["blk_k", "stages"] and a.blk_k * a.stages == b.blk_k * b.stages


@pytest.mark.parametrize("problem", [RAGGED, DECODE])
def test_neighbours_are_valid_one_knob_away_nearest_values_first_and_build_distinct_kernels(problem: Problem) -> None:
    centre = branch("sm_90a").start_configs(problem)[0]
    near = HOPPER.neighbours(centre, problem, rng=random.Random(1))
    assert len(near) >= 15
    assert all(HOPPER.holds(c) and HOPPER.is_valid(c, problem) for c in near)
    assert all(len(changed(c, centre)) == 1 or is_ring_twin(c, centre) for c in near)
    assert len({same_kernel(c) for c in near}) == len(near), "two neighbours that build one kernel"
    assert same_kernel(centre) not in {same_kernel(c) for c in near}
    # Nearest values first: a knob moved to its range's next value before one further along it.
    steps = []
    for c in near:
        if is_ring_twin(c, centre):  # a coupled move: one step
            steps.append(1)
            continue
        (name,) = changed(c, centre)
        values = list(HOPPER.knobs[name])
        steps.append(abs(values.index(getattr(c, name)) - values.index(getattr(centre, name))))
    assert steps == sorted(steps) and steps[0] == 1 and steps[-1] > 1
    # Excluded configs, and any config building the same kernel as one, are left out.
    gone = near[:3]
    twin = gone[0].replace(cluster_dim="n") if gone[0].cluster == 1 else gone[0]
    rest = HOPPER.neighbours(centre, problem, exclude=[twin, *gone[1:]], rng=random.Random(1))
    assert not set(gone) & set(rest) and len(rest) == len(near) - 3


def test_the_knobs_the_template_ignores_are_the_ones_normal_form_resets() -> None:
    """Lowered through TVM: cluster_dim without a cluster and split_k_reduce without a split
    change no byte of the kernel; with a cluster (a split) they do, so normal_form keeps them."""
    from tirtune.builder import toolchain

    def source(config: Config, problem: Problem) -> str:
        return hashlib.sha256(toolchain.lower_to_cuda(config, problem).encode()).hexdigest()

    # 128x256 persistent, cooperative, no cluster, no split (ping-pong takes no cluster)
    ragged = next(c for c in STARTS if (c.blk_n, c.schedule) == (256, "cooperative"))
    decode = hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, split_k=2, l2_hint="first/none")
    ignored = [(ragged.replace(cluster_dim="n"), RAGGED), (ragged.replace(split_k_reduce="serial"), RAGGED),
               (decode.replace(cluster_dim="n"), DECODE)]
    for config, problem in ignored:
        assert HOPPER.is_valid(config, problem) and same_kernel(config) != config
        assert source(config, problem) == source(same_kernel(config), problem), config.label()
    clustered = ragged.replace(cluster=2)
    split = decode.replace(split_k_reduce="serial")
    for config, problem in [(clustered.replace(cluster_dim="n"), RAGGED), (split, DECODE)]:
        assert HOPPER.is_valid(config, problem) and same_kernel(config) == config
    assert source(clustered.replace(cluster_dim="n"), RAGGED) != source(clustered, RAGGED)
    assert source(split, DECODE) != source(decode, DECODE)


def proposer(tmp_path: Path, **kwargs: object) -> OptunaProposer:
    return OptunaProposer(f"sqlite:///{tmp_path / 'o.db'}", "s", HOPPER, seed=4, problem=RAGGED, **kwargs)  # type: ignore[arg-type]


def test_before_any_reply_the_first_batch_is_the_starts_then_their_neighbours_then_tpe(tmp_path: Path) -> None:
    p = proposer(tmp_path, start_with=STARTS)
    batch = p.ask(16)
    configs = [x.config for x in batch]
    assert configs[: len(STARTS)] == list(STARTS)
    local = round(LOCAL_SHARE * (16 - len(STARTS)))
    assert p.asked_local == local
    near = configs[len(STARTS): len(STARTS) + local]
    # Around the first two starting points (the likeliest best), taking turns.
    assert all(len(changed(c, STARTS[i % 2])) == 1 or is_ring_twin(c, STARTS[i % 2]) for i, c in enumerate(near))
    assert len(set(configs)) == len(configs) and all(HOPPER.is_valid(c, RAGGED) for c in configs)
    attrs = {t.number: t.user_attrs for t in p.study.trials}
    around = batch[len(STARTS): len(STARTS) + local]
    assert all(attrs[x.trial].get("neighbour_of") == "a starting point" for x in around)


def test_after_replies_the_batch_goes_one_knob_around_the_best_two_told(tmp_path: Path) -> None:
    p = proposer(tmp_path, start_with=STARTS)
    first = p.ask(len(STARTS))
    ratios = {x.trial: 0.5 for x in first}
    best, second = first[2], first[4]
    ratios[best.trial], ratios[second.trial] = 0.97, 0.95
    p.tell([Feedback(t, r, "OK") for t, r in ratios.items()])
    batch = p.ask(12)
    assert p.asked_local == 9  # round(0.75 * 12)
    near = [x.config for x in batch[:9]]
    centres = [best.config, second.config] * 5
    assert all(len(changed(c, centre)) == 1 or is_ring_twin(c, centre)
               for c, centre in zip(near, centres, strict=False))
    attrs = {t.number: t.user_attrs for t in p.study.trials}
    assert [attrs[x.trial]["neighbour_of"] for x in batch[:4]] == [best.trial, second.trial] * 2
    proposed = [x.config for x in first + batch]
    assert len(set(proposed)) == len(proposed)
    # A failed or wrong trial never leads the search.
    p.tell([Feedback(batch[0].trial, None, "WRONG_RESULT")])
    assert all(any(len(changed(x.config, c)) == 1 or is_ring_twin(x.config, c) for c in (best.config, second.config))
               for x in p.ask(4)[:3])


def test_without_a_local_share_the_proposer_is_tpe_alone(tmp_path: Path) -> None:
    p = proposer(tmp_path, start_with=STARTS, local_share=0.0)
    first = p.ask(len(STARTS))
    p.tell([Feedback(x.trial, 0.9 + 0.01 * i, "OK") for i, x in enumerate(first)])
    p.ask(8)
    assert p.asked_local == 0
    assert not any("neighbour_of" in t.user_attrs for t in p.study.trials)
    with pytest.raises(ValueError, match="local_share"):
        proposer(tmp_path, local_share=1.5)


def test_a_resumed_study_searches_around_what_it_had_measured_and_proposes_nothing_twice(tmp_path: Path) -> None:
    p = proposer(tmp_path, start_with=STARTS)
    first = p.ask(len(STARTS))
    p.tell([Feedback(x.trial, 0.99 if i == 3 else 0.6, "OK") for i, x in enumerate(first)])
    again = proposer(tmp_path, start_with=STARTS)  # a restarted service opens the same study
    batch = again.ask(8)
    assert all(len(changed(x.config, first[3].config)) == 1 for x in batch[:6:2])
    assert not {x.config for x in first} & {x.config for x in batch}


def test_a_restricted_space_searches_its_points_fewest_knobs_away_first() -> None:
    centre = STARTS[0]
    points = [centre.replace(stages=3), centre.replace(stages=3, raster_group=16),
              centre.replace(blk_n=192, stages=3, raster_group=16), centre.replace(raster_group=1), centre]
    space = HOPPER.restricted({RAGGED: points}, "recorded", "not recorded")
    near = space.neighbours(centre, RAGGED, rng=random.Random(0))
    assert [len(changed(c, centre)) for c in near] == [1, 1, 2, 3]
    assert set(near) == set(points) - {centre}


def test_starts_the_rules_refuse_are_repaired_before_any_is_asked(tmp_path: Path) -> None:
    """Optuna hands out enqueued trials oldest first: a start refused while another waited came
    back as that other start (unchecked), its repair one slot later. Starts are repaired up front."""
    a, b = STARTS[0], STARTS[1]
    points = [a.replace(stages=3), b.replace(stages=3), b.replace(stages=3, raster_group=16),
              a.replace(stages=3, raster_group=16, l2_promotion="256B")]
    space = HOPPER.restricted({RAGGED: points}, "recorded", "not recorded")
    assert not space.is_valid(a, RAGGED) and not space.is_valid(b, RAGGED)
    p = OptunaProposer(f"sqlite:///{tmp_path / 'o.db'}", "s", space, seed=0, start_with=[a, b], problem=RAGGED)
    asked = [x.config for x in p.ask(4)]
    assert asked[:2] == [a.replace(stages=3), b.replace(stages=3)]  # each start's nearest recorded config
    assert all(space.is_valid(c, RAGGED) for c in asked) and len(set(asked)) == 4


def test_a_wave_bound_tile_jumps_to_its_tail_split_twins() -> None:
    """The Hopper space's one jump (hopper/spaces.tail_twins): a persistent 128x128 tile on 168
    tiles (a whole wave and 36 more) jumps to the same tile with only the last 36 split, at each
    split whose 36 x split CTAs fit a wave; every twin valid and one kernel each, none that the
    one-knob neighbours reach; a tile count that fills whole waves, or fits in one, jumps nowhere."""
    problem = Problem(1680, 1536, 1536, "bfloat16")  # 14 x 12 = 168 tiles of 128x128, 24 k-tiles
    centre = hopper_config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2, persistent=True, raster_group=8,
                    epilogue="tma_chunked")
    twins = HOPPER.jumps_from(centre, problem)
    assert {c.split_k for c in twins} == {2, 3}  # 36 x 4 = 144 CTAs would not fit one wave
    assert all(HOPPER.is_valid(c, problem) and c.split_k_scope == "tail" for c in twins)
    assert all((c.blk_m, c.blk_n, c.blk_k, c.stages, c.consumers) == (128, 128, 64, 4, 2) for c in twins)
    assert all(len(changed(c, centre)) >= 5 for c in twins)
    assert not set(twins) & set(HOPPER.neighbours(centre, problem, rng=random.Random(0)))
    assert HOPPER.jumps_from(centre, problem, exclude=twins[:1]) == twins[1:]
    assert HOPPER.jumps_from(centre, Problem(1024, 1024, 1536, "bfloat16")) == []  # 64 tiles: one wave
    assert HOPPER.jumps_from(centre, Problem(2048, 1056 * 8, 1536, "bfloat16")) == []  # 16 x 66: 8 whole waves
    recorded = HOPPER.restricted({problem: [centre, *twins]}, "recorded", "not recorded")
    assert recorded.jumps_from(centre, problem) == []  # a restricted space lists its points instead


def test_a_ring_that_fills_shared_memory_steps_to_its_twin_cut_the_other_way() -> None:
    """Hopper's coupled move (hopper/spaces.ring_twins): 64x128x128 at 4 stages and 64x128x64 at
    8 hold the same ring bytes; each is one step of `neighbours` from the other, though no one-knob
    move joins them (8 stages of 128-deep k-tiles do not fit shared memory). The twins are valid,
    come with the nearest values, and are left out when excluded or when they break a rule; a
    restricted space's neighbours are its points, as before."""
    problem = Problem(250, 3072, 2048, "float16")
    deep = Config.from_label("64x128x128 s4 c2 ws persist gcol tma_chunked pingpong r232/24 l2 none/first p256B", HOPPER_KNOBS)
    shallow = deep.replace(blk_k=64, stages=8)
    assert HOPPER.is_valid(deep, problem) and HOPPER.is_valid(shallow, problem)
    assert not HOPPER.is_valid(deep.replace(stages=8), problem)  # the one-knob way there does not fit
    rng = random.Random(0)
    near_deep = HOPPER.neighbours(deep, problem, rng=rng)
    near_shallow = HOPPER.neighbours(shallow, problem, rng=rng)
    assert shallow in near_deep and deep in near_shallow
    # Both ways: half as deep in twice the stages, and twice as deep (256) in half (2).
    assert {c for c in near_deep if len(changed(c, deep)) > 1} == {shallow, deep.replace(blk_k=256, stages=2)}
    assert shallow not in HOPPER.neighbours(deep, problem, exclude=[shallow], rng=rng)
    # An odd stage count has only the halving twin (128-deep at 5 -> 64-deep at 10, which the
    # search's range, up to 8 stages, does not hold): no twin at all here.
    odd = deep.replace(blk_k=128, stages=5)
    twins = [c for c in HOPPER.neighbours(odd, problem, rng=rng) if len(changed(c, odd)) > 1]
    assert twins == []
    recorded = HOPPER.restricted({problem: [deep, shallow]}, "recorded", "not recorded")
    assert recorded.neighbours(deep, problem) == [shallow]
