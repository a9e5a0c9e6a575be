"""The valid space of a problem, ranked by the cost model before anything is measured.

A Hopper problem has millions of valid configs (`SearchSpace.valid_configs` would list them for
minutes), so the ranking is a search: an evolutionary one, as TVM's MetaSchedule runs over its
cost model. The population starts from

* the seeds the caller hands in (the best configs of the nearest tuned problems, the starting
  configs of the problem's shape class: they are candidates like any other),
* random valid configs (`SearchSpace.sample_valid`),
* every tile of the space (blk_m x blk_n, with and without swap_ab) laid over the best few
  configs so far, so no tile shape is missed because no seed had it,

and each generation adds the valid one-knob neighbours (`SearchSpace.neighbours`) of the best
configs not expanded yet. Configs that build the same kernel count once (`normal_form`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tirtune.core import Config, Problem
from tirtune.space.space import SearchSpace

__all__ = ["Scorer", "SearchSettings", "rank_space", "tile_key", "transposed_order"]

Scorer = Callable[[Sequence[Config]], np.ndarray]  # configs -> predicted ratios (higher is better)


@dataclass(frozen=True, slots=True)
class SearchSettings:
    population: int = 256  # random valid configs in the first generation
    overlay: int = 6  # the best configs so far each tile is laid over
    generations: int = 3
    expand: int = 24  # configs whose neighbours each generation adds


def tile_key(config: Config) -> tuple[int, int, bool, int]:
    """What makes two configs different kernels at first sight: the tile, swap_ab and split_k."""
    return config.blk_m, config.blk_n, config.swap_ab, config.split_k


def rank_space(
    space: SearchSpace,
    problem: Problem,
    score: Scorer,
    *,
    seeds: Iterable[Config] = (),
    rng: random.Random | None = None,
    settings: SearchSettings | None = None,
) -> list[tuple[Config, float]]:
    """Valid configs of `problem` found by the search, best predicted first, each kernel once."""
    rng = rng or random.Random(0)
    settings = settings or SearchSettings()
    same = space.normal_form or (lambda c: c)
    found: dict[Config, float] = {}

    def add(configs: Iterable[Config | None]) -> None:
        fresh = list(dict.fromkeys(same(c) for c in configs if c is not None))
        fresh = [c for c in fresh if c not in found]
        if fresh:
            for config, value in zip(fresh, score(fresh), strict=True):
                found[config] = float(value)

    def best(n: int) -> list[Config]:
        return sorted(found, key=lambda c: -found[c])[:n]

    finite = space.finite_configs(problem)
    if finite is not None:  # a restricted space (a replay's recordings): rank every point
        add(finite)
        return sorted(found.items(), key=lambda kv: -kv[1])
    add(c for c in seeds if space.holds(c) and space.is_valid(c, problem))
    add(space.sample_valid(problem, rng) for _ in range(settings.population))
    add(_tiles_over(space, problem, best(settings.overlay)))
    expanded: set[Config] = set()
    for _ in range(settings.generations):
        centres = [c for c in best(settings.expand * 2) if c not in expanded][: settings.expand]
        if not centres:
            break
        for centre in centres:
            expanded.add(centre)
            add(space.neighbours(centre, problem, exclude=found.keys(), rng=rng))
            add(space.jumps_from(centre, problem, exclude=found.keys()))
    return sorted(found.items(), key=lambda kv: -kv[1])


def _tiles_over(space: SearchSpace, problem: Problem, configs: Sequence[Config]) -> list[Config]:
    """Every tile of the space (blk_m x blk_n, swap_ab either way) laid over each config: the
    config's own consumers and schedule where the tile takes them, else the first of the space's
    that it takes (192 rows need three cooperative consumers), with the ring as deep as shared
    memory allows up to the config's own depth, and the config's own store where the tile takes it,
    else the register epilogue (a swapped tile takes the chunked TMA store, not "tma"); one valid
    config per tile and config. A tile swapped the other way from the config also comes in the
    config's tile order transposed (`transposed_order`), since its rows are the config's columns."""
    out = []
    blk_ms = space.knobs.get("blk_m", ())
    blk_ns = space.knobs.get("blk_n", ())
    swaps = space.knobs.get("swap_ab", (False,))
    stages = sorted(space.knobs.get("stages", ()), reverse=True)
    consumers = space.knobs.get("consumers", ())
    schedules = space.knobs.get("schedule", ())
    for config in configs:
        roles = list(
            dict.fromkeys(
                [
                    (config.consumers, config.schedule),
                    *((c, config.schedule) for c in consumers),
                    *((c, s) for s in schedules for c in consumers),
                ]
            )
        )
        depths = [s for s in stages if s <= config.stages] or [config.stages]
        stores: list[dict[str, object]] = [{}]
        if "epilogue" in space.knobs and "epilogue_warpgroup" in space.knobs and config.epilogue != "register":
            stores.append({"epilogue": "register", "epilogue_warpgroup": False})
        for swap in swaps:
            for blk_m in blk_ms:
                for blk_n in blk_ns:
                    found = _first_valid(
                        space,
                        problem,
                        (
                            config.replace(
                                blk_m=blk_m,
                                blk_n=blk_n,
                                swap_ab=swap,
                                consumers=c,
                                schedule=s,
                                stages=d,
                                **store,
                            )
                            for store in stores
                            for c, s in roles
                            for d in depths
                        ),
                    )
                    if found is None:
                        continue
                    out.append(found)
                    order = transposed_order(config.raster_group) if swap != config.swap_ab else None
                    if order is not None and order != found.raster_group and "raster_group" in space.knobs:
                        turned = found.replace(raster_group=order)
                        if space.is_valid(turned, problem):
                            out.append(turned)
    return out


def transposed_order(raster_group: int) -> int:
    """The tile order (`skeleton.raster`) that walks a kernel with rows and columns exchanged as
    `raster_group` walks it: column-major (0) and row-major (1) exchange; groups of rows have no
    exact transpose, and row-major is the order that, like them, keeps the readers of one of the
    other side's tiles together (with swap_ab, the weights' tiles: docs/perf-notes.md, "The tile
    order of swapped kernels")."""
    return 0 if raster_group == 1 else 1


def _first_valid(space: SearchSpace, problem: Problem, configs: Iterable[Config]) -> Config | None:
    return next((c for c in configs if space.is_valid(c, problem)), None)
