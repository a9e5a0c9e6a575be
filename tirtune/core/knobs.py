"""Knob tables: what each knob of a template branch is, in one place.

A `Knob` declares one knob as its branch sees it: its field name, type and default, the values the
branch's search draws (its range), and what it means in words. A `KnobTable` is one branch's
knobs, in order: the branch packages declare theirs (`tirtune.space.hopper.knobs`,
`tirtune.space.blackwell.knobs`), and a `Config` (core/config.py) is a point of one table, checked
against it. Nothing here knows a knob: the core holds no knob of any branch.

A table may hold another table's knobs that its own branch has no code path for (`holds`): each
such knob is carried at that table's type and default, with that default as its only value, so
that a config of either branch has the same knobs and the same stored identity (digest), and a
knob added to the other branch is held here without an edit.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from tirtune.core.errors import SpaceError

__all__ = [
    "CONFIG_ATTRIBUTES",
    "KNOB_TYPES",
    "Knob",
    "KnobTable",
    "KnobType",
    "KnobValue",
    "Labels",
    "is_of_type",
    "type_word",
]

KnobValue = int | bool | str
KnobType = type[int] | type[bool] | type[str]
KNOB_TYPES: tuple[KnobType, ...] = (int, bool, str)
# What a `Config` itself answers to (core/config.py): a knob of the same name would hide it.
CONFIG_ATTRIBUTES = (
    "canonical",
    "digest",
    "from_json",
    "from_label",
    "knobs",
    "label",
    "off_default",
    "replace",
    "table",
    "to_json",
)


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
    it means there (words, for people: the docs and the API show them). `held`: a knob of another
    branch's table that this one carries at its default only (`KnobTable(holds=...)`)."""

    name: str
    type: KnobType
    default: KnobValue
    values: tuple[KnobValue, ...]  # the branch's range: what its current space's grid draws
    meaning: str
    held: bool = False

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


class Labels(Protocol):
    """A branch's short text for a config's knobs, for tables and CSVs: `write` names every knob
    off its default (and the first knobs always); `read` is its inverse, SpaceError for text that
    is not a label. The knobs a label leaves out are at their defaults."""

    def write(self, knobs: Mapping[str, KnobValue]) -> str: ...

    def read(self, text: str) -> dict[str, KnobValue]: ...


class _NameValueLabels:
    """The label of a table that declares none: the first knobs' values, then name=value for
    every other knob off its default."""

    def __init__(self, table: KnobTable) -> None:
        self._table = table

    def write(self, knobs: Mapping[str, KnobValue]) -> str:
        words = [f"{name}={knobs[name]}" for name in self._table.first]
        words += [
            f"{k.name}={knobs[k.name]}"
            for k in self._table
            if k.name not in self._table.first and knobs[k.name] != k.default
        ]
        return " ".join(words)

    def read(self, text: str) -> dict[str, KnobValue]:
        knobs: dict[str, KnobValue] = {}
        for word in str(text).split():
            name, eq, value = word.partition("=")
            if not eq or name not in self._table:
                raise SpaceError(f"not a config label: {str(text)[:80]!r} (expected name=value words)")
            kind = self._table[name].type
            knobs[name] = value == "True" if kind is bool else int(value) if kind is int else value
        return knobs


class KnobTable:
    """A branch's knobs, in their declared order, by name, and what a config of the branch is:
    each config carries every knob here (`names`), at its type, its default where not given.

    - `home`: "module:NAME" where the table is defined: a config pickles with its table named so
      (a table is code, not data), and another process imports it from there.
    - `first`: the knobs always written in a config's canonical text (`Config.canonical`); every
      other knob is written only off its default, so a knob added later leaves every stored digest
      as it was. Default: every knob (a new branch), or the held table's.
    - `labels`: the branch's short text for a config (`Labels`), or the held table's.
    - `holds`: another branch's table whose knobs this branch carries at their defaults only.
    """

    __slots__ = ("_knobs", "first", "home", "labels", "sorted_names")

    def __init__(
        self,
        *knobs: Knob,
        home: str | None = None,
        first: Sequence[str] | None = None,
        labels: Labels | None = None,
        holds: KnobTable | None = None,
        held_meaning: str = "held at its default: this branch has no code path for another value",
    ) -> None:
        named: dict[str, Knob] = {}
        for knob in knobs:
            if not knob.name.isidentifier() or knob.name.startswith("_") or knob.name in CONFIG_ATTRIBUTES:
                raise SpaceError(
                    f"knob {knob.name!r}: a knob is read as a config's attribute, so its name must "
                    f"be an identifier, not start with _, and not be one of {', '.join(CONFIG_ATTRIBUTES)}"
                )
            if knob.name in named:
                raise SpaceError(f"knob {knob.name} is declared twice")
            named[knob.name] = knob
        if holds is not None:
            for other in holds:
                if other.name in named:
                    own = named[other.name]
                    if own.type is not other.type or own.default != other.default:
                        raise SpaceError(
                            f"knob {other.name}: {type_word(own.type)} {own.default!r} here, "
                            f"{type_word(other.type)} {other.default!r} in the table it holds"
                        )
                    continue
                named[other.name] = replace(other, values=(other.default,), meaning=held_meaning, held=True)
        self._knobs = named
        self.sorted_names: tuple[str, ...] = tuple(sorted(named))  # a config's hash reads its knobs so
        first = tuple(first) if first is not None else holds.first if holds is not None else tuple(named)
        unknown = [name for name in first if name not in named]
        if unknown:
            raise SpaceError(f"first knob(s) {', '.join(unknown)} are not in the table")
        self.first: tuple[str, ...] = first
        self.home = home
        self.labels: Labels = (
            labels if labels is not None else holds.labels if holds is not None else _NameValueLabels(self)
        )

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

    def __repr__(self) -> str:
        return f"KnobTable({self.home or ', '.join(self._knobs)})"

    def __reduce__(self) -> str | tuple[Any, ...]:
        # A table is code: it travels by its name and is imported again on the other side.
        if self.home is None:
            raise TypeError("a KnobTable without a home (module:NAME) cannot be pickled")
        return (load_table, (self.home,))

    @property
    def names(self) -> tuple[str, ...]:
        """Every knob a config of this table carries, the held ones too."""
        return tuple(self._knobs)

    @property
    def own(self) -> tuple[Knob, ...]:
        """The knobs this branch declares (not the held ones)."""
        return tuple(k for k in self._knobs.values() if not k.held)

    def defaults(self) -> dict[str, KnobValue]:
        return {name: knob.default for name, knob in self._knobs.items()}

    def grid(self, names: tuple[str, ...] | None = None) -> dict[str, tuple[KnobValue, ...]]:
        """Knob name -> its values, for a search space: every own knob's, or those of `names` in
        that order (a space's walk order is part of what its searches draw)."""
        chosen = names if names is not None else tuple(k.name for k in self.own)
        return {name: self[name].values for name in chosen}

    def markdown(self) -> str:
        """The table as the docs show it: one row per own knob."""
        rows = ["| knob | type | default | values | meaning |", "| --- | --- | --- | --- | --- |"]
        for knob in self.own:
            values = ", ".join(_shown(v) for v in knob.values)
            meaning = " ".join(knob.meaning.split()).replace("|", "\\|")
            rows.append(f"| `{knob.name}` | {type_word(knob.type)} | {_shown(knob.default)} | {values} | {meaning} |")
        return "\n".join(rows)


def load_table(home: str) -> KnobTable:
    """The table defined at `home` ("module:NAME"), imported: how a pickled config finds its table."""
    module, _, name = home.partition(":")
    table = getattr(importlib.import_module(module), name, None)
    if not isinstance(table, KnobTable):
        raise SpaceError(f"{home} is not a knob table")
    return table


def _shown(value: KnobValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)
