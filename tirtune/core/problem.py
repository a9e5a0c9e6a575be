"""A GEMM problem: D (M,N) = A (M,K) @ B (N,K).T, both operands row-major, fp32 accumulation, and
the epilogue fused between the fp32 product and D (`core/epilogue.py`; none by default).

With the "swiglu" epilogue B has 2N rows (the gate and up weights interleaved in groups of 8) and
D = silu(A @ gate.T) * (A @ up.T) is (M, N): the GEMM is 2N wide (`gemm_n`), and its flops
(2 x M x 2N x K), bytes and operands count B's 2N rows. N must be a multiple of 8 to be tuned or
run (`swiglu_n_aligned`, each branch's problem rule: a problem that breaks it can still be named,
e.g. in a query, and is refused where it would be queued or built).

An FP8 problem (dtype "float8_e4m3fn", aliases "fp8" and "e4m3") has A and B in e4m3 (1 byte an
element) and writes D in bfloat16 (`out_dtype`): e4m3 holds too few mantissa bits to store a
product's sums, and bfloat16 keeps their range. The epilogue op "out_float16" writes D in float16
instead (a problem rule, `out_float16_fp8`, keeps it to FP8). Its epilogue operands of D's dtype
(bias, residual) follow D; the scaling of a quantized product is the epilogue's: per tensor
"scale_a+scale_b" (one fp32 value each), per token x per channel "scale_row+scale_col" (fp32
vectors of length M and N), per block "scale_a_block+scale_b_block" (DeepSeek-V3's 1 x 128 and
128 x 128 scales, applied to each 128-deep k block's product; FP8 only: `block_scales_fp8`). Every
dtype of `DTYPES` is served end to end; `HALF_DTYPES`, the 16-bit ones, are what the cost model
learns from and what tuned problems transfer between."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tirtune.core.epilogue import EPILOGUE_NONE, GATE_GROUP, EpilogueSpec, Operand
from tirtune.core.errors import SpaceError

__all__ = [
    "DTYPES",
    "DTYPE_NAMES",
    "FP8",
    "GEMM_DTYPES",
    "HALF_DTYPES",
    "MAX_DIM",
    "SHAPE_PATTERN",
    "Problem",
    "dtype_bytes",
    "normalize_dtype",
    "out_dtype_of",
    "out_float16_fp8",
    "quoted",
    "block_scales_fp8",
    "swiglu_n_aligned",
]


# e4m3 operands with a bfloat16 D.
FP8 = "float8_e4m3fn"
# The 16-bit dtypes: the cost model's (tirtune.model) and the tuner's transfers' domain.
HALF_DTYPES: tuple[str, ...] = ("float16", "bfloat16")
# The dtypes served end to end (the service, the tuner, the dispatcher, the measuring child).
DTYPES: tuple[str, ...] = (*HALF_DTYPES, FP8)
GEMM_DTYPES = DTYPES  # the dtypes a `Problem` takes: every served one
_ALIASES = {"fp16": "float16", "half": "float16", "f16": "float16", "bf16": "bfloat16", "fp8": FP8, "e4m3": FP8}
DTYPE_NAMES: tuple[str, ...] = (*DTYPES, *_ALIASES)  # what `normalize_dtype` takes (any case)
# D's dtype for operands that are not a store type of their own.
_OUT_DTYPES = {FP8: "bfloat16"}
# A dimension above 2**20 would need more than a GPU's memory for any sensible other two.
MAX_DIM = 1 << 20


def _shape_of(dimension: str) -> str:
    # ASCII only: `\d` and `\s` would also take full-width digits (e.g. U+FF14) and other Unicode
    # spaces.
    return rf"^[ \t]*({dimension})[ \t]*[xX][ \t]*({dimension})[ \t]*[xX][ \t]*({dimension})[ \t]*$"


def _one_to(limit: int) -> str:
    """A regular expression of the decimal integers 1..`limit` (leading zeros allowed): those with
    fewer digits than `limit`, then, digit by digit, those of its length below it, then itself."""
    top = str(limit)
    fewer = [f"[1-9][0-9]{{0,{len(top) - 2}}}"] if len(top) > 1 else []
    below = [
        f"{top[:i]}[{int(i == 0)}-{int(d) - 1}]" + (f"[0-9]{{{len(top) - i - 1}}}" if i < len(top) - 1 else "")
        for i, d in enumerate(top)
        if int(d) > int(i == 0)
    ]
    return f"0*(?:{'|'.join([*fewer, *below, top])})"


# What `Problem.parse` accepts, exactly: the API publishes it in its OpenAPI schema, so a client or
# a generated test that follows the schema sends only shapes the domain takes. Parsing itself reads
# any digits, so that an out-of-range dimension is refused with the range, not as a bad shape.
SHAPE_PATTERN = _shape_of(_one_to(MAX_DIM))
_SHAPE = re.compile(_shape_of("[0-9]+"))


def quoted(value: object, limit: int = 64) -> str:
    """`value` quoted for an error message, cut to its first `limit` characters: a message never
    echoes a large input (a 1 MB dtype is refused in a line, not in a megabyte)."""
    text = str(value)
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def _short_repr(value: object, limit: int = 64) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def normalize_dtype(dtype: str, accepted: tuple[str, ...] = DTYPES) -> str:
    """Canonical dtype name ('fp16' -> 'float16', 'fp8' -> 'float8_e4m3fn'); SpaceError for
    anything outside `accepted` (the served dtypes unless told otherwise)."""
    name = _ALIASES.get(str(dtype).strip().lower(), str(dtype).strip().lower())
    if name not in accepted:
        raise SpaceError(f"unsupported dtype {quoted(dtype)}: expected one of {', '.join(accepted)}")
    return name


@dataclass(frozen=True, slots=True)
class Problem:
    """One GEMM problem; construct through `Problem.parse` or directly (both validate).

    `epilogue` takes an `EpilogueSpec` or its text ("bias+residual": how a problem's JSON form
    reads back). At its default, none, a problem's text and JSON forms are the ones problems had
    before epilogues existed, so every build and measurement key stays the same."""

    m: int
    n: int
    k: int
    dtype: str = "float16"
    epilogue: EpilogueSpec = EPILOGUE_NONE

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise SpaceError(f"{name.upper()} must be an integer, got {_short_repr(value)}")
            if not 1 <= value <= MAX_DIM:
                shown = value if abs(value) < 10**20 else f"a {value.bit_length()}-bit integer"
                raise SpaceError(f"{name.upper()}={shown} is out of range: expected 1..{MAX_DIM}")
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype, GEMM_DTYPES))
        epilogue: object = self.epilogue
        if isinstance(epilogue, str):
            object.__setattr__(self, "epilogue", EpilogueSpec.parse(epilogue))
        elif not isinstance(epilogue, EpilogueSpec):
            raise SpaceError(f"epilogue must be an EpilogueSpec or its text, got {_short_repr(epilogue)}")

    @classmethod
    def parse(cls, shape: str, dtype: str = "float16", epilogue: str = "none") -> Problem:
        """Parse 'MxNxK' (e.g. '4096x4096x4096'), with the epilogue's text ('none', 'bias', ...)."""
        match = _SHAPE.fullmatch(str(shape))
        if match is None:
            raise SpaceError(
                f"bad shape {quoted(shape)}: expected MxNxK with positive integers (ASCII digits), e.g. 4096x4096x4096"
            )
        m, n, k = (_dimension(name, digits) for name, digits in zip("MNK", match.groups(), strict=True))
        return cls(m, n, k, dtype, EpilogueSpec.parse(epilogue))

    @property
    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def gemm_n(self) -> int:
        """The width of the GEMM the kernel computes: B's rows (2N with swiglu, else N)."""
        return self.epilogue.gemm_n(self.n)

    @property
    def flops(self) -> int:
        """2 x M x gemm_n x K: with swiglu both the gate's and the up's products."""
        return 2 * self.m * self.gemm_n * self.k

    @property
    def element_bytes(self) -> int:
        """Bytes of one element of A and B: 2 (float16, bfloat16) or 1 (e4m3)."""
        return dtype_bytes(self.dtype)

    @property
    def is_fp8(self) -> bool:
        return self.dtype == FP8

    @property
    def out_dtype(self) -> str:
        """D's dtype: the operands' own, except bfloat16 for FP8 operands (float16 with the
        epilogue op out_float16)."""
        return out_dtype_of(self.dtype, self.epilogue)

    @property
    def out_bytes(self) -> int:
        """Bytes of one element of D."""
        return dtype_bytes(self.out_dtype)

    @property
    def min_bytes(self) -> int:
        """Bytes a GEMM must move through device memory at least: A and B (gemm_n rows) read once,
        D written once, and each of the epilogue's operands read once."""
        gemm = (self.m * self.k + self.gemm_n * self.k) * self.element_bytes + self.m * self.n * self.out_bytes
        return gemm + sum(_bytes(o) for o in self.epilogue.operands(self.m, self.n, self.out_dtype, self.k))

    @property
    def operands(self) -> tuple[Operand, ...]:
        """The kernel's operands in parameter order: A, B, D, then the epilogue's."""
        return (
            Operand("A", (self.m, self.k), self.dtype),
            Operand("B", (self.gemm_n, self.k), self.dtype),
            Operand("D", (self.m, self.n), self.out_dtype),
            *self.epilogue.operands(self.m, self.n, self.out_dtype, self.k),
        )

    def tflops(self, milliseconds: float) -> float:
        """Throughput in TFLOP/s of one product that took `milliseconds`."""
        return self.flops / (milliseconds * 1e-3) / 1e12

    def to_json(self) -> dict[str, int | str]:
        """The JSON form (`Problem(**data)` reads it back); "epilogue" only when there is one."""
        data: dict[str, int | str] = {"m": self.m, "n": self.n, "k": self.k, "dtype": self.dtype}
        if not self.epilogue.is_none:
            data["epilogue"] = str(self.epilogue)
        return data

    def __str__(self) -> str:
        fused = "" if self.epilogue.is_none else f" epilogue={self.epilogue}"
        return f"{self.shape} {self.dtype}{fused}"


_ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, FP8: 1}


def dtype_bytes(dtype: str) -> int:
    """Bytes of one element of `dtype` (a dtype of a problem's operands or of D)."""
    return _ELEMENT_BYTES[dtype]


def out_dtype_of(dtype: str, epilogue: EpilogueSpec = EPILOGUE_NONE) -> str:
    """D's dtype for operands of `dtype` under `epilogue`: float16 where the epilogue holds
    out_float16, else bfloat16 for FP8, else the operands' own."""
    if epilogue.out_float16:
        return "float16"
    return _OUT_DTYPES.get(dtype, dtype)


def _bytes(operand: Operand) -> int:
    count = 1
    for extent in operand.shape:
        count *= extent
    return count * _ELEMENT_BYTES[operand.dtype]


def _dimension(name: str, digits: str) -> int:
    # int() refuses strings of more than 4300 digits with a ValueError; anything past 16 digits
    # is out of range anyway.
    if len(digits.lstrip("0")) > 16:
        raise SpaceError(f"{name}={quoted(digits, 20)} is out of range: expected 1..{MAX_DIM}")
    return int(digits)


def swiglu_n_aligned(problem: Problem) -> str | None:
    """swiglu's B interleaves its gate and up weights in groups of 8 rows (core/epilogue.py), so
    N must be a multiple of 8 (each branch's problem rule; a problem that breaks it is refused
    before anything is queued or built)."""
    if problem.epilogue.gated and problem.n % GATE_GROUP:
        return (
            f"N={problem.n}: epilogue swiglu needs N a multiple of {GATE_GROUP} (B interleaves its gate and up "
            f"weights in groups of {GATE_GROUP} rows)"
        )
    return None


def block_scales_fp8(problem: Problem) -> str | None:
    """The block scales dequantize an FP8 product (core/epilogue.py): a 16-bit problem has no
    quantized blocks to scale (each branch's problem rule)."""
    if problem.epilogue.block_scaled and not problem.is_fp8:
        return (
            f"dtype={problem.dtype}: the block scales (scale_a_block, scale_b_block) dequantize FP8 operands "
            "(dtype float8_e4m3fn) only"
        )
    return None


def out_float16_fp8(problem: Problem) -> str | None:
    """out_float16 picks D's dtype where the operands leave a choice (FP8's bfloat16 or float16):
    a 16-bit problem's D is its own dtype (each branch's problem rule)."""
    if problem.epilogue.out_float16 and not problem.is_fp8:
        return (
            f"dtype={problem.dtype}: out_float16 picks D's dtype for FP8 operands (dtype float8_e4m3fn) only; "
            f"a {problem.dtype} problem writes D in {problem.dtype}"
        )
    return None
