"""Where a job's search starts: transfer from the nearest tuned problems, then its shape class.

A new problem's first trials should be its likely best. Two sources, in this order:

1. **Transfer**: the best configs (by the same-run ratio, re-measured first: `repo.ranked`) of
   the `TRANSFER_PROBLEMS` nearest problems already tuned on the same GPU model and branch
   (`space.shapes.log_distance`: 16x4096x4096 is near 8x4096x4096 and 128x4096x4096, far from
   4096^3), `PER_PROBLEM` each, nearest problem first, of the same fused epilogue only (a plain
   GEMM's figures do not rank configs for a fused problem, nor back). The other 16-bit dtype counts as
   `OTHER_DTYPE` further away: the same shape in fp16 is a bf16 job's best guess (the kernels
   differ in the MMA's type name only), nearer than any other shape. Likewise an FP8 problem
   scaled per tensor and one scaled per row and column (`SIBLING_SCALINGS`) are each other's
   nearest but for the same scaling, `OTHER_SCALING` further away: their kernels differ in the
   scales the epilogue multiplies by, and their configs rank alike (on the H100 the rowwise
   512x4096x14336 job, started without its per-tensor twin's best, ended at 0.729 of torch where
   that best ran 0.914: docs/perf-notes.md, "The sibling scaling's best"). An FP8 problem with
   a bf16 D and its twin with an fp16 D (the epilogue op out_float16) are each other's nearest too,
   as far: their kernels differ in the conversion at the store, two bytes an element either way;
2. **Shape class**: the branch registry's starting configs for the problem's class
   (`space.shapes.shape_class`: decode, small batch, square, ...).

A config that does not fit the new problem (split-K over a K it does not divide, say) is still
offered: the proposer refuses it with its rule and repairs it to the nearest valid config, which
keeps what made it good.

With a cost model (tirtune.model: trained on every measurement of this GPU model, the shipped
prior included), both sources are only seeds: the model ranks them with the rest of the valid
space (`Guide`), and the job starts from its `START_PICKS` best picks, spread over tiles. The best
config of the nearest tuned problem is measured second whatever the model thinks of it: it is a
measurement, where the model's ranking of a problem it never saw is a guess.

Without a cost model (an FP8 problem, a GPU model with too few measurements to learn from),
nothing ranks a transferred config, so transfer keeps to problems of the job's own shape class
(`same_class`): the nearest tuned problem may be any distance away, and a decode problem's best
(a 64x16 swapped tile) started a 512-token problem, and half its 32 trials went to such narrow
tiles at 0.05-0.31 of cuBLAS on an H100 (docs/perf-notes.md, "Transfer without a cost model keeps
to the shape class").
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session, sessionmaker

from tirtune.core import Config, Problem, Source
from tirtune.core.epilogue import OUT_FLOAT16, EpilogueSpec, rescaled, scaling_of
from tirtune.core.problem import FP8, HALF_DTYPES
from tirtune.db import repo, transaction
from tirtune.model.guide import Guide
from tirtune.space.branches import Branch
from tirtune.space.shapes import nearest_problems, shape_class

__all__ = [
    "OTHER_DTYPE",
    "OTHER_SCALING",
    "PER_PROBLEM",
    "SIBLING_SCALINGS",
    "START_PICKS",
    "TRANSFER_PROBLEMS",
    "guided_starts",
    "start_configs",
    "start_sources",
    "transferred",
]

log = logging.getLogger(__name__)

TRANSFER_PROBLEMS = 3
PER_PROBLEM = 2
OTHER_DTYPE = 0.1  # in log_distance units: less than any change of shape (ln 2 = 0.69 for a doubling)
# FP8 scalings whose configs rank alike (the scales are applied once, to the whole sum, in the
# epilogue), each the other's sibling; the block scales, applied inside the k loop, have none.
SIBLING_SCALINGS = {"tensor": "rowcol", "rowcol": "tensor"}
OTHER_SCALING = 0.1  # as OTHER_DTYPE
# A guided job's enqueued starts: its first batch and most of the second, both asked before any
# result (JobLoop asks two batches ahead, a quarter of a 32-trial budget each).
START_PICKS = 12


def transferred(
    s: Session, branch: Branch, problem: Problem, *, gpu_name: str | None, source: Source, same_class: bool = False
) -> list[Config]:
    """The best configs of the nearest problems tuned before (nearest first; none for the
    problem itself, whose own measurements the job reuses anyway), only those the branch's space
    still holds (a knob value it no longer searches, such as trim=True, is not proposed again);
    with `same_class`, only problems of `problem`'s shape class."""
    # Between 16-bit problems only, or FP8 ones only: an FP8 tile reads twice the k of a 16-bit one
    # a stage, so the other width's bests are other kernels.
    dtypes = (FP8,) if problem.is_fp8 else HALF_DTYPES
    epilogues = [problem.epilogue]
    sibling = SIBLING_SCALINGS.get(scaling_of(problem.epilogue)) if problem.is_fp8 else None
    if sibling is not None:
        epilogues.append(rescaled(problem.epilogue, sibling))
    if problem.is_fp8:
        epilogues += [_other_out(e) for e in epilogues]
    tuned = [
        p
        for dtype in dtypes
        for epilogue in epilogues
        for p in repo.tuned_problems(s, dtype, epilogue=epilogue, gpu_name=gpu_name, source=source)
        if not same_class or shape_class(p) is shape_class(problem)
    ]
    configs: list[Config] = []
    nearest = nearest_problems(problem, tuned, TRANSFER_PROBLEMS, other_dtype=OTHER_DTYPE, other_epilogue=OTHER_SCALING)
    for near in nearest:
        ranking = repo.ranked(s, near, gpu_name=gpu_name, source=source, limit=4 * PER_PROBLEM)
        own = [
            r.trial.config
            for r in ranking
            if r.trial.template_version.startswith(branch.version_prefix) and branch.space.holds(r.trial.config)
        ]
        configs += own[:PER_PROBLEM]
    return configs


def _other_out(epilogue: EpilogueSpec) -> EpilogueSpec:
    """An FP8 epilogue with D's other dtype: out_float16 added, or taken away."""
    if epilogue.out_float16:
        return EpilogueSpec(tuple(op for op in epilogue.ops if op != OUT_FLOAT16))
    return EpilogueSpec((*epilogue.ops, OUT_FLOAT16))


def start_sources(
    sessions: sessionmaker[Session],
    branch: Branch,
    problem: Problem,
    *,
    gpu_name: str | None,
    source: Source,
    same_class: bool = False,
) -> tuple[tuple[Config, ...], tuple[Config, ...]]:
    """(transferred, the shape class's configs), each config once (a transferred config is not
    repeated among the class's); `same_class` as `transferred`."""
    with transaction(sessions) as s:
        near = tuple(
            dict.fromkeys(transferred(s, branch, problem, gpu_name=gpu_name, source=source, same_class=same_class))
        )
    own = tuple(c for c in dict.fromkeys(branch.start_configs(problem)) if c not in near)
    log.info(
        "%s (%s): %d start configs, %d of them transferred from the nearest tuned problems",
        problem,
        shape_class(problem).value,
        len(near) + len(own),
        len(near),
    )
    return near, own


def start_configs(
    sessions: sessionmaker[Session],
    branch: Branch,
    problem: Problem,
    *,
    gpu_name: str | None,
    source: Source,
    same_class: bool = False,
) -> tuple[Config, ...]:
    """Transfer first, then the shape class's configs; each config once."""
    near, own = start_sources(sessions, branch, problem, gpu_name=gpu_name, source=source, same_class=same_class)
    return (*near, *own)


def guided_starts(guide: Guide, near: tuple[Config, ...], picks: int = START_PICKS) -> tuple[Config, ...]:
    """The model's first `picks` (spread over tiles), with the nearest tuned problem's best
    config second when the model did not pick it."""
    chosen = guide.first(picks)
    same = guide.space.normal_form or (lambda c: c)
    if near and guide.space.holds(near[0]) and same(near[0]) not in {same(c) for c in chosen}:
        chosen.insert(1, near[0])
        chosen = chosen[:picks]
    return tuple(chosen)
