"""Where a job starts (tuner/start.py): transfer from the nearest tuned problems, then its class.

Real SQLite and PostgreSQL (the `db_factory` fixture), real Optuna storage, the real registry.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from tirtune.core import Candidate, Config, Outcome, Problem, Provenance, RunResult, Source, Stack
from tirtune.core.problem import FP8
from tirtune.db import repo, transaction
from tirtune.space import TEMPLATE_VERSION
from tirtune.space.branches import branch
from tirtune.space.hopper.knobs import config as hopper_config
from tirtune.space.shapes import ShapeClass, shape_class
from tirtune.tuner.optuna_proposer import OptunaProposer
from tirtune.tuner.start import PER_PROBLEM, start_configs

Factory = sessionmaker[Session]
H200 = Stack("NVIDIA H200", "580.159.04", "13.0", "0.27.0", "9.0")
H100 = Stack("NVIDIA H100 80GB HBM3", "580.159.04", "13.0", "0.27.0", "9.0")
HOPPER = branch("sm_90a")
DECODE = Problem(16, 4096, 4096)


def measured(factory: Factory, problem: Problem, config: Config, ratio: float, stack: Stack = H200,
             source: Source = Source.GPU) -> None:
    c = Candidate(config, problem, TEMPLATE_VERSION)
    result = RunResult(c, Outcome.OK, time_ms=1.0, cublas_ms=ratio, repetitions=10, rel_error=1e-4,
                       provenance=Provenance(stack, TEMPLATE_VERSION, source=source))
    with transaction(factory) as s:
        repo.record_measurement(s, job_id=None, trial_number=0, key=uuid.uuid4().hex, candidate=c,
                                outcome=Outcome.OK, message="", result=result, source=source)


def test_a_new_problem_starts_from_the_bests_of_its_nearest_tuned_problems(db_factory: Factory) -> None:
    near_best, near_second, near_third = (hopper_config(blk_n=n, stages=6) for n in (64, 128, 256))
    far_best = hopper_config(blk_m=128, blk_n=256, stages=3)
    for config, ratio in ((near_best, 1.4), (near_second, 1.3), (near_third, 1.2)):
        measured(db_factory, Problem(8, 4096, 4096), config, ratio)
    measured(db_factory, Problem(4096, 4096, 4096), far_best, 1.03)
    starts = start_configs(db_factory, HOPPER, DECODE, gpu_name="NVIDIA H200", source=Source.GPU)
    # The nearest problem's best two first (by ratio), then the next problem's, then the class's.
    assert starts[:3] == (near_best, near_second, far_best)
    assert near_third not in starts[:PER_PROBLEM + 1]
    assert starts[3:] == tuple(c for c in HOPPER.start_configs(DECODE) if c not in starts[:3])


def test_transfer_stays_on_the_gpu_model_and_the_source(db_factory: Factory) -> None:
    measured(db_factory, Problem(8, 4096, 4096), hopper_config(blk_n=64, stages=6), 1.4, stack=H100)
    measured(db_factory, Problem(8, 4096, 4096), hopper_config(blk_n=32, stages=6), 1.5, source=Source.REPLAY)
    starts = start_configs(db_factory, HOPPER, DECODE, gpu_name="NVIDIA H200", source=Source.GPU)
    assert starts == HOPPER.start_configs(DECODE)  # nothing tuned on an H200 from a GPU: the class alone


def test_without_anything_tuned_a_job_starts_from_its_shape_class(db_factory: Factory) -> None:
    assert shape_class(DECODE) is ShapeClass.DECODE
    assert start_configs(db_factory, HOPPER, DECODE, gpu_name=None, source=Source.GPU) == HOPPER.start_configs(DECODE)


def test_the_proposer_asks_the_start_configs_first(db_url: str, db_factory: Factory) -> None:
    first = hopper_config(blk_n=64, stages=6)
    measured(db_factory, Problem(8, 4096, 4096), first, 1.4)
    starts = start_configs(db_factory, HOPPER, DECODE, gpu_name="NVIDIA H200", source=Source.GPU)
    proposer = OptunaProposer(db_url, f"start-{uuid.uuid4().hex}", HOPPER.space, start_with=starts, problem=DECODE)
    asked = proposer.ask(1)
    proposer.abandon()
    # Offered first; a start config the problem's rules refuse comes back repaired, with the refusal.
    assert asked[0].config == first or (asked[0].refused is not None and asked[0].refused.config == first)


def test_a_bf16_job_starts_from_the_same_shape_tuned_in_fp16_first(db_factory: Factory) -> None:
    fp16_same = hopper_config(blk_n=16, stages=8)
    bf16_near = hopper_config(blk_n=32, stages=8)
    measured(db_factory, Problem(16, 4096, 4096, "float16"), fp16_same, 1.3)
    measured(db_factory, Problem(8, 4096, 4096, "bfloat16"), bf16_near, 1.4)
    starts = start_configs(db_factory, HOPPER, Problem(16, 4096, 4096, "bfloat16"), gpu_name="NVIDIA H200",
                           source=Source.GPU)
    assert starts[:2] == (fp16_same, bf16_near)


def test_a_best_the_space_no_longer_searches_is_not_transferred(db_factory: Factory) -> None:
    """A trimmed config measured best on a ragged problem (trim was searched until
    bench/results/kits/2026-11-30-trim.md) is not a start of the next ragged problem: the space no
    longer draws trim, and Optuna could not take it."""
    ragged = hopper_config(blk_m=128, blk_n=192, stages=4, persistent=True, raster_group=8, epilogue="tma_chunked")
    trimmed = hopper_config(blk_m=128, blk_n=192, stages=4, persistent=True, raster_group=8, epilogue="tma_chunked",
                     trim=True)
    measured(db_factory, Problem(3000, 5000, 2000), trimmed, 1.2)
    measured(db_factory, Problem(3000, 5000, 2000), ragged, 1.1)
    problem = Problem(3000, 5008, 2000)
    starts = start_configs(db_factory, HOPPER, problem, gpu_name="NVIDIA H200", source=Source.GPU)
    assert trimmed not in starts and starts[0] == ragged
    assert not HOPPER.space.holds(trimmed) and HOPPER.space.is_valid(trimmed, Problem(3000, 5000, 2000))


def test_without_a_model_transfer_keeps_to_the_shape_class(db_factory: Factory) -> None:
    """A decode problem's best is the nearest tuned problem of a 512-token one, but a tile of 16
    swapped rows is no start there: with nothing to rank it (no cost model), only problems of the
    job's own shape class are transferred from."""
    decode_best = hopper_config(blk_n=16, stages=6, swap_ab=True)
    measured(db_factory, Problem(16, 4608, 3584), decode_best, 1.2)
    batch = Problem(512, 4608, 3584)
    assert shape_class(batch) is ShapeClass.SMALL_BATCH
    anywhere = start_configs(db_factory, HOPPER, batch, gpu_name="NVIDIA H200", source=Source.GPU)
    assert anywhere[0] == decode_best  # the model's seeds: it ranks them
    own = start_configs(db_factory, HOPPER, batch, gpu_name="NVIDIA H200", source=Source.GPU, same_class=True)
    assert own == HOPPER.start_configs(batch)
    same_class_best = hopper_config(blk_m=128, blk_n=96, stages=6)
    measured(db_factory, Problem(256, 4608, 3584), same_class_best, 1.0)
    own = start_configs(db_factory, HOPPER, batch, gpu_name="NVIDIA H200", source=Source.GPU, same_class=True)
    assert own[0] == same_class_best and decode_best not in own[:PER_PROBLEM]


def test_a_job_without_a_cost_model_starts_from_its_own_class(db_url: str, db_factory: Factory) -> None:
    """The job loop's own start: with no cost model (`models=None`), a decode best tuned before is
    not among a 512-token job's starts; the class's configs lead."""
    from tirtune.runner.replay_runner import ReplayBuilder, ReplayRunner
    from tirtune.tuner.job import JobLoop

    runner = ReplayRunner([Path(__file__).resolve().parents[1] / "bench" / "data"])
    decode_best = hopper_config(blk_n=16, stages=6, swap_ab=True)
    measured(db_factory, Problem(16, 4608, 3584), decode_best, 1.2, source=Source.REPLAY)
    batch = Problem(512, 4608, 3584)
    with transaction(db_factory) as s:
        job = repo.create_job(s, batch, "sm_90a", 4)
    assert start_configs(db_factory, HOPPER, batch, gpu_name=job.gpu_name, source=Source.REPLAY)[0] == decode_best
    loop = JobLoop(db_factory, db_url, HOPPER.space, ReplayBuilder(), runner, models=None)
    proposer = loop.proposer_factory(job)
    try:
        starts = [p.config for p in proposer.ask(4)]
    finally:
        proposer.abandon()
    assert decode_best not in starts
    assert starts == list(HOPPER.start_configs(batch)[:4])


def test_an_fp8_job_starts_from_its_sibling_scalings_best_of_the_same_shape(db_factory: Factory) -> None:
    """An FP8 problem scaled per row and column starts from the same shape's per-tensor best before
    a nearer shape's of its own scaling is two doublings away; a block-scaled problem takes neither
    (its scales are applied inside the k loop: other kernels), and a 16-bit problem is untouched."""
    tensor_best = hopper_config(blk_m=64, blk_n=256, blk_k=128, stages=4, consumers=1, swap_ab=True)
    rowcol_far = hopper_config(blk_m=128, blk_n=128, blk_k=128, stages=6)
    shape = (512, 4096, 14336)
    measured(db_factory, Problem(*shape, FP8, "scale_a+scale_b"), tensor_best, 0.91)
    measured(db_factory, Problem(2048, 4096, 14336, FP8, "scale_row+scale_col"), rowcol_far, 0.95)
    rowcol = Problem(*shape, FP8, "scale_row+scale_col")
    starts = start_configs(db_factory, HOPPER, rowcol, gpu_name="NVIDIA H200", source=Source.GPU)
    assert starts[:2] == (tensor_best, rowcol_far)
    # with a bias the sibling is the per-tensor problem with the same bias, not the plain one
    with_bias = Problem(*shape, FP8, "scale_row+scale_col+bias")
    starts = start_configs(db_factory, HOPPER, with_bias, gpu_name="NVIDIA H200", source=Source.GPU)
    assert tensor_best not in starts and rowcol_far not in starts
    block = Problem(*shape, FP8, "scale_a_block+scale_b_block")
    starts = start_configs(db_factory, HOPPER, block, gpu_name="NVIDIA H200", source=Source.GPU)
    assert tensor_best not in starts and rowcol_far not in starts
    assert starts == HOPPER.start_configs(block)


def test_an_fp8_job_with_an_fp16_d_starts_from_the_bf16_ds_best_and_back(db_factory: Factory) -> None:
    """out_float16 changes the conversion at the store only: an FP8 job with an fp16 D starts from
    the same shape's best with a bf16 D (and its sibling scaling's), ahead of a nearer shape of its
    own epilogue two doublings away, and a bf16-D job from an fp16-D best likewise."""
    bf16_best = hopper_config(blk_m=128, blk_n=256, blk_k=128, stages=4, consumers=2)
    own_far = hopper_config(blk_m=128, blk_n=128, blk_k=128, stages=6)
    shape = (1024, 4096, 4096)
    measured(db_factory, Problem(*shape, FP8, "scale_a+scale_b"), bf16_best, 1.02)
    measured(db_factory, Problem(4096, 4096, 4096, FP8, "scale_a+scale_b+out_float16"), own_far, 1.05)
    fp16 = Problem(*shape, FP8, "scale_a+scale_b+out_float16")
    starts = start_configs(db_factory, HOPPER, fp16, gpu_name="NVIDIA H200", source=Source.GPU)
    assert starts[:2] == (bf16_best, own_far)
    rowcol_fp16 = Problem(*shape, FP8, "scale_row+scale_col+out_float16")  # sibling scaling and D dtype
    starts = start_configs(db_factory, HOPPER, rowcol_fp16, gpu_name="NVIDIA H200", source=Source.GPU)
    assert bf16_best in starts[:2]
    fp16_best = hopper_config(blk_m=64, blk_n=256, blk_k=128, stages=5, consumers=1)
    measured(db_factory, Problem(256, 8192, 4096, FP8, "scale_a+scale_b+out_float16"), fp16_best, 1.1)
    bf16 = Problem(256, 8192, 4096, FP8, "scale_a+scale_b")
    starts = start_configs(db_factory, HOPPER, bf16, gpu_name="NVIDIA H200", source=Source.GPU)
    assert starts[0] == fp16_best
