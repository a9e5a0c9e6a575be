"""A search space: knob ranges, validity rules and the template that turns a point into a kernel."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tirtune.core import Config, KnobTable, Problem
from tirtune.space.errors import SpaceError
from tirtune.space.validity import ConfigRule, ProblemRule, Violation, knobs_off_default, knobs_read

__all__ = ["SearchSpace"]


@dataclass(frozen=True)
class SearchSpace:
    """Knob ranges plus named rules for one architecture and template version."""

    arch: str
    template_version: str
    knobs: Mapping[str, Sequence[Any]]
    table: KnobTable  # the branch's knob table: every config of the space is a point of it
    problem_rules: Sequence[ProblemRule] = field(default_factory=tuple)
    config_rules: Sequence[ConfigRule] = field(default_factory=tuple)
    # A finite sub-space (see `restricted`): the only configs each problem may take, or None for
    # the whole grid. Kept beside its rule so searches can list the points instead of the grid.
    points: Mapping[Problem, frozenset[Config]] | None = None
    # The config whose kernel `config` generates, with the knobs the template ignores at these
    # values put back at their defaults (hopper-gemm/5: cluster_dim without a cluster, the split-K
    # reduction without a split): two configs with the same normal form build the same kernel
    # (tests/test_local_search.py lowers both). None: every knob always counts.
    normal_form: Callable[[Config], Config] | None = None
    # Moves of more than one knob that the branch declares (`jumps`): each takes a config and a
    # problem to configs a search should weigh next to its one-knob neighbours (hopper-gemm/5: the
    # same tile with only its last wave split, which changes five knobs at once).
    jumps: Sequence[Callable[[Config, Problem], Iterable[Config]]] = ()
    # Moves of knobs that only make sense together (`coupled`): each takes a config and a problem
    # to configs `neighbours` counts one step away, beside the one-knob moves (hopper-gemm/5: the
    # same ring cut the other way, blk_k halved with twice the stages or the reverse, which no
    # one-knob move reaches from a ring that fills shared memory).
    coupled: Sequence[Callable[[Config, Problem], Iterable[Config]]] = ()

    def restricted(
        self,
        points: Mapping[Problem, Collection[Config]],
        rule: str,
        reason: str,
        missing: Callable[[Problem, Sequence[Problem]], str] | None = None,
    ) -> SearchSpace:
        """This space cut down to `points`: any other config breaks the rule named `rule` (e.g. a
        replay of a recorded sample may propose only what was measured), and so does a problem
        with no points at all, with the reason `missing(problem, problems with points)`: it is
        refused up front (`check_problem`) instead of searching an empty space."""
        frozen = {p: frozenset(cs) for p, cs in points.items()}
        having = sorted((p for p, cs in frozen.items() if cs), key=lambda p: (p.dtype, p.m, p.n, p.k))

        def in_points(config: Config, problem: Problem) -> str | None:
            return None if config in frozen.get(problem, frozenset()) else reason

        def has_points(problem: Problem) -> str | None:
            if frozen.get(problem):
                return None
            return missing(problem, having) if missing else f"{reason}: no point for {problem}"

        in_points.__name__ = has_points.__name__ = rule
        return replace(
            self,
            problem_rules=(*self.problem_rules, has_points),
            config_rules=(*self.config_rules, in_points),
            points=frozen,
        )

    def finite_configs(self, problem: Problem) -> list[Config] | None:
        """The valid configs of a restricted space (cheap to list), or None for a whole grid."""
        if self.points is None:
            return None
        return sorted(c for c in self.points.get(problem, ()) if self.is_valid(c, problem))

    def problem_violations(self, problem: Problem) -> list[Violation]:
        return _apply(self.problem_rules, problem)

    def check_problem(self, problem: Problem) -> None:
        """Raise SpaceError naming every rule the problem breaks."""
        found = self.problem_violations(problem)
        if found:
            raise SpaceError(f"problem {problem} cannot be tuned: " + "; ".join(map(str, found)))

    def violations(self, config: Config, problem: Problem) -> list[Violation]:
        named = [_named(rule, rule(config, problem)) for rule in self.config_rules]
        named.append(self._knobs_of_this_space(config))
        return self.problem_violations(problem) + [v for v in named if v is not None]

    def _knobs_of_this_space(self, config: Config) -> Violation | None:
        """A knob this space does not have must sit at its default: an older template version
        has no code path for the other values."""
        foreign = knobs_off_default(config, self.knobs)
        if foreign:
            return Violation(
                "knobs_of_this_space", f"{self.template_version} has no knob {', '.join(foreign)} (only the default)"
            )
        return None

    def holds(self, config: Config) -> bool:
        """Whether `config` is a point of this grid: each of the space's knobs at one of its values,
        every other knob at its default (so a point of a newer space is never cut down to a
        different config of an older one). Rules and problems are not asked."""
        if any(getattr(config, name) not in values for name, values in self.knobs.items()):
            return False
        return not knobs_off_default(config, self.knobs)

    def is_valid(self, config: Config, problem: Problem) -> bool:
        # Short-circuits on the first broken rule: enumerating the grid checks every point.
        if self.problem_violations(problem) or self._knobs_of_this_space(config):
            return False
        return not any(rule(config, problem) for rule in self.config_rules)

    def configs(self) -> Iterator[Config]:
        """Every point of the knob grid, valid or not."""
        names = list(self.knobs)
        for values in itertools.product(*(self.knobs[n] for n in names)):
            yield Config(self.table, **dict(zip(names, values, strict=True)))

    def valid_configs(self, problem: Problem) -> list[Config]:
        """Every valid point of the grid, in `configs()` order."""
        finite = self.finite_configs(problem)
        if finite is not None:
            return finite
        # The grid's points set only this space's knobs: the problem and the rules decide.
        if self.problem_violations(problem):
            return []
        return self._search(problem)

    def _search(self, problem: Problem) -> list[Config]:
        """Depth-first over the knobs in order, applying each rule as soon as the knobs it reads
        (`validity.reads`) are chosen: a choice that breaks it cuts every completion at once. The
        hopper-gemm/5 grid has ~180M points (~0.3% valid at 4096^3): listing them one by one
        took half an hour. A rule without a declaration is applied to whole configs."""
        names = list(self.knobs)
        at = self._rules_by_depth(names)
        found: list[Config] = []
        chosen: dict[str, Any] = {}
        partial = _Partial(self.table)

        def walk(i: int) -> None:
            if i == len(names):
                found.append(Config(self.table, **chosen))
                return
            for value in self.knobs[names[i]]:
                chosen[names[i]] = partial.set(names[i], value)
                # Knobs not chosen yet sit at their defaults: the rules here do not read them.
                if at[i] and any(rule(partial.config, problem) for rule in at[i]):
                    continue
                walk(i + 1)
            del chosen[names[i]]
            partial.reset(names[i])

        if names:
            walk(0)
        elif not any(rule(Config(self.table), problem) for rule in self.config_rules):
            found.append(Config(self.table))
        return found

    def nearest_valid(
        self,
        config: Config,
        problem: Problem,
        *,
        exclude: Collection[Config] = (),
        rng: random.Random | None = None,
        max_nodes: int = 50_000,
    ) -> Config | None:
        """A valid config not in `exclude` that changes the fewest knobs of `config` (ties drawn
        with `rng`), or None when there is none. Branch and bound over the same depth-first walk
        as `_search`: each knob tries `config`'s value first, so the first complete config found
        is near; partial configs that change more knobs than the best found so far, or break a
        rule whose knobs are all chosen, are cut. In hopper-gemm/5 (~1e10 grid points, ~3M valid
        at a problem) listing every valid config takes minutes and a search ring by ring around a
        sample three knobs away hundreds of thousands of configs; this walk visits at most
        `max_nodes` partial configs (tens of thousands, well under a second), then returns the
        nearest found so far."""
        rng = rng or random.Random(0)
        finite = self.finite_configs(problem)
        names = list(self.knobs)
        if finite is not None or not names or self.problem_violations(problem):
            pool = [c for c in (finite if finite is not None else self.valid_configs(problem)) if c not in exclude]
            if not pool:
                return None
            far = {c: _knobs_changed(c, config, names) for c in pool}
            nearest = min(far.values())
            return rng.choice([c for c in pool if far[c] == nearest])
        at = self._rules_by_depth(names)
        excluded = set(exclude)
        # Per depth, the walk's order: (value, 1 if it changes `config`'s knob), `config`'s own
        # value first, the others shuffled. The partial config is written in place: the walk's
        # inner loop is most of a repair's time (each refused proposal of a job's ask,
        # bench/loop_overhead.py).
        steps = []
        for name in names:
            own = getattr(config, name)
            others = [v for v in self.knobs[name] if v != own]
            rng.shuffle(others)
            steps.append(([(own, 0)] if own in self.knobs[name] else []) + [(v, 1) for v in others])
        best = [len(names) + 1]
        ties: list[Config] = []
        chosen: dict[str, Any] = {}
        partial = _Partial(self.table)
        nodes = [0]
        defaults = [self.table[name].default for name in names]
        pc, put, depth = partial.config, object.__setattr__, len(names)

        def walk(i: int, changed: int) -> None:
            if i == depth:
                found = Config(self.table, **chosen)
                if found in excluded:
                    return
                if changed < best[0]:
                    best[0] = changed
                    ties.clear()
                ties.append(found)
                return
            name, rules = names[i], at[i]
            for value, change in steps[i]:
                if nodes[0] >= max_nodes and ties:
                    return
                cost = changed + change
                # Enough ties at the best distance to draw from: only a nearer config counts now.
                if cost > best[0] or (cost == best[0] and len(ties) >= _TIES):
                    continue
                nodes[0] += 1
                put(pc, name, value)
                chosen[name] = value
                broken = False
                for rule in rules:
                    if rule(pc, problem):
                        broken = True
                        break
                if not broken:
                    walk(i + 1, cost)
            chosen.pop(name, None)
            put(pc, name, defaults[i])

        walk(0, 0)
        if not ties:
            return None
        return rng.choice(ties)

    def sample_valid(
        self, problem: Problem, rng: random.Random, *, attempt_nodes: int = 400, attempts: int = 50
    ) -> Config | None:
        """One valid config drawn at random: the depth-first walk of `_search` with each knob's
        values in a random order, returning the first complete config; a walk that visits
        `attempt_nodes` partial configs without one (stuck under an early choice that few
        completions survive) starts again, at most `attempts` times (None then, or when the
        problem has no valid config). Every valid config can come out, though not with equal
        chances: what a search seeds its population with. In hopper-gemm/5 a draw takes about a
        millisecond; one unbounded walk could take tens."""
        finite = self.finite_configs(problem)
        if finite is not None:
            return rng.choice(finite) if finite else None
        names = list(self.knobs)
        if not names or self.problem_violations(problem):
            return None
        at = self._rules_by_depth(names)
        for _ in range(attempts):
            found = self._random_walk(names, at, problem, rng, attempt_nodes)
            if found is not None:
                return found
        return None

    def _random_walk(
        self, names: list[str], at: list[list[ConfigRule]], problem: Problem, rng: random.Random, budget: int
    ) -> Config | None:
        """`sample_valid`'s one walk: knob values in a random order, the first valid config, or
        None after `budget` partial configs."""
        chosen: dict[str, Any] = {}
        partial = _Partial(self.table)
        nodes = 0

        def walk(i: int) -> bool:
            nonlocal nodes
            if i == len(names):
                return True
            values = list(self.knobs[names[i]])
            rng.shuffle(values)
            for value in values:
                nodes += 1
                if nodes > budget:
                    return False
                chosen[names[i]] = partial.set(names[i], value)
                if at[i] and any(rule(partial.config, problem) for rule in at[i]):
                    continue
                if walk(i + 1):
                    return True
            del chosen[names[i]]
            partial.reset(names[i])
            return False

        return Config(self.table, **chosen) if walk(0) else None

    def neighbours(
        self,
        config: Config,
        problem: Problem,
        *,
        exclude: Collection[Config] = (),
        rng: random.Random | None = None,
    ) -> list[Config]:
        """The valid configs one knob away from `config`, not in `exclude`, nearest first: a knob
        moved to the next value of its range before a value further along it (stages 4 -> 3 or 5
        before 4 -> 8), ties in `rng`'s order. The space's `coupled` moves count as one step (the
        next value). A restricted space (a replay's recorded sample)
        rarely holds a config one knob away, so there every valid point comes back, fewest knobs
        changed first. Configs that build the same kernel (`normal_form`) count once, and not at
        all when one of them is `config` or excluded. What a local search around a good config
        measures next."""
        rng = rng or random.Random(0)
        same = self.normal_form or (lambda c: c)
        excluded = {same(c) for c in exclude}
        excluded.add(same(config))
        finite = self.finite_configs(problem)
        if finite is not None:
            names = list(self.knobs)
            ranked = [(_knobs_changed(c, config, names), rng.random(), c) for c in finite if same(c) not in excluded]
            return [c for *_, c in sorted(ranked, key=lambda t: t[:2])]
        if self.problem_violations(problem):
            return []
        ranked = []
        for name, values in self.knobs.items():
            own = getattr(config, name)
            at = values.index(own) if own in values else None
            for i, value in enumerate(values):
                if value == own:
                    continue
                moved = config.replace(**{name: value})
                if same(moved) in excluded or not self.holds(moved) or not self.is_valid(moved, problem):
                    continue
                excluded.add(same(moved))  # one of the configs that build the same kernel
                ranked.append((abs(i - at) if at is not None else 1, rng.random(), moved))
        for move in self.coupled:
            for moved in move(config, problem):
                if same(moved) in excluded or not self.holds(moved) or not self.is_valid(moved, problem):
                    continue
                excluded.add(same(moved))
                ranked.append((1, rng.random(), moved))
        return [c for *_, c in sorted(ranked, key=lambda t: t[:2])]

    def jumps_from(self, config: Config, problem: Problem, *, exclude: Collection[Config] = ()) -> list[Config]:
        """The valid configs the space's `jumps` take `config` to, not in `exclude`, each kernel
        once and not `config`'s own (none in a restricted space, which lists its points)."""
        if self.points is not None or not self.jumps or self.problem_violations(problem):
            return []
        same = self.normal_form or (lambda c: c)
        excluded = {same(c) for c in exclude}
        excluded.add(same(config))
        out = []
        for jump in self.jumps:
            for moved in jump(config, problem):
                if same(moved) in excluded or not self.holds(moved) or not self.is_valid(moved, problem):
                    continue
                excluded.add(same(moved))
                out.append(moved)
        return out

    def _rules_by_depth(self, names: list[str]) -> list[list[ConfigRule]]:
        """Each config rule at the depth of the last knob it reads (`validity.reads`); a rule
        without a declaration at the last depth (applied to whole configs)."""
        depth = {name: i for i, name in enumerate(names)}
        at: list[list[ConfigRule]] = [[] for _ in range(max(len(names), 1))]
        for rule in self.config_rules:
            read = knobs_read(rule)
            known = [depth[k] for k in read if k in depth] if read is not None else [len(names) - 1]
            at[max(known, default=0)].append(rule)
        return at

    def brute_force_valid_configs(self, problem: Problem) -> list[Config]:
        """`valid_configs` by checking every point of the grid (slow; the reference it is tested
        against)."""
        if self.problem_violations(problem):
            return []
        rules = self.config_rules
        return [c for c in self.configs() if not any(rule(c, problem) for rule in rules)]


_TIES = 8  # nearest configs drawn from


def _knobs_changed(a: Config, b: Config, names: Sequence[str]) -> int:
    return sum(getattr(a, n) != getattr(b, n) for n in names)


class _Partial:
    """One Config the searches change in place, knob by knob, as their walk goes down and back:
    the knobs not chosen yet sit at their defaults. Building a checked Config per node of the
    walk took two thirds of its time. The rules only read it; what a search returns is built the
    checked way."""

    def __init__(self, table: KnobTable) -> None:
        self.config = Config(table)
        self._table = table

    def set(self, name: str, value: Any) -> Any:
        object.__setattr__(self.config, name, value)
        return value

    def reset(self, name: str) -> None:
        object.__setattr__(self.config, name, self._table[name].default)


def _named(rule: Any, reason: str | None) -> Violation | None:
    return None if reason is None else Violation(rule.__name__, reason)


def _apply(rules: Sequence[ProblemRule], problem: Problem) -> list[Violation]:
    found = [_named(rule, rule(problem)) for rule in rules]
    return [v for v in found if v is not None]
