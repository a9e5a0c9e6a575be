"""How to launch one device-only kernel: the `LaunchSpec` a build writes and a launcher reads.

The cubin build path (`tirtune.builder`) reads the spec from TVM's lowered host code
(`tirtune.builder.launch_spec.extract`) and ships it with the cubin in one file (`bundle`, the
`kernel.tlaunch` artifact of `core/artifacts.py`); the launcher (`tirtune.runner.launcher`) turns
that file back into a spec and a cubin (`unbundle`) and replays the launch through the CUDA driver
API. Both sides meet here, below them, so that neither imports the other. Frozen dataclasses and
their JSON form; no I/O.

A spec the launcher could not replay faithfully (a tensor map whose dims, box and strides do not
match its rank) is an `ExtractError`, never a guess: a wrong box size hangs the kernel on its barriers.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from tirtune.core.errors import WorkerError

__all__ = [
    "BLOCK",
    "CLUSTER",
    "DYN_SMEM",
    "DYN_SMEM_ATTR_FROM",
    "GRID",
    "PLAIN_OPERANDS",
    "ExtractError",
    "KernelArg",
    "LaunchSpec",
    "TensorMapSpec",
    "bundle",
    "unbundle",
]

# Launch tags that take one launch value each, in the order TVM lists them.
GRID = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
BLOCK = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
CLUSTER = ("clusterCtaIdx.x", "clusterCtaIdx.y", "clusterCtaIdx.z")
DYN_SMEM = "tirx.use_dyn_shared_memory"
# The exported host wrapper raises the dynamic shared-memory limit only from this size on.
DYN_SMEM_ATTR_FROM = 49152
# The operands of a GEMM kernel without a fused epilogue (core/problem.py's `Problem.operands`).
PLAIN_OPERANDS = ("A", "B", "D")


class ExtractError(WorkerError):
    """The lowered host code does something the launch spec cannot describe."""


@dataclass(frozen=True, slots=True)
class TensorMapSpec:
    """One cuTensorMapEncodeTiled call: the map encodes argument `arg`'s data (+ `byte_offset`).

    dims, box and element_strides have `rank` entries, innermost first; strides (bytes) rank - 1.
    interleave, swizzle, l2_promotion and oob_fill are the CUtensorMap* enum values; dtype is the
    descriptor's element type ("float16"), force_cu_dtype a CUtensorMapDataType value or -1."""

    arg: int
    byte_offset: int
    dtype: str
    rank: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: int
    swizzle: int
    l2_promotion: int
    oob_fill: int
    force_cu_dtype: int = -1

    def __post_init__(self) -> None:
        counts = (len(self.dims), len(self.box), len(self.element_strides), len(self.strides) + 1)
        if not 1 <= self.rank <= 5 or any(c != self.rank for c in counts):
            raise ExtractError(f"tensor map of rank {self.rank} with dims/box/element strides/strides {counts}")


@dataclass(frozen=True, slots=True)
class KernelArg:
    """One kernel operand: a tensor map (by index into `LaunchSpec.tensor_maps`, passed by value),
    an argument's data pointer (`arg`, + `byte_offset`), or an integer scalar (`value`, `dtype`)."""

    kind: str  # "tensormap" | "pointer" | "scalar"
    index: int = 0  # tensormap: index into tensor_maps; pointer: the argument
    byte_offset: int = 0
    value: int = 0
    dtype: str = ""


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything a generic launcher needs besides the cubin and the tensors."""

    kernel: str
    args: tuple[KernelArg, ...]
    tensor_maps: tuple[TensorMapSpec, ...]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int] = (1, 1, 1)
    dyn_smem: int = 0
    num_params: int = 0  # arguments the original function takes (A, B, D: 3)
    launch_params: tuple[str, ...] = field(default=())
    # The original function's parameters by name, in order (a pointer's `index` is a position
    # here): A, B, D, then a fused epilogue's operands (core/epilogue.py), which a caller passes
    # in this order. Written to JSON only when not the plain three, so those specs (and the
    # artifacts that hold them) read as they did before operands were named.
    operands: tuple[str, ...] = PLAIN_OPERANDS

    @property
    def has_cluster(self) -> bool:
        return self.cluster != (1, 1, 1) or any(t in CLUSTER for t in self.launch_params)

    def renamed(self, kernel: str) -> LaunchSpec:
        from dataclasses import replace

        return replace(self, kernel=kernel)

    def to_json(self) -> dict[str, Any]:
        named = {} if self.operands == PLAIN_OPERANDS else {"operands": list(self.operands)}
        return {
            "kernel": self.kernel,
            "args": [_plain(a) for a in self.args],
            "tensor_maps": [_plain(m) for m in self.tensor_maps],
            "grid": list(self.grid),
            "block": list(self.block),
            "cluster": list(self.cluster),
            "dyn_smem": self.dyn_smem,
            "num_params": self.num_params,
            "launch_params": list(self.launch_params),
            **named,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LaunchSpec:
        fields: list[dict[str, Any]] = [
            {k: tuple(v) if isinstance(v, list) else v for k, v in m.items()} for m in data["tensor_maps"]
        ]
        maps = tuple(TensorMapSpec(**f) for f in fields)
        return cls(
            kernel=data["kernel"],
            args=tuple(KernelArg(**a) for a in data["args"]),
            tensor_maps=maps,
            grid=_triple(data["grid"]),
            block=_triple(data["block"]),
            cluster=_triple(data["cluster"]),
            dyn_smem=int(data["dyn_smem"]),
            num_params=int(data["num_params"]),
            launch_params=tuple(data["launch_params"]),
            operands=tuple(data.get("operands", PLAIN_OPERANDS)),
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True)


def bundle(spec: LaunchSpec, cubin: bytes) -> bytes:
    """A device-only build in one file (the cubin path's artifact): {"spec": ..., "cubin": base64}."""
    return json.dumps({"spec": spec.to_json(), "cubin": base64.b64encode(cubin).decode()}).encode()


def unbundle(data: bytes) -> tuple[LaunchSpec, bytes]:
    record = json.loads(data)
    return LaunchSpec.from_json(record["spec"]), base64.b64decode(record["cubin"])


def _plain(obj: Any) -> dict[str, Any]:
    return {name: list(v) if isinstance(v, tuple) else v for name in obj.__slots__ for v in [getattr(obj, name)]}


def _triple(values: Any) -> tuple[int, int, int]:
    a, b, c = (int(v) for v in values)
    return a, b, c
