"""The Hopper branch's short text for a config, as tables, CSVs and logs name configs.

`LABELS.write` gives e.g. "128x256x64 s4 c2 ws persist g16 tma_chunked r240/24": the tile and
k-tile, stages, consumers and warp roles always, then a word for each knob off its default, in a
fixed order (with swap_ab, blk_m x blk_n is the kernel's tile: blk_m along the problem's N, blk_n
along its M; the label ends "swap"). `LABELS.read` is its inverse: the labels on file in
bench/results/ (the shipped prior reads them) must read back to the same configs, so a word, once
written, keeps its form. The Blackwell table holds this branch's knobs and so labels with it too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from tirtune.core.errors import SpaceError
from tirtune.core.knobs import KnobValue

__all__ = ["LABELS", "HopperLabels"]

_HEAD = re.compile(r"(\d+)x(\d+)x(\d+) s(\d+) c(\d+) (ws|mono)")

Knobs = Mapping[str, KnobValue]


def _group(k: Knobs) -> str:
    return "col" if k["raster_group"] == 0 else str(k["raster_group"])


def _split(k: Knobs) -> str:
    return f"sk{k['split_k']}" + (f"-{k['split_k_reduce']}" if k["split_k_reduce"] != "dsmem" else "")


# The words after the head, in the order `write` appends them: each one's text for a config's
# knobs (None: not written, the knobs at their defaults), and the pattern and knobs it reads back.
_WORDS: tuple[tuple[Callable[[Knobs], str | None], re.Pattern[str], Callable[[re.Match[str]], dict[str, Any]]], ...] = (
    (lambda k: "persist" if k["persistent"] else None, re.compile(r"persist"), lambda m: {"persistent": True}),
    (
        lambda k: f"g{_group(k)}" if k["raster_group"] != 1 else None,
        re.compile(r"g(\d+|col)"),
        lambda m: {"raster_group": 0 if m[1] == "col" else int(m[1])},
    ),
    (
        lambda k: str(k["epilogue"]) if k["epilogue"] != "register" else None,
        re.compile(r"tma|tma_chunked"),
        lambda m: {"epilogue": m[0]},
    ),
    (
        lambda k: f"cl{k['cluster']}{k['cluster_dim']}" if k["cluster"] != 1 else None,
        re.compile(r"cl(\d+)([mn])"),
        lambda m: {"cluster": int(m[1]), "cluster_dim": m[2]},
    ),
    (
        lambda k: str(k["schedule"]) if k["schedule"] != "cooperative" else None,
        re.compile(r"pingpong"),
        lambda m: {"schedule": "pingpong"},
    ),
    (
        lambda k: f"r{k['reg_split']}" if k["reg_split"] != "232/40" else None,
        re.compile(r"r(\d+/\d+)"),
        lambda m: {"reg_split": m[1]},
    ),
    (
        lambda k: f"{k['loader']}-load" if k["loader"] != "tma" else None,
        re.compile(r"(\w+)-load"),
        lambda m: {"loader": m[1]},
    ),
    (lambda k: "ewg" if k["epilogue_warpgroup"] else None, re.compile(r"ewg"), lambda m: {"epilogue_warpgroup": True}),
    (
        lambda k: _split(k) if k["split_k"] != 1 else None,
        re.compile(r"sk(\d+)(?:-(\w+))?"),
        lambda m: {"split_k": int(m[1]), **({"split_k_reduce": m[2]} if m[2] else {})},
    ),
    (
        lambda k: f"sk{k['split_k_scope']}" if k["split_k_scope"] != "all" else None,
        re.compile(r"sk(tail)"),
        lambda m: {"split_k_scope": m[1]},
    ),
    (lambda k: "swap" if k["swap_ab"] else None, re.compile(r"swap"), lambda m: {"swap_ab": True}),
    # "l2 <A>/<B>": two words; `read` takes the one after "l2" itself.
    (lambda k: f"l2 {k['l2_hint']}" if k["l2_hint"] != "none/none" else None, re.compile(r"l2"), lambda m: {}),
    (
        lambda k: f"p{k['l2_promotion']}" if k["l2_promotion"] != "128B" else None,
        re.compile(r"p(\d+B)"),
        lambda m: {"l2_promotion": m[1]},
    ),
    (
        lambda k: "pftm" if k["prefetch_tensormap"] else None,
        re.compile(r"pftm"),
        lambda m: {"prefetch_tensormap": True},
    ),
    (lambda k: "trim" if k["trim"] else None, re.compile(r"trim"), lambda m: {"trim": True}),
    (lambda k: "peelk" if k["peel_k"] else None, re.compile(r"peelk"), lambda m: {"peel_k": True}),
    (lambda k: "krot" if k["k_rotate"] else None, re.compile(r"krot"), lambda m: {"k_rotate": True}),
    (lambda k: "streamk" if k["stream_k"] else None, re.compile(r"streamk"), lambda m: {"stream_k": True}),
    (
        lambda k: f"stream-{k['stream_k_scope']}" if k["stream_k_scope"] != "all" else None,
        re.compile(r"stream-(\w+)"),
        lambda m: {"stream_k_scope": m[1]},
    ),
    (lambda k: "bstagger" if k["block_stagger"] else None, re.compile(r"bstagger"), lambda m: {"block_stagger": True}),
)


class HopperLabels:
    """`write` and `read` of the Hopper label (the table's `labels`)."""

    def write(self, knobs: Knobs) -> str:
        k = knobs
        roles = "ws" if k["warp_specialized"] else "mono"
        head = f"{k['blk_m']}x{k['blk_n']}x{k['blk_k']} s{k['stages']} c{k['consumers']} {roles}"
        return " ".join([head, *(word for write, _, _ in _WORDS if (word := write(k)) is not None)])

    def read(self, text: str) -> dict[str, KnobValue]:
        words = str(text).split()
        head = _HEAD.fullmatch(" ".join(words[:4]))
        if head is None:
            raise SpaceError(f"not a config label: {str(text)[:80]!r} (expected e.g. '128x128x64 s4 c2 ws')")
        blk_m, blk_n, blk_k, stages, consumers, roles = head.groups()
        knobs: dict[str, KnobValue] = {
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
            for _, pattern, parse in _WORDS:
                found = pattern.fullmatch(word)
                if found is not None:
                    knobs.update(parse(found))
                    break
            else:
                raise SpaceError(f"unknown word {word[:40]!r} in config label {str(text)[:80]!r}")
        return knobs


LABELS = HopperLabels()
