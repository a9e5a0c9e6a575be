"""The cost model at one job: what to measure first, and what next once results come in.

A job's first proposals are the model's best-ranked configs of the problem (tirtune.model.search),
spread over several tiles so that one wrong guess about the tile does not spend the first batch.
As the job's own results arrive, the model learns this problem's residuals: their mean shifts
every prediction (the model's level on a problem it never saw is its least sure part; a shift
alone reorders nothing), and from `LOCAL_MIN` results on a few small trees fitted to what the
shift leaves reorder the configs (this problem likes k_rotate less than the others did, say).
The next proposals are the configs it then ranks best: neighbours of the best measured configs
and the best of the ranked pool alike, with a bonus for a structure (tile_key: the tile, swap_ab,
split_k) the job has measured less, so a few trials go to other tiles instead of all to one
tile's L2 hints and prefetches (in the first random draws through the service, a job's top six
were often one tile's minor variants: bench/results/generalize/).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tirtune.core import Config, Problem
from tirtune.model.features import FEATURES, matrix
from tirtune.model.learner import PARAMS, CostModel, lightgbm
from tirtune.model.search import SearchSettings, rank_space, tile_key
from tirtune.space.space import SearchSpace

__all__ = ["EXPLORE", "LOCAL_MIN", "PER_TILE", "Guide"]

PER_TILE = 1  # first picks of one tile (tile_key) before the next tile's
EXPLORE = 0.03  # the bonus (in log ratio, ~3%) of a structure the job has not measured, shrinking as it does
LOCAL_MIN = 4  # the job's own results before its local trees are fitted
LOCAL = {
    **PARAMS,
    "learning_rate": 0.1,
    "num_leaves": 4,
    "min_data_in_leaf": 2,
    "bagging_fraction": 1.0,
    "bagging_freq": 0,
    "feature_fraction": 1.0,
}
LOCAL_ROUNDS = 15
POOL_REVISITED = 64  # the ranked pool's best configs re-scored after each result


class Guide:
    """The cost model's ranking of one problem's valid space, updated by the job's results."""

    def __init__(
        self,
        model: CostModel,
        space: SearchSpace,
        problem: Problem,
        *,
        seeds: Iterable[Config] = (),
        rng: random.Random | None = None,
        settings: SearchSettings | None = None,
    ) -> None:
        self.model = model
        self.space = space
        self.problem = problem
        self._own: dict[Config, float] = {}  # this job's correct results: config -> ratio
        self._tried: dict[tuple[int, int, bool, int], int] = {}  # results told per structure (tile_key)
        self._offset = 0.0  # the mean of the job's log residuals
        self._local: Any = None  # a lightgbm.Booster over what the offset leaves
        self.ranked = rank_space(
            space,
            problem,
            self.predict,
            seeds=seeds,
            rng=rng or random.Random(0),
            settings=settings or SearchSettings(),
        )

    def predict(self, configs: Sequence[Config]) -> np.ndarray:
        """Predicted ratios of `configs` on the problem, with what the job's results taught."""
        if not configs:
            return np.zeros(0)
        rows = matrix([(c, self.problem) for c in configs])
        logs = np.asarray(self.model.booster.predict(rows, num_threads=1), dtype=np.float64) + self._offset
        if self._local is not None:
            logs += np.asarray(self._local.predict(rows, num_threads=1), dtype=np.float64)
        predicted: np.ndarray = np.exp(logs)
        return predicted

    def predicted(self, config: Config) -> float:
        return float(self.predict([config])[0])

    def first(self, n: int, *, per_tile: int = PER_TILE) -> list[Config]:
        """The `n` best-ranked configs, at most `per_tile` of a tile until every tile had its turn."""
        picks: list[Config] = []
        used: dict[tuple[int, int, bool, int], int] = {}
        for config, _ in self.ranked:
            if len(picks) == n:
                return picks
            if used.get(tile_key(config), 0) < per_tile:
                picks.append(config)
                used[tile_key(config)] = used.get(tile_key(config), 0) + 1
        rest = [c for c, _ in self.ranked if c not in picks]
        return picks + rest[: n - len(picks)]

    def tell(self, config: Config, ratio: float | None) -> None:
        """A result of this job (ratio None: it failed): the shift and the local trees are fitted
        again to every correct one."""
        if config not in self._own:
            self._tried[tile_key(config)] = self._tried.get(tile_key(config), 0) + 1
        if ratio is None or not ratio > 0 or self._own.get(config) == ratio:
            return
        self._own[config] = ratio
        own = list(self._own.items())
        rows = matrix([(c, self.problem) for c, _ in own])
        residual = np.array([math.log(r) for _, r in own]) - self.model.booster.predict(rows, num_threads=1)
        self._offset = float(np.mean(residual))
        if len(own) < LOCAL_MIN:
            self._local = None
            return
        lgb = lightgbm()
        data = lgb.Dataset(rows, residual - self._offset, feature_name=list(FEATURES), free_raw_data=True)
        self._local = lgb.train(LOCAL, data, num_boost_round=LOCAL_ROUNDS)

    def best_of(
        self,
        candidates: Iterable[Config],
        exclude: Iterable[Config] = (),
        *,
        pool: bool = True,
        explore: float = EXPLORE,
    ) -> Config | None:
        """The best of `candidates` and (with `pool`) the ranked pool's top, leaving out `exclude`:
        predicted ratio plus the exploration bonus of its structure (explore / sqrt(1 + results of
        it); EXPLORE unless told)."""
        skip = set(exclude)
        top = [c for c, _ in self.ranked[:POOL_REVISITED] if c not in skip] if pool else []
        options = list(dict.fromkeys([*(c for c in candidates if c not in skip), *top]))
        if not options:
            return None
        bonus = np.array([explore / math.sqrt(1 + self._tried.get(tile_key(c), 0)) for c in options])
        return options[int(np.argmax(np.log(self.predict(options)) + bonus))]
