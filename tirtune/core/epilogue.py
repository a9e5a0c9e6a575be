"""A GEMM's fused epilogue: what happens to the fp32 accumulator between the product and D.

`EpilogueSpec` is a set of ops, each at most once, always applied in one fixed order (`OPS`),
whatever order the text named them in:

    acc = A @ B.T                         (fp32)
    acc = acc * scale_a[0]                "scale_a": one fp32 value (A's per-tensor scale)
    acc = acc * scale_b[0]                "scale_b": one fp32 value (B's per-tensor scale)
    acc = acc * scale_row[m]              "scale_row": an fp32 vector of length M
    acc = acc * scale_col[n]              "scale_col": an fp32 vector of length N
    acc = acc + bias[n]                   "bias": a vector of D's dtype, length N
    acc = acc + residual[m, n]            "residual": an (M, N) tensor of D's dtype
    D[m, n] = acc converted to D's dtype

Each op brings one extra kernel operand, named like the op, passed after A, B and D in the same
order (`operands`). The text form is "none" or the ops joined by "+" ("bias+residual"); `parse`
takes any order and case and `str` gives the canonical one. docs/design.md, "Epilogues", says
where the Hopper template applies it and what is refused.

"swiglu" (`SWIGLU`, a gated MLP's up-projection) stands alone, with no operand: a problem
(M, N, K) with it writes D (M, N) from a B of 2N rows, its gate and up weights interleaved in
groups of 8 rows (rows [16j, 16j+8) are gate rows [8j, 8j+8), rows [16j+8, 16j+16) up rows
[8j, 8j+8): `pack_gate_up` in tirtune/nn), and

    g = A @ gate.T, u = A @ up.T          (fp32, each (M, N))
    D[m, n] = silu(g[m, n]) * u[m, n] converted to D's dtype,  silu(x) = x / (1 + exp(-x))

so the kernel computes a GEMM 2N wide (`gemm_n`) and N must be a multiple of 8 (a problem
rule, core/problem.py `swiglu_n_aligned`). Combined with another op it is a SpaceError
("swiglu stands alone").
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from tirtune.core.errors import SpaceError

__all__ = [
    "EPILOGUE_NONE",
    "EPILOGUE_TEXTS",
    "GATE_GROUP",
    "KNOWN_OPS",
    "OPS",
    "SCALE_OPS",
    "SCALINGS",
    "SWIGLU",
    "EpilogueSpec",
    "Operand",
    "scaling_of",
    "with_scaling",
]

# The ops that take an operand, in the order they are applied (and their operands passed).
OPS: tuple[str, ...] = ("scale_a", "scale_b", "scale_row", "scale_col", "bias", "residual")
# The scaling ops: what dequantizes a quantized (FP8) product, applied first.
SCALE_OPS: tuple[str, ...] = ("scale_a", "scale_b", "scale_row", "scale_col")
# The gated activation: D = silu(A @ gate.T) * (A @ up.T), B holding both weights interleaved.
SWIGLU = "swiglu"
# Every op a spec may hold ("swiglu" only alone).
KNOWN_OPS: tuple[str, ...] = (*OPS, SWIGLU)
# B's rows alternate between gate and up weights in groups of this many rows.
GATE_GROUP = 8
_NONE_TEXT = "none"
_MAX_TEXT = 200  # longer than every valid spelling; a longer input is refused without echoing it


@dataclass(frozen=True, slots=True)
class Operand:
    """One kernel operand: its parameter name, shape (the problem's axes) and element dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class EpilogueSpec:
    """The fused ops of a GEMM's epilogue, a subset of `OPS` kept in `OPS` order (empty: none)."""

    ops: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        ops = self.ops
        if not isinstance(ops, tuple) or not all(isinstance(op, str) for op in ops):
            raise SpaceError(f"epilogue ops must be a tuple of op names, got {_short(ops)}")
        unknown = [op for op in ops if op not in KNOWN_OPS]
        if unknown:
            raise SpaceError(f"unknown epilogue op {_short(unknown[0])}: expected {_expected()}")
        repeated = sorted({op for op in ops if ops.count(op) > 1})
        if repeated:
            raise SpaceError(f"epilogue op {repeated[0]!r} given more than once: expected {_expected()}")
        if SWIGLU in ops and len(ops) > 1:
            others = ", ".join(op for op in ops if op != SWIGLU)
            raise SpaceError(f"swiglu stands alone (got it with {_short(others)}): expected {_expected()}")
        object.__setattr__(self, "ops", tuple(op for op in KNOWN_OPS if op in ops))

    @classmethod
    def parse(cls, text: str) -> EpilogueSpec:
        """'none', or ops joined by '+' ('bias+residual', 'scale_col'); SpaceError otherwise."""
        if not isinstance(text, str):
            raise SpaceError(f"an epilogue is text such as 'bias+residual', got {_short(text)}")
        if len(text) > _MAX_TEXT:
            raise SpaceError(f"bad epilogue ({len(text)} characters): expected {_expected()}")
        name = text.strip().lower()
        if name == _NONE_TEXT:
            return EPILOGUE_NONE
        parts = [part.strip() for part in name.split("+")]
        if not name or any(not part for part in parts):
            raise SpaceError(f"bad epilogue {text!r}: expected {_expected()}")
        if _NONE_TEXT in parts:
            raise SpaceError(f"bad epilogue {text!r}: 'none' stands alone; expected {_expected()}")
        return cls(tuple(parts))

    @property
    def is_none(self) -> bool:
        return not self.ops

    def has(self, op: str) -> bool:
        return op in self.ops

    @property
    def operand_ops(self) -> tuple[str, ...]:
        """The ops that bring a kernel operand (all but swiglu), in parameter order."""
        return tuple(op for op in self.ops if op in OPS)

    @property
    def gated(self) -> bool:
        """The spec is "swiglu": B holds the gate and up weights, 2N rows for an N-wide D."""
        return SWIGLU in self.ops

    def gemm_n(self, n: int) -> int:
        """The width of the GEMM behind an N-wide D: 2N with swiglu (B's rows), else N."""
        return 2 * n if self.gated else n

    def operands(self, m: int, n: int, dtype: str) -> tuple[Operand, ...]:
        """The extra kernel operands of an (M, N) output of `dtype`, in parameter order (none
        for swiglu, whose second weight is B's other half)."""
        shapes = {
            "scale_a": ((1,), "float32"),
            "scale_b": ((1,), "float32"),
            "scale_row": ((m,), "float32"),
            "scale_col": ((n,), "float32"),
            "bias": ((n,), dtype),
            "residual": ((m, n), dtype),
        }
        return tuple(Operand(op, *shapes[op]) for op in self.ops if op in shapes)

    def __str__(self) -> str:
        return "+".join(self.ops) if self.ops else _NONE_TEXT


EPILOGUE_NONE = EpilogueSpec()

# How a quantized (FP8) product is dequantized, by name, and the epilogue ops that do it: per
# tensor (A's and B's one scale each), per token x per channel (a scale per row of A and per row
# of B, i.e. per column of D). "block" (DeepSeek-V3's 1x128 / 128x128 scales along K) scales the
# sum inside the k loop, which the template does not build.
SCALINGS: dict[str, tuple[str, ...]] = {
    "none": (),
    "tensor": ("scale_a", "scale_b"),
    "rowcol": ("scale_row", "scale_col"),
}
UNBUILT_SCALINGS = ("block",)


def with_scaling(spec: EpilogueSpec, scaling: str) -> EpilogueSpec:
    """`spec` with the scaling's ops added ("tensor": scale_a+scale_b, "rowcol":
    scale_row+scale_col, "none": itself), beside any scale `spec` already names (each op applies
    once; `scaling_of` then says "custom"); SpaceError for an unknown or unbuilt scaling."""
    name = str(scaling).strip().lower()
    if name in UNBUILT_SCALINGS:
        raise SpaceError(
            f"scaling {name!r} (scales per 128-deep k block, applied inside the k loop) is not built yet: "
            f"expected one of {', '.join(SCALINGS)}"
        )
    if name not in SCALINGS:
        raise SpaceError(f"unknown scaling {_short(scaling)}: expected one of {', '.join(SCALINGS)}")
    ops = SCALINGS[name]
    if not ops:
        return spec
    if spec.gated:
        raise SpaceError(f"scaling {name!r} does not combine with swiglu")
    return EpilogueSpec(tuple(dict.fromkeys((*spec.ops, *ops))))


def scaling_of(spec: EpilogueSpec) -> str:
    """The scaling `spec`'s ops make: "tensor", "rowcol", "none" without scales, "custom" for any
    other set of them (scale_row alone, say)."""
    scales = tuple(op for op in spec.ops if op in SCALE_OPS)
    for name, ops in SCALINGS.items():
        if scales == ops:
            return name
    return "custom"


# Every valid epilogue's canonical text: "none", each combination of OPS, and "swiglu".
EPILOGUE_TEXTS: tuple[str, ...] = (
    *(str(EpilogueSpec(ops)) for size in range(len(OPS) + 1) for ops in combinations(OPS, size)),
    SWIGLU,
)


def _expected() -> str:
    return (
        f"'{_NONE_TEXT}', '{SWIGLU}' (alone), or ops joined by '+', each once, of {', '.join(OPS)} "
        "(e.g. 'bias+residual')"
    )


def _short(value: object, limit: int = 64) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
