"""Knob tables: what each knob of a template branch is, in one place.

A `Knob` declares one knob as its branch sees it: its field name, type and default, the values the
branch's search draws (its range), and what it means in words. A `KnobTable` is one branch's
knobs, in order; the branch packages declare theirs (`tirtune.space.hopper.knobs`,
`tirtune.space.blackwell.knobs`), and the search spaces, the rules and the docs read them from
there. Nothing here knows a knob: `Config` (core/config.py) is checked against every table a
branch declares (`Config.conform`), so a branch cannot give a knob another type or default than
the one stored configs carry.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tirtune.core.errors import SpaceError

__all__ = ["KNOB_TYPES", "Knob", "KnobTable", "KnobType", "KnobValue", "is_of_type", "type_word"]

KnobValue = int | bool | str
KnobType = type[int] | type[bool] | type[str]
KNOB_TYPES: tuple[KnobType, ...] = (int, bool, str)


def is_of_type(value: object, expected: KnobType) -> bool:
    """Whether `value` is a knob value of `expected` (a bool is not an int here)."""
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def type_word(expected: KnobType) -> str:
    """The type as a knob table shows it: "int", "bool" or "str"."""
    return expected.__name__


@dataclass(frozen=True, slots=True)
class Knob:
    """One knob of a branch: its name, type and default, the values its search draws, and what
    it means there (words, for people: the docs and the API show them)."""

    name: str
    type: KnobType
    default: KnobValue
    values: tuple[KnobValue, ...]  # the branch's range: what its current space's grid draws
    meaning: str

    def __post_init__(self) -> None:
        if self.type not in KNOB_TYPES:
            raise SpaceError(f"knob {self.name}: the type must be int, bool or str, got {self.type!r}")
        for value in (self.default, *self.values):
            if not is_of_type(value, self.type):
                raise SpaceError(f"knob {self.name}: {value!r} is not a {type_word(self.type)}")
        if not self.values or self.default not in self.values:
            raise SpaceError(f"knob {self.name}: the default {self.default!r} must be one of its values")
        if not self.meaning.strip():
            raise SpaceError(f"knob {self.name}: say what it means")


class KnobTable:
    """A branch's knobs, in their declared order, by name."""

    __slots__ = ("_knobs",)

    def __init__(self, *knobs: Knob) -> None:
        named: dict[str, Knob] = {}
        for knob in knobs:
            if knob.name in named:
                raise SpaceError(f"knob {knob.name} is declared twice")
            named[knob.name] = knob
        self._knobs = named

    def __getitem__(self, name: str) -> Knob:
        try:
            return self._knobs[name]
        except KeyError:
            raise SpaceError(f"no knob {name!r}; known: {', '.join(self._knobs)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._knobs

    def __iter__(self) -> Iterator[Knob]:
        return iter(self._knobs.values())

    def __len__(self) -> int:
        return len(self._knobs)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._knobs)

    def grid(self, names: tuple[str, ...] | None = None) -> dict[str, tuple[KnobValue, ...]]:
        """Knob name -> its values, for a search space: every knob's, or those of `names` in that
        order (a space's walk order is part of what its searches draw)."""
        return {name: self[name].values for name in (names if names is not None else self.names)}

    def markdown(self) -> str:
        """The table as the docs show it: one row per knob."""
        rows = ["| knob | type | default | values | meaning |", "| --- | --- | --- | --- | --- |"]
        for knob in self:
            values = ", ".join(_shown(v) for v in knob.values)
            meaning = " ".join(knob.meaning.split()).replace("|", "\\|")
            rows.append(f"| `{knob.name}` | {type_word(knob.type)} | {_shown(knob.default)} | {values} | {meaning} |")
        return "\n".join(rows)


def _shown(value: KnobValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)
