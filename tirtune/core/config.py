"""A kernel configuration: one point of the search space, frozen, hashable, JSON round-trip."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any

from tirtune.core.errors import SpaceError

__all__ = ["Config"]


@dataclass(frozen=True, slots=True, order=True)
class Config:
    """Knobs of the Hopper GEMM template (see `tirtune.space.hopper` for ranges and rules).

    blk_m/blk_n/blk_k: the CTA tile. consumers: consumer warpgroups, splitting blk_m evenly
    (each owns blk_m/consumers rows, 64 or 128). stages: depth of the shared-memory ring.
    warp_specialized: a separate producer warpgroup issues the TMA loads; otherwise one
    consumer thread issues them ahead of the MMAs.
    persistent: one CTA per SM (at most), each looping over output tiles; raster_group: tile rows
    (along M) visited together by consecutive tile indices (1 = row-major, 0 = all of them:
    column-major), persistent only.
    epilogue: "register" (fragments stored straight to global memory) or "tma" (stmatrix into a
    shared-memory staging tile, then a TMA store).
    epilogue "tma_chunked": the same, staged one 64x64 box at a time through two small buffers
    per consumer, so one box's stmatrix overlaps the previous box's TMA store.
    cluster: CTAs per thread-block cluster (1 = no cluster); cluster_dim: the axis ("m" or "n")
    along which the cluster's CTAs lie. Which architectures and values are valid is the space's
    business (its knob ranges and rules), not the Config's.
    schedule: the consumers' warp roles: "cooperative" (they split blk_m of one tile) or "pingpong"
    (each computes whole blk_m x blk_n tiles, alternating, so one's epilogue overlaps the other's
    MMAs). reg_split: "consumer/producer" registers a thread after setmaxnreg. loader: "tma" (the
    copy engine fills the ring) or "threads" (every consumer thread copies 16-byte chunks into the
    swizzled stage; one stage, no producer: the seed journey's first steps).
    epilogue_warpgroup (hopper-gemm/4): a separate epilogue warpgroup issues the TMA stores. The
    consumers still stage their register fragments in shared memory (stmatrix), then hand each
    staged buffer over through an mbarrier and go on; the epilogue warpgroup stores it and hands
    it back once the store has read it.
    swap_ab (hopper-gemm/5): the kernel computes D^T = B A^T, so the problem's N runs along wgmma's
    64-row M and the problem's M becomes wgmma's N (8..256 in steps of 8): a small M (decode,
    small batches) fits a narrow wgmma instead of a 64-row block that is mostly padding. D stays
    row-major (M, N); the fragment is stored transposed. blk_m, blk_n, consumers and cluster_dim
    always name the kernel's own (post-swap) axes: with swap_ab, blk_m is the tile's extent along
    the problem's N and blk_n its extent along the problem's M (so every tile, register and
    shared-memory rule reads the same with and without the swap).
    split_k (hopper-gemm/5): the CTAs of a thread-block cluster of split_k CTAs compute the same
    output tile, each over 1/split_k of the k-tiles; split_k_reduce names how their fp32 partial
    tiles are summed: "dsmem" (each CTA parks its fragment in its own shared memory, a cluster
    barrier, then CTA r sums its share of the tile over every peer, in rank order, through
    distributed shared memory and stores it).
    l2_hint (hopper-gemm/5, later additions): the L2 eviction priority the TMA loads of the
    kernel's A and B operands carry, "<A>/<B>" with each "none" (no hint: the default policy),
    "first" (evict_first: a streamed operand, read once) or "last" (evict_last: an operand re-read
    by many CTAs). A and B are the kernel's operands (with swap_ab, A is the problem's B).
    l2_promotion: the L2 promotion of the load tensor maps ("128B", TVM's default, or "256B": an
    L2 miss fetches 256 bytes, so a box row's neighbouring 128-byte atom arrives with it).
    prefetch_tensormap: warp 0 prefetches every tensor map's descriptor when the kernel starts
    (prefetch.tensormap), before the first TMA needs it.

    Knobs added after hopper-gemm/1 (`V2_KNOBS`) are left out of `canonical` while at their
    default, so a hopper-gemm/1 config keeps its digest (its stored identity).
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

    def __post_init__(self) -> None:
        for name, expected in _KNOB_TYPES:
            value = getattr(self, name)
            if expected is str:
                if not isinstance(value, str):
                    raise SpaceError(f"config knob {name} must be a string, got {value!r}")
                continue
            if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise SpaceError(f"config knob {name} must be an integer, got {value!r}")
            if expected is bool and not isinstance(value, bool):
                raise SpaceError(f"config knob {name} must be true or false, got {value!r}")

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
        if self.swap_ab:
            text += " swap"
        if self.l2_hint != "none/none":
            text += f" l2 {self.l2_hint}"
        if self.l2_promotion != "128B":
            text += f" p{self.l2_promotion}"
        if self.prefetch_tensormap:
            text += " pftm"
        return text


_KNOBS: tuple[str, ...] = tuple(f.name for f in fields(Config))
_KNOB_SET = frozenset(_KNOBS)
_TYPES = {"str": str, "bool": bool, "int": int, str: str, bool: bool, int: int}
_KNOB_TYPES: tuple[tuple[str, type], ...] = tuple((f.name, _TYPES[f.type]) for f in fields(Config))

# Knobs added after hopper-gemm/1 and their defaults (the hopper-gemm/1 behaviour): left out of
# `canonical` at these values, so older configs keep their digests.
V2_KNOBS: dict[str, Any] = {
    "persistent": False,
    "raster_group": 1,
    "epilogue": "register",
    "cluster": 1,
    "cluster_dim": "m",
    "schedule": "cooperative",
    "reg_split": "232/40",
    "loader": "tma",
    "epilogue_warpgroup": False,
    "swap_ab": False,
    "split_k": 1,
    "split_k_reduce": "dsmem",
    "l2_hint": "none/none",
    "l2_promotion": "128B",
    "prefetch_tensormap": False,
}
