"""GET /best for a problem nobody tuned: the cost model's prediction, labelled as one.

The prediction is the config the model (tirtune.model: trained on the shipped prior of the GPU
model and the database's correct trials) ranks first over the problem's valid space, with its
predicted ratio to cuBLAS and the runners-up. It is never served as a measurement: its `kind` is
"predicted", it has no key (nothing was built or measured), and `tirtune.gemm` asks with
predict=false. POST /tune starts the problem's search from the same ranking.

A problem with a fused epilogue gets no prediction (`unpredictable`): the model's features
(tirtune.model.features) describe the shape, dtype and config but not the epilogue, and it learns
from plain GEMMs only (`repo.training_samples`), so its figure for a fused problem would be the
plain GEMM's claimed for another kernel. GET /best answers 404 with that reason instead.
"""

from __future__ import annotations

import random

from sqlalchemy.orm import Session, sessionmaker

from tirtune.api.schemas import ModelOut, PredictedBestOut, PredictedConfigOut, ProblemOut
from tirtune.core import Problem, Sample, Source
from tirtune.db import repo, transaction
from tirtune.model.guide import Guide
from tirtune.model.keeper import ModelKeeper
from tirtune.model.prior import load_prior, prior_gpus, shipped_gpus
from tirtune.space.branches import BRANCHES, Branch, branch_for_gpu_name

__all__ = ["ALTERNATIVES", "model_keeper", "predict_best", "prediction_gpu", "unpredictable"]

ALTERNATIVES = 4  # runners-up named beside the pick


def model_keeper(sessions: sessionmaker[Session]) -> ModelKeeper:
    """A keeper whose models learn from the shipped prior and this database's correct trials."""

    def load(gpu_name: str, version_prefix: str, source: Source, after_id: int) -> tuple[list[Sample], int]:
        with transaction(sessions) as s:
            return repo.training_samples(s, gpu_name, version_prefix, source=source, after_id=after_id)

    return ModelKeeper(load)


def prediction_gpu(s: Session, gpu: str | None) -> str | None:
    """The GPU model a prediction is for: the one asked for, else the one this database measured
    last, else the one whose shipped prior is the largest (when one is shipped)."""
    if gpu:
        return gpu
    newest = repo.newest_gpu(s)
    if newest:
        return newest
    return max(shipped_gpus(), key=lambda gpu: len(load_prior(gpu, "")), default=None)


def unpredictable(problem: Problem) -> str | None:
    """Why the cost model cannot speak for `problem` at all (FP8 operands, a fused epilogue), or None."""
    if problem.is_fp8:
        return (
            f"the cost model learns from 16-bit GEMMs only, so it has nothing to say of FP8 operands "
            f"({problem.dtype}); POST /tune measures it"
        )
    if problem.epilogue.is_none:
        return None
    return (
        f"the cost model does not see a fused epilogue ({problem.epilogue}): it learns from and describes "
        "plain GEMMs only, so it would claim the plain GEMM's speed; POST /tune measures it"
    )


def predict_best(models: ModelKeeper, problem: Problem, gpu: str) -> PredictedBestOut | None:
    """The model's pick for `problem` on `gpu`, or None (a fused epilogue: `unpredictable`; no
    branch runs on that GPU, the problem breaks a rule of its space, or the model has too little to
    learn from)."""
    branch = _branch_of(gpu)
    if unpredictable(problem) is not None or branch is None or branch.space.problem_violations(problem):
        return None
    model = models.model(gpu, branch.version_prefix, Source.GPU)
    if model is None:
        return None
    guide = Guide(model, branch.space, problem, seeds=branch.start_configs(problem), rng=random.Random(0))
    if not guide.ranked:
        return None
    picks = guide.first(ALTERNATIVES + 1, per_tile=1)
    predicted = guide.predict(picks)
    best, ratio = picks[0], float(predicted[0])
    prior_gpu = models.prior_gpu(gpu, branch.version_prefix, Source.GPU)
    borrowed = ""
    if prior_gpu not in ("", gpu):
        few = "none" if gpu not in prior_gpus(prior_gpu) else "too few"
        borrowed = f", those shipped measured on {prior_gpu}: {few} are shipped for {gpu}"
    return PredictedBestOut(
        problem=ProblemOut.of(problem),
        shape=problem.shape,
        dtype=problem.dtype,
        epilogue=str(problem.epilogue),
        config=best.to_json(),
        config_label=best.label(),
        predicted_ratio=round(ratio, 4),
        gpu=gpu,
        branch=branch.arch,
        alternatives=[
            PredictedConfigOut(config=c.to_json(), config_label=c.label(), predicted_ratio=round(float(r), 4))
            for c, r in zip(picks[1:], predicted[1:], strict=True)
        ],
        model=ModelOut(samples=model.samples, problems=model.problems, digest=model.digest, prior_gpu=prior_gpu),
        note=(
            f"nothing measured for {problem.shape} {problem.dtype} on {gpu}: the cost model's prediction "
            f"({model.samples} measurements of {model.problems} problems{borrowed}), never measured; "
            "POST /tune measures it"
        ),
    )


def _branch_of(gpu: str) -> Branch | None:
    """The branch whose GPUs `gpu` (an NVML name, "NVIDIA H200") is one of."""
    named = branch_for_gpu_name(gpu)
    if named is not None:
        return named
    words = set(gpu.upper().replace("-", " ").split())
    return next((b for b in BRANCHES.values() if words & {m.upper() for m in b.gpu_models}), None)
