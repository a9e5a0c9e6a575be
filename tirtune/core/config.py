"""A kernel configuration: one point of a branch's knob table, frozen, hashable, JSON round-trip."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import FrozenInstanceError
from functools import total_ordering
from typing import Any

from tirtune.core.errors import SpaceError
from tirtune.core.knobs import Knob, KnobTable, KnobValue, is_of_type, type_word

__all__ = ["Config"]

_TYPE_WORDS = {"int": "an integer", "bool": "true or false", "str": "a string"}


@total_ordering
class Config:
    """One point of a search space: a value for every knob of one branch's table, frozen and
    hashable.

    A knob is one choice the template makes when it traces a kernel (the tile, the pipeline depth,
    the warp roles, the loads, the epilogue, ...). What the knobs are is the branch's: its table
    (`tirtune.space.hopper.knobs.KNOBS`, `tirtune.space.blackwell.knobs.KNOBS`) names each one with
    its type, default, values and meaning, and a config is checked against it here: an unknown
    knob or a value of the wrong type is a SpaceError, a knob not given takes its default. Which
    values are valid together, for which problem, is the business of a search space (the branch's
    ranges and named rules, `tirtune.space`). Knobs read as attributes (`config.blk_m`); given
    by name, or by position in the table's order.

    Two configs are equal when they hold the same knobs at the same values (a table that holds
    another's knobs at their defaults, as Blackwell's holds Hopper's, gives configs of the same
    knobs). `to_json` / `from_json` round-trip (missing knobs take their defaults, unknown ones are
    an error); `canonical` is the stable text of the knobs and `digest` its hash, the config's
    part of every build and measurement key: the table's `first` knobs always, every other knob
    only off its default, so a config keeps its digest (its stored identity) when a knob is added
    (tests/test_config_digests.py holds digests that must never change).
    """

    # The knobs live in the instance's __dict__ (attribute reads as fast as a dataclass's);
    # equality, order and hash read them there each time, as a dataclass's do.
    __slots__ = ("__dict__", "_table")
    _table: KnobTable

    def __init__(self, table: KnobTable, /, *values: Any, **knobs: Any) -> None:
        if not isinstance(table, KnobTable):
            raise SpaceError(f"a config is a point of a knob table, got {type(table).__name__}")
        if values:  # positional values: the table's knobs in order (blk_m, blk_n, blk_k, ...)
            if len(values) > len(table):
                raise SpaceError(f"{len(values)} knob values for a table of {len(table)} knobs")
            given = dict(zip(table.names, values, strict=False))
            twice = sorted(set(given) & set(knobs))
            if twice:
                raise SpaceError(f"config knob(s) {', '.join(twice)} given twice")
            knobs = {**given, **knobs}
        unknown = sorted(set(knobs) - set(table.names))
        if unknown:
            raise SpaceError(f"unknown config knob(s): {', '.join(unknown)}; known: {', '.join(sorted(table.names))}")
        for knob in table:
            object.__setattr__(self, knob.name, _checked(knob, knobs.get(knob.name, knob.default)))
        object.__setattr__(self, "_table", table)

    # -- a frozen value ---------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        # Reached only for a name that is not a knob of the table (knobs are instance attributes).
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"no knob {name!r} in {self._table!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to knob {name!r}: a Config is frozen (use replace)")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete knob {name!r}: a Config is frozen")

    @property
    def _values(self) -> tuple[KnobValue, ...]:
        knobs = self.__dict__
        return tuple(knobs[name] for name in self._table.names)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        knobs = self.__dict__
        return hash(tuple(knobs[name] for name in self._table.sorted_names))

    def __lt__(self, other: object) -> bool:
        """Ordered by the knob values in the table's order."""
        if not isinstance(other, Config):
            return NotImplemented
        return self._values < tuple(getattr(other, name) for name in self._table.names)

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{n}={v!r}" for n, v in self) + ")"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self._table, self.to_json()))

    def __copy__(self) -> Config:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Config:
        return self

    # -- reading and changing -----------------------------------------------------------------------

    @property
    def table(self) -> KnobTable:
        """The branch's knob table this config is a point of."""
        return self._table

    def knobs(self) -> dict[str, KnobValue]:
        """Every knob's value, in the table's order."""
        knobs = self.__dict__
        return {name: knobs[name] for name in self._table.names}

    def __iter__(self) -> Iterator[tuple[str, KnobValue]]:
        return iter(self.knobs().items())

    def replace(self, **changes: Any) -> Config:
        """This config with `changes` made (checked against the table as any config is)."""
        if not changes:
            return self
        table = self._table
        for name, value in changes.items():  # only the changed knobs need checking
            if name not in table:
                return Config(table, **{**self.knobs(), **changes})  # the full check names what is wrong
            _checked(table[name], value)
        new = object.__new__(Config)
        object.__setattr__(new, "_table", table)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    def off_default(self) -> dict[str, KnobValue]:
        """The knobs off their defaults."""
        return {k.name: v for k, v in zip(self._table, self._values, strict=True) if v != k.default}

    def to_json(self) -> dict[str, Any]:
        return self.knobs()

    @classmethod
    def from_json(cls, data: Mapping[str, Any], table: KnobTable) -> Config:
        """Inverse of `to_json`; unknown knobs are an error, missing ones take their defaults."""
        if not isinstance(data, Mapping):
            raise SpaceError(f"a config must be a JSON object, got {type(data).__name__}")
        return cls(table, **data)

    def canonical(self) -> str:
        """Stable text form: the input of content hashes."""
        first = self._table.first
        data = {k.name: v for k, v in zip(self._table, self._values, strict=True) if k.name in first or v != k.default}
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def digest(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:16]

    def label(self) -> str:
        """Short human form for tables and CSVs, the branch's (`KnobTable.labels`)."""
        return self._table.labels.write(self.knobs())

    @classmethod
    def from_label(cls, label: str, table: KnobTable) -> Config:
        """Inverse of `label`: every knob the label shows, the rest at their defaults. SpaceError
        for text that is not a label."""
        return cls(table, **table.labels.read(label))


def _checked(knob: Knob, value: Any) -> Any:
    """`value`, if it is of `knob`'s type; SpaceError otherwise."""
    if not is_of_type(value, knob.type):
        raise SpaceError(f"config knob {knob.name} must be {_TYPE_WORDS[type_word(knob.type)]}, got {value!r}")
    return value


def _rebuild(table: KnobTable, knobs: dict[str, Any]) -> Config:
    return Config(table, **knobs)
