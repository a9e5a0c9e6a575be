"""A kernel configuration: one point of the search space, frozen, hashable, JSON round-trip."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, fields
from typing import Any

from tirtune.core.errors import SpaceError
from tirtune.core.knobs import KnobTable, KnobType, is_of_type, type_word

__all__ = ["FIRST_KNOBS", "V2_KNOBS", "Config"]


@dataclass(frozen=True, slots=True, order=True)
class Config:
    """One point of a search space: the knobs of the GEMM template, frozen and hashable.

    A knob is one choice the template makes when it traces a kernel (the tile, the pipeline depth,
    the warp roles, the loads, the epilogue, ...), an int, a bool or a string with a default. The
    fields below are every branch's knobs by name, type and default: what a stored config is read
    back with, in any process. What a knob means, and which values it takes, is its branch's: each
    branch declares its knobs in a table (`tirtune.space.hopper.knobs` for sm_90a,
    `tirtune.space.blackwell.knobs` for sm_100a; the docs show them), checked against these fields
    when the branch loads (`conform`). Which values are valid together, on which architecture, is
    the business of a search space (`tirtune.space`: the knob ranges and named rules of each
    template branch and version). A branch or space without a knob holds it at its default.

    `to_json` / `from_json` round-trip (missing knobs take their defaults, unknown ones are an
    error); `canonical` is the stable text of the knobs and `digest` its hash, the config's part of
    every build and measurement key. Only the knobs of the first template version
    (`FIRST_KNOBS`) are always in `canonical`; every later one (`V2_KNOBS`) is left out while at
    its default, so a config of an older version keeps its digest (its stored identity) when a
    knob is added (tests/test_config_digests.py holds digests that must never change).
    """

    blk_m: int = 128
    blk_n: int = 128
    blk_k: int = 64
    stages: int = 4
    consumers: int = 2
    warp_specialized: bool = True
    persistent: bool = False
    raster_group: int = 1
    epilogue: str = "register"
    cluster: int = 1
    cluster_dim: str = "m"
    schedule: str = "cooperative"
    reg_split: str = "232/40"
    loader: str = "tma"
    epilogue_warpgroup: bool = False
    swap_ab: bool = False
    split_k: int = 1
    split_k_reduce: str = "dsmem"
    l2_hint: str = "none/none"
    l2_promotion: str = "128B"
    prefetch_tensormap: bool = False
    trim: bool = False
    peel_k: bool = False
    k_rotate: bool = False
    split_k_scope: str = "all"
    stream_k: bool = False
    stream_k_scope: str = "all"

    def __post_init__(self) -> None:
        for name, expected in _KNOB_TYPES:
            value = getattr(self, name)
            if not is_of_type(value, expected):
                raise SpaceError(f"config knob {name} must be {_TYPE_WORDS[expected]}, got {value!r}")

    @staticmethod
    def conform(table: KnobTable) -> None:
        """Check a branch's knob table against the fields: each of its knobs a field of the same
        type and default (a stored config is read back by the fields alone). SpaceError naming
        every mismatch."""
        wrong = []
        for knob in table:
            if knob.name not in _KNOB_SET:
                wrong.append(f"{knob.name} is not a Config knob")
                continue
            expected, default = _FIELD_TYPES[knob.name], _FIELD_DEFAULTS[knob.name]
            if knob.type is not expected:
                wrong.append(f"{knob.name} is a {type_word(expected)} in Config, a {type_word(knob.type)} in the table")
            if knob.default != default or type(knob.default) is not type(default):
                wrong.append(f"{knob.name} defaults to {default!r} in Config, {knob.default!r} in the table")
        if wrong:
            raise SpaceError("knob table does not match Config: " + "; ".join(wrong))

    def to_json(self) -> dict[str, Any]:
        # Every knob is an int, bool or str: no deep copy needed (dataclasses.asdict made one,
        # a tenth of the CPU of a GET /trials page).
        return {name: getattr(self, name) for name in _KNOBS}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Config:
        """Inverse of `to_json`; unknown knobs are an error, missing ones take their defaults."""
        if not isinstance(data, dict):
            raise SpaceError(f"a config must be a JSON object, got {type(data).__name__}")
        known = _KNOB_SET
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpaceError(f"unknown config knob(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)

    def canonical(self) -> str:
        """Stable text form: the input of content hashes."""
        data = self.to_json()
        for name, default in V2_KNOBS.items():
            if data[name] == default:
                del data[name]
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def digest(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:16]

    def label(self) -> str:
        """Short human form for tables: 128x128x64 s4 c2 ws (with swap_ab, blk_m x blk_n is the
        kernel's tile: blk_m along the problem's N, blk_n along its M; the label ends "swap")."""
        roles = "ws" if self.warp_specialized else "mono"
        text = f"{self.blk_m}x{self.blk_n}x{self.blk_k} s{self.stages} c{self.consumers} {roles}"
        group = "col" if self.raster_group == 0 else str(self.raster_group)
        if self.persistent:
            text += " persist" + (f" g{group}" if self.raster_group != 1 else "")
        elif self.raster_group != 1:
            text += f" g{group}"
        if self.epilogue != "register":
            text += f" {self.epilogue}"
        if self.cluster != 1:
            text += f" cl{self.cluster}{self.cluster_dim}"
        if self.schedule != "cooperative":
            text += f" {self.schedule}"
        if self.reg_split != "232/40":
            text += f" r{self.reg_split}"
        if self.loader != "tma":
            text += f" {self.loader}-load"
        if self.epilogue_warpgroup:
            text += " ewg"
        if self.split_k != 1:
            text += f" sk{self.split_k}" + (f"-{self.split_k_reduce}" if self.split_k_reduce != "dsmem" else "")
        if self.split_k_scope != "all":
            text += f" sk{self.split_k_scope}"
        if self.swap_ab:
            text += " swap"
        if self.l2_hint != "none/none":
            text += f" l2 {self.l2_hint}"
        if self.l2_promotion != "128B":
            text += f" p{self.l2_promotion}"
        if self.prefetch_tensormap:
            text += " pftm"
        if self.trim:
            text += " trim"
        if self.peel_k:
            text += " peelk"
        if self.k_rotate:
            text += " krot"
        if self.stream_k:
            text += " streamk"
        if self.stream_k_scope != "all":
            text += f" stream-{self.stream_k_scope}"
        return text

    @classmethod
    def from_label(cls, label: str) -> Config:
        """Inverse of `label` (tables and CSVs name configs by their labels): every knob the
        label shows, the rest at their defaults (a label leaves out exactly the knobs at theirs).
        SpaceError for text that is not a label."""
        words = str(label).split()
        head = _LABEL_HEAD.fullmatch(" ".join(words[:4]))
        if head is None:
            raise SpaceError(f"not a config label: {str(label)[:80]!r} (expected e.g. '128x128x64 s4 c2 ws')")
        blk_m, blk_n, blk_k, stages, consumers, roles = head.groups()
        knobs: dict[str, Any] = {
            "blk_m": int(blk_m),
            "blk_n": int(blk_n),
            "blk_k": int(blk_k),
            "stages": int(stages),
            "consumers": int(consumers),
            "warp_specialized": roles == "ws",
        }
        rest = iter(words[4:])
        for word in rest:
            if word == "l2":
                knobs["l2_hint"] = next(rest, "")
                continue
            for pattern, parse in _LABEL_WORDS:
                found = pattern.fullmatch(word)
                if found is not None:
                    knobs.update(parse(found))
                    break
            else:
                raise SpaceError(f"unknown word {word[:40]!r} in config label {str(label)[:80]!r}")
        return cls(**knobs)


_LABEL_HEAD = re.compile(r"(\d+)x(\d+)x(\d+) s(\d+) c(\d+) (ws|mono)")
# The words `label` appends after its head, each to the knobs it sets.
_LABEL_WORDS: tuple[tuple[re.Pattern[str], Any], ...] = (
    (re.compile(r"persist"), lambda m: {"persistent": True}),
    (re.compile(r"g(\d+|col)"), lambda m: {"raster_group": 0 if m[1] == "col" else int(m[1])}),
    (re.compile(r"tma|tma_chunked"), lambda m: {"epilogue": m[0]}),
    (re.compile(r"cl(\d+)([mn])"), lambda m: {"cluster": int(m[1]), "cluster_dim": m[2]}),
    (re.compile(r"pingpong"), lambda m: {"schedule": "pingpong"}),
    (re.compile(r"r(\d+/\d+)"), lambda m: {"reg_split": m[1]}),
    (re.compile(r"(\w+)-load"), lambda m: {"loader": m[1]}),
    (re.compile(r"ewg"), lambda m: {"epilogue_warpgroup": True}),
    (re.compile(r"sk(tail)"), lambda m: {"split_k_scope": m[1]}),
    (re.compile(r"sk(\d+)(?:-(\w+))?"), lambda m: {"split_k": int(m[1]), **({"split_k_reduce": m[2]} if m[2] else {})}),
    (re.compile(r"swap"), lambda m: {"swap_ab": True}),
    (re.compile(r"p(\d+B)"), lambda m: {"l2_promotion": m[1]}),
    (re.compile(r"pftm"), lambda m: {"prefetch_tensormap": True}),
    (re.compile(r"trim"), lambda m: {"trim": True}),
    (re.compile(r"peelk"), lambda m: {"peel_k": True}),
    (re.compile(r"krot"), lambda m: {"k_rotate": True}),
    (re.compile(r"streamk"), lambda m: {"stream_k": True}),
    (re.compile(r"stream-(\w+)"), lambda m: {"stream_k_scope": m[1]}),
)

_KNOBS: tuple[str, ...] = tuple(f.name for f in fields(Config))
_KNOB_SET = frozenset(_KNOBS)
_TYPES: dict[object, KnobType] = {"str": str, "bool": bool, "int": int, str: str, bool: bool, int: int}
_KNOB_TYPES: tuple[tuple[str, KnobType], ...] = tuple((f.name, _TYPES[f.type]) for f in fields(Config))
_FIELD_TYPES: dict[str, KnobType] = dict(_KNOB_TYPES)
_FIELD_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Config)}
_TYPE_WORDS: dict[KnobType, str] = {int: "an integer", bool: "true or false", str: "a string"}

# The knobs of hopper-gemm/1, always in `canonical`.
FIRST_KNOBS: tuple[str, ...] = ("blk_m", "blk_n", "blk_k", "stages", "consumers", "warp_specialized")
# Every knob added since and its default (the hopper-gemm/1 behaviour): left out of `canonical`
# at that value, so older configs keep their digests.
V2_KNOBS: dict[str, Any] = {name: default for name, default in _FIELD_DEFAULTS.items() if name not in FIRST_KNOBS}
