"""Validity rules, whatever the branch: small named predicates returning None (valid) or the
reason it is not.

Problem rules look at the problem alone and refuse it before anything is proposed; config rules
look at one (config, problem) pair. Each rule's name is what the dashboard and the database show.
A rule may declare the knobs it reads (`reads`), so a search applies it as soon as those are
chosen. Each branch's rules are in its package (`tirtune.space.hopper.rules`,
`tirtune.space.blackwell.rules`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tirtune.core.config import Config
from tirtune.core.problem import Problem
from tirtune.space.errors import SpaceError

__all__ = [
    "ConfigRule",
    "ProblemRule",
    "Violation",
    "knobs_off_default",
    "knobs_read",
    "reads",
    "refuse_if_broken",
]

ProblemRule = Callable[[Problem], "str | None"]
ConfigRule = Callable[[Config, Problem], "str | None"]
_Rule = TypeVar("_Rule", bound=ConfigRule)
_READS: dict[ConfigRule, frozenset[str]] = {}


def reads(*knobs: str) -> Callable[[_Rule], _Rule]:
    """Declare the knobs a config rule reads (besides the problem): the rule's answer never
    depends on any other knob. SearchSpace.valid_configs applies a rule as soon as the knobs it
    reads are chosen, so a prefix of the knob grid that breaks it is cut as a whole
    (tests/test_space.py checks each declaration against the rule's behaviour)."""

    def mark(rule: _Rule) -> _Rule:
        _READS[rule] = frozenset(knobs)
        return rule

    return mark


def knobs_read(rule: ConfigRule) -> frozenset[str] | None:
    """The knobs `rule` declared with `reads`, or None (it may read any knob)."""
    return _READS.get(rule)


def knobs_off_default(config: Config, knobs: Collection[str]) -> list[str]:
    """The knobs of `config` outside `knobs` that are off their defaults, as "name=value" in its
    table's order. A space or branch without a knob has no code path for its other values: this
    is the one check that holds such knobs at their defaults (`SearchSpace`'s
    `knobs_of_this_space` and `holds`, the Blackwell branch's `hopper_knobs_at_default`)."""
    return [
        f"{knob.name}={getattr(config, knob.name)!r}"
        for knob in config.table
        if knob.name not in knobs and getattr(config, knob.name) != knob.default
    ]


@dataclass(frozen=True, slots=True)
class Violation:
    rule: str
    reason: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.reason}"


def refuse_if_broken(
    template: str,
    config: Config,
    problem: Problem,
    problem_rules: Sequence[ProblemRule],
    config_rules: Sequence[ConfigRule],
) -> None:
    """A template's own guard: SpaceError naming every rule (config, problem) breaks."""
    reasons = [r for r in (rule(problem) for rule in problem_rules) if r]
    reasons += [r for r in (rule(config, problem) for rule in config_rules) if r]
    if reasons:
        raise SpaceError(f"{template} cannot build {config.label()} for {problem}: " + "; ".join(reasons))
