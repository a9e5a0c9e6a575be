"""A GEMM problem: D (M,N) = A (M,K) @ B (N,K).T, both operands row-major, fp32 accumulation."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tirtune.core.errors import SpaceError

__all__ = ["DTYPES", "Problem", "normalize_dtype"]

DTYPES: tuple[str, ...] = ("float16", "bfloat16")
_ALIASES = {"fp16": "float16", "half": "float16", "f16": "float16", "bf16": "bfloat16"}
_SHAPE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*[xX]\s*(\d+)\s*$")
# A dimension above 2**20 would need more than a GPU's memory for any sensible other two.
MAX_DIM = 1 << 20


def normalize_dtype(dtype: str) -> str:
    """Canonical dtype name ('fp16' -> 'float16'); SpaceError for anything unsupported."""
    name = _ALIASES.get(str(dtype).strip().lower(), str(dtype).strip().lower())
    if name not in DTYPES:
        raise SpaceError(f"unsupported dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    return name


@dataclass(frozen=True, slots=True)
class Problem:
    """One GEMM problem; construct through `Problem.parse` or directly (both validate)."""

    m: int
    n: int
    k: int
    dtype: str = "float16"

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise SpaceError(f"{name.upper()} must be an integer, got {value!r}")
            if not 1 <= value <= MAX_DIM:
                raise SpaceError(f"{name.upper()}={value} is out of range: expected 1..{MAX_DIM}")
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))

    @classmethod
    def parse(cls, shape: str, dtype: str = "float16") -> Problem:
        """Parse 'MxNxK' (e.g. '4096x4096x4096')."""
        match = _SHAPE.match(str(shape))
        if match is None:
            raise SpaceError(f"bad shape {shape!r}: expected MxNxK with positive integers, e.g. 4096x4096x4096")
        m, n, k = (int(g) for g in match.groups())
        return cls(m, n, k, dtype)

    @property
    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def element_bytes(self) -> int:
        return 2  # float16 and bfloat16 alike

    @property
    def min_bytes(self) -> int:
        """Bytes a GEMM must move through device memory at least: A and B read once, D written once."""
        return (self.m * self.k + self.n * self.k + self.m * self.n) * self.element_bytes

    def tflops(self, milliseconds: float) -> float:
        """Throughput in TFLOP/s of one product that took `milliseconds`."""
        return self.flops / (milliseconds * 1e-3) / 1e12

    def to_json(self) -> dict[str, int | str]:
        return {"m": self.m, "n": self.n, "k": self.k, "dtype": self.dtype}

    def __str__(self) -> str:
        return f"{self.shape} {self.dtype}"
