"""The learned part of the cost model: gradient-boosted trees (LightGBM) over the features.

The target is log(ratio to cuBLAS): every stored measurement carries its same-run cuBLAS time, so
problems of any size share one scale, and the ratio is what every best is named by. Every problem
weighs the same in the fit (`problem_weights`: a sample weighs 1 / its problem's sample count,
scaled so the weights average 1): the suite's problems hold up to 434 measurements each and the
drawn ones 32, and unweighted trees learned the few heavily measured problems at the others'
expense. Leave-one-shape-out on the shipped prior (bench/model_variants.py, bench/model_study.py)
picked the settings below, and the weighting over no weighting, a ranking objective (lambdarank,
rank_xendcg) and a per-problem normalised target (docs/perf-notes.md, "The cost model", "Equal
problem weights"); the target stays the ratio itself, which the guide's shift and GET /best's
predicted ratio read.
Training is deterministic: the same samples, in the same order, give the same trees (LightGBM's
deterministic mode, one thread, a fixed seed), and the model names them by a digest.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from tirtune.core import Config, Problem, Sample
from tirtune.model.features import FEATURES, matrix

__all__ = ["MIN_PROBLEMS", "MIN_SAMPLES", "CostModel", "lightgbm", "problem_weights", "samples_digest", "train"]

MIN_SAMPLES = 200  # fewer measurements than this teach trees nothing worth ranking by
MIN_PROBLEMS = 3
PARAMS = {
    "objective": "regression",
    "learning_rate": 0.05,
    "num_leaves": 31,
    "min_data_in_leaf": 10,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "feature_fraction": 0.8,
    "deterministic": True,
    "force_row_wise": True,
    "num_threads": 1,
    "seed": 0,
    "verbosity": -1,
}
# 31 leaves and 600 rounds: leave-one-shape-out top-1 0.9674 against 0.9543-0.9577 with 15 and 300,
# which had been chosen when the prior held a tenth of its rows (docs/perf-notes.md, "Larger trees
# in the cost model"; bench/results/generalize/2026-12-06-model-variants-trees.json).
ROUNDS = 600


@dataclass(frozen=True, eq=False)
class CostModel:
    """Trees that predict a config's ratio to cuBLAS on a problem, and what they learned from."""

    booster: Any = field(repr=False)  # a lightgbm.Booster
    samples: int
    problems: int
    digest: str  # of the samples it was trained on (samples_digest)

    def predict(self, configs: Sequence[Config], problem: Problem) -> np.ndarray:
        """The predicted ratio of each config on `problem`."""
        return self.predict_pairs([(c, problem) for c in configs])

    def predict_pairs(self, pairs: Sequence[tuple[Config, Problem]]) -> np.ndarray:
        if not pairs:
            return np.zeros(0)
        predicted: np.ndarray = np.exp(np.asarray(self.booster.predict(matrix(pairs), num_threads=1), dtype=np.float64))
        return predicted


def lightgbm() -> ModuleType:
    """LightGBM, imported when first needed: a host where it cannot load (its OpenMP runtime
    missing, say) still tunes, with the cost model off (tirtune.model.keeper says so)."""
    import lightgbm as lgb

    return lgb


def samples_digest(samples: Sequence[Sample]) -> str:
    """A content hash of the samples in order (problem, config, ratio)."""
    h = hashlib.sha256()
    for s in samples:
        h.update(f"{s.problem.shape}:{s.problem.dtype}|{s.config.canonical()}|{s.ratio:.6g}\n".encode())
    return h.hexdigest()[:16]


def problem_weights(samples: Sequence[Sample]) -> np.ndarray:
    """One weight a sample, the same total for every problem: len(samples) / (problems * the
    problem's sample count), so they average 1."""
    counts = Counter(s.problem for s in samples)
    scale = len(samples) / max(len(counts), 1)
    weights: np.ndarray = np.array([scale / counts[s.problem] for s in samples], dtype=np.float64)
    return weights


def train(samples: Sequence[Sample], weights: Sequence[float] | None = None) -> CostModel | None:
    """Trees fitted to `samples`, each problem weighing the same (`problem_weights`, times
    `weights` where given), or None when they are too few to learn from (MIN_SAMPLES over
    MIN_PROBLEMS problems)."""
    problems = {s.problem for s in samples}
    if len(samples) < MIN_SAMPLES or len(problems) < MIN_PROBLEMS:
        return None
    x = matrix([(s.config, s.problem) for s in samples])
    y = np.array([math.log(s.ratio) for s in samples])
    w = problem_weights(samples)
    if weights is not None:
        w = w * np.asarray(weights, dtype=np.float64)
    lgb = lightgbm()
    data = lgb.Dataset(
        x,
        y,
        weight=w,
        feature_name=list(FEATURES),
        free_raw_data=True,
    )
    booster = lgb.train(PARAMS, data, num_boost_round=ROUNDS)
    return CostModel(booster, len(samples), len(problems), samples_digest(samples))
