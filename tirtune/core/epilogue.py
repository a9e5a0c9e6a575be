"""A GEMM's fused epilogue: what happens to the fp32 accumulator between the product and D.

`EpilogueSpec` is a set of ops, each at most once, always applied in one fixed order (`OPS`),
whatever order the text named them in:

    acc = sum over k blocks kb of         "scale_a_block" + "scale_b_block" (together, FP8 only):
          (A_kb @ B_kb.T)                 the blocks' scales, inside the k loop (below)
          * scale_a_block[kb, m]
          * scale_b_block[n // 128, kb]
    acc = A @ B.T                         (fp32; without the block scales)
    acc = acc * scale_a[0]                "scale_a": one fp32 value (A's per-tensor scale)
    acc = acc * scale_b[0]                "scale_b": one fp32 value (B's per-tensor scale)
    acc = acc * scale_row[m]              "scale_row": an fp32 vector of length M
    acc = acc * scale_col[n]              "scale_col": an fp32 vector of length N
    acc = acc + bias[n]                   "bias": a vector of D's dtype, length N
    acc = acc + residual[m, n]            "residual": an (M, N) tensor of D's dtype
    D[m, n] = acc converted to D's dtype  "out_float16" (FP8 only): D, bias and residual in float16
                                          instead of bfloat16

Each op but "out_float16" and "swiglu" brings one extra kernel operand, named like the op, passed
after A, B and D in the same order (`operands`). The text form is "none" or the ops joined by "+"
("bias+residual"); `parse` takes any order and case and `str` gives the canonical one. docs/design.md, "Epilogues", says
where the Hopper template applies it and what is refused.

The block scales are DeepSeek-V3's FP8 quantization (`BLOCK_OPS`, the scaling "block"): A is
scaled per row and 128-deep block of K (1 x 128), B per 128 x 128 block, and the product of each
128-deep k block (`BLOCK_K`) is multiplied by its two scales before it joins the fp32 sum, so they
are applied inside the k loop, not after it. scale_a_block is (ceil(K / 128), M), its k blocks
outermost (a block's M scales contiguous, as torch._scaled_mm's 1x128 scales lie in memory);
scale_b_block is (ceil(N / 128), ceil(K / 128)), as a checkpoint's `weight_scale_inv` is stored.
They come together, with bias and residual after them if any, never with the per-tensor or
per-row scales (a SpaceError says so), and take K to shape (`operands(..., k=K)`).

"out_float16" (`OUT_FLOAT16`) takes no operand: it names D's dtype where the operands' dtype
leaves a choice. An FP8 problem writes D in bfloat16 unless its epilogue holds it (a problem rule,
core/problem.py `out_float16_fp8`, refuses it for 16-bit operands, whose D is their own dtype). It
changes the conversion at the store and the dtype of bias and residual, nothing the search
weighs: D's elements are two bytes either way.

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
    "BLOCK_K",
    "BLOCK_OPS",
    "EPILOGUE_NONE",
    "EPILOGUE_TEXTS",
    "GATE_GROUP",
    "KNOWN_OPS",
    "OPS",
    "OUT_FLOAT16",
    "SCALE_OPS",
    "SCALINGS",
    "SWIGLU",
    "EpilogueSpec",
    "Operand",
    "rescaled",
    "scaling_of",
    "with_scaling",
]

# The block scales (DeepSeek-V3's FP8 scaling), applied to each 128-deep k block's product.
BLOCK_OPS: tuple[str, ...] = ("scale_a_block", "scale_b_block")
# The depth of a block scale's k block, and the rows of B one scale_b_block value covers.
BLOCK_K = 128
# The ops that take an operand, in the order they are applied (and their operands passed).
OPS: tuple[str, ...] = (*BLOCK_OPS, "scale_a", "scale_b", "scale_row", "scale_col", "bias", "residual")
# The scaling ops: what dequantizes a quantized (FP8) product, applied first.
SCALE_OPS: tuple[str, ...] = (*BLOCK_OPS, "scale_a", "scale_b", "scale_row", "scale_col")
# The scales applied to the whole sum, which the block scales do not combine with.
_WHOLE_SUM_SCALES: tuple[str, ...] = ("scale_a", "scale_b", "scale_row", "scale_col")
# The gated activation: D = silu(A @ gate.T) * (A @ up.T), B holding both weights interleaved.
SWIGLU = "swiglu"
# D (and bias, residual) in float16 where the operands' dtype writes bfloat16 otherwise (FP8).
OUT_FLOAT16 = "out_float16"
# Every op a spec may hold ("swiglu" only alone).
KNOWN_OPS: tuple[str, ...] = (*OPS, OUT_FLOAT16, SWIGLU)
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
        blocks = [op for op in BLOCK_OPS if op in ops]
        if blocks and len(blocks) != len(BLOCK_OPS):
            raise SpaceError(f"the block scales come together ({' and '.join(BLOCK_OPS)}), got {blocks[0]} alone")
        if blocks and any(op in ops for op in _WHOLE_SUM_SCALES):
            raise SpaceError(
                "the block scales do not combine with the per-tensor or per-row scales (fold those into the "
                "block scales): expected scale_a_block+scale_b_block with bias and residual at most"
            )
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
        """The ops that bring a kernel operand (all but out_float16 and swiglu), in parameter order."""
        return tuple(op for op in self.ops if op in OPS)

    @property
    def block_scaled(self) -> bool:
        """The spec scales each 128-deep k block's product (scale_a_block, scale_b_block)."""
        return BLOCK_OPS[0] in self.ops

    @property
    def gated(self) -> bool:
        """The spec is "swiglu": B holds the gate and up weights, 2N rows for an N-wide D."""
        return SWIGLU in self.ops

    @property
    def out_float16(self) -> bool:
        """The spec stores D (and takes bias and residual) in float16 (FP8 problems only)."""
        return OUT_FLOAT16 in self.ops

    def gemm_n(self, n: int) -> int:
        """The width of the GEMM behind an N-wide D: 2N with swiglu (B's rows), else N."""
        return 2 * n if self.gated else n

    def operands(self, m: int, n: int, dtype: str, k: int | None = None) -> tuple[Operand, ...]:
        """The extra kernel operands of an (M, N) output of `dtype` over depth `k`, in parameter
        order (none for out_float16, nor for swiglu, whose second weight is B's other half). The block scales' shapes
        need K; SpaceError without it."""
        if self.block_scaled and k is None:
            raise SpaceError("the block scales' shapes follow K: pass k")
        kb, nb = -(-(k or 0) // BLOCK_K), -(-n // BLOCK_K)
        shapes = {
            "scale_a_block": ((kb, m), "float32"),
            "scale_b_block": ((nb, kb), "float32"),
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
# of B, i.e. per column of D), per block (DeepSeek-V3's 1x128 scales of A and 128x128 of B along
# K, applied to each 128-deep k block's product inside the k loop).
SCALINGS: dict[str, tuple[str, ...]] = {
    "none": (),
    "tensor": ("scale_a", "scale_b"),
    "rowcol": ("scale_row", "scale_col"),
    "block": BLOCK_OPS,
}
UNBUILT_SCALINGS: tuple[str, ...] = ()


def with_scaling(spec: EpilogueSpec, scaling: str) -> EpilogueSpec:
    """`spec` with the scaling's ops added ("tensor": scale_a+scale_b, "rowcol":
    scale_row+scale_col, "block": scale_a_block+scale_b_block, "none": itself), beside any scale
    `spec` already names (each op applies once; `scaling_of` then says "custom"); SpaceError for an
    unknown or unbuilt scaling, or one the spec's ops do not combine with."""
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


def rescaled(spec: EpilogueSpec, scaling: str) -> EpilogueSpec:
    """`spec` with its scales replaced by `scaling`'s, its other ops kept (the same bias and
    residual under per-row/column scales instead of per-tensor ones, say); SpaceError as
    `with_scaling`."""
    return with_scaling(EpilogueSpec(tuple(op for op in spec.ops if op not in SCALE_OPS)), scaling)


def _valid(ops: tuple[str, ...]) -> bool:
    try:
        EpilogueSpec(ops)
    except SpaceError:
        return False
    return True


# Every valid epilogue's canonical text: "none", each valid combination of OPS, each of those
# with out_float16, and "swiglu".
_VALID_SETS = [ops for size in range(len(OPS) + 1) for ops in combinations(OPS, size) if _valid(ops)]
EPILOGUE_TEXTS: tuple[str, ...] = (
    *(str(EpilogueSpec(ops)) for ops in _VALID_SETS),
    *(str(EpilogueSpec((*ops, OUT_FLOAT16))) for ops in _VALID_SETS),
    SWIGLU,
)


def _expected() -> str:
    return (
        f"'{_NONE_TEXT}', '{SWIGLU}' (alone), or ops joined by '+', each once, of {', '.join(_SUM_OPS)}, "
        f"{OUT_FLOAT16} (e.g. 'bias+residual'), or the block scales {'+'.join(BLOCK_OPS)} with bias "
        "and residual at most"
    )


_SUM_OPS: tuple[str, ...] = tuple(op for op in OPS if op not in BLOCK_OPS)


def _short(value: object, limit: int = 64) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
