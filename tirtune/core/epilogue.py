"""A GEMM's fused epilogue: what happens to the fp32 accumulator between the product and D.

`EpilogueSpec` is a set of ops, each at most once, always applied in one fixed order (`OPS`),
whatever order the text named them in:

    acc = A @ B.T                         (fp32)
    acc = acc * scale_row[m]              "scale_row": an fp32 vector of length M
    acc = acc * scale_col[n]              "scale_col": an fp32 vector of length N
    acc = acc + bias[n]                   "bias": a vector of D's dtype, length N
    acc = acc + residual[m, n]            "residual": an (M, N) tensor of D's dtype
    D[m, n] = acc converted to D's dtype

Each op brings one extra kernel operand, named like the op, passed after A, B and D in the same
order (`operands`). The text form is "none" or the ops joined by "+" ("bias+residual"); `parse`
takes any order and case and `str` gives the canonical one. docs/design.md, "Epilogues", says
where the Hopper template applies it and what is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from tirtune.core.errors import SpaceError

__all__ = ["EPILOGUE_NONE", "OPS", "EpilogueSpec", "Operand"]

# The ops in the order they are applied (and their operands passed).
OPS: tuple[str, ...] = ("scale_row", "scale_col", "bias", "residual")
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
        unknown = [op for op in ops if op not in OPS]
        if unknown:
            raise SpaceError(f"unknown epilogue op {_short(unknown[0])}: expected {_expected()}")
        repeated = sorted({op for op in ops if ops.count(op) > 1})
        if repeated:
            raise SpaceError(f"epilogue op {repeated[0]!r} given more than once: expected {_expected()}")
        object.__setattr__(self, "ops", tuple(op for op in OPS if op in ops))

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

    def operands(self, m: int, n: int, dtype: str) -> tuple[Operand, ...]:
        """The extra kernel operands of an (M, N) output of `dtype`, in parameter order."""
        shapes = {
            "scale_row": ((m,), "float32"),
            "scale_col": ((n,), "float32"),
            "bias": ((n,), dtype),
            "residual": ((m, n), dtype),
        }
        return tuple(Operand(op, *shapes[op]) for op in self.ops)

    def __str__(self) -> str:
        return "+".join(self.ops) if self.ops else _NONE_TEXT


EPILOGUE_NONE = EpilogueSpec()


def _expected() -> str:
    return f"'{_NONE_TEXT}' or ops joined by '+', each once, of {', '.join(OPS)} (e.g. 'bias+residual')"


def _short(value: object, limit: int = 64) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
