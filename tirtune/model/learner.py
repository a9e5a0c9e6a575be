"""The learned part of the cost model: gradient-boosted trees (LightGBM) over the features.

The target is log(ratio to cuBLAS): every stored measurement carries its same-run cuBLAS time, so
problems of any size share one scale, and the ratio is what every best is named by. Leave-one-
shape-out on the shipped prior picked the settings below (docs/perf-notes.md, "The cost model").
Training is deterministic: the same samples, in the same order, give the same trees (LightGBM's
deterministic mode, one thread, a fixed seed), and the model names them by a digest.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from tirtune.core import Config, Problem, Sample
from tirtune.model.features import FEATURES, matrix

__all__ = ["MIN_PROBLEMS", "MIN_SAMPLES", "CostModel", "lightgbm", "samples_digest", "train"]

MIN_SAMPLES = 200  # fewer measurements than this teach trees nothing worth ranking by
MIN_PROBLEMS = 3
PARAMS = {
    "objective": "regression",
    "learning_rate": 0.05,
    "num_leaves": 15,
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
ROUNDS = 300


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


def train(samples: Sequence[Sample], weights: Sequence[float] | None = None) -> CostModel | None:
    """Trees fitted to `samples` (optionally weighted), or None when they are too few to learn
    from (MIN_SAMPLES over MIN_PROBLEMS problems)."""
    problems = {s.problem for s in samples}
    if len(samples) < MIN_SAMPLES or len(problems) < MIN_PROBLEMS:
        return None
    x = matrix([(s.config, s.problem) for s in samples])
    y = np.array([math.log(s.ratio) for s in samples])
    lgb = lightgbm()
    data = lgb.Dataset(
        x,
        y,
        weight=None if weights is None else np.asarray(weights, dtype=np.float64),
        feature_name=list(FEATURES),
        free_raw_data=True,
    )
    booster = lgb.train(PARAMS, data, num_boost_round=ROUNDS)
    return CostModel(booster, len(samples), len(problems), samples_digest(samples))
