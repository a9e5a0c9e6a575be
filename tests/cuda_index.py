"""Reading the generated CUDA's index expressions back as Python functions of the thread and block
indices, for the tests that evaluate every store of a lowered kernel (test_lowered_kernel.py,
test_epilogue_kernels.py)."""

from __future__ import annotations

import re
from collections.abc import Callable

# The generated CUDA's spellings of the values an index depends on.
SPELLINGS = {
    "((int)threadIdx.x)": "tid",
    "((int)blockIdx.x)": "bx",
    "((int)blockIdx.y)": "by",
    "((int)tvm_builtin_cluster_ctaid_x())": "rank",
    "warp_id_in_cta": "(tid >> 5)",
}


def bracketed(text: str, start: int) -> str:
    """The text inside the bracket that opens at `start`."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"[": 1, "(": 1, "]": -1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1 : i]
    raise AssertionError(f"unbalanced at {start}")


def index(expression: str, loops: tuple[str, ...] = ()) -> Callable[..., int]:
    """An integer index expression of the generated CUDA as a function of tid, bx, by and rank (and
    of the loop variables named in `loops`, e.g. "kt"); CUDA's min() is Python's."""
    for spelling, name in SPELLINGS.items():
        expression = expression.replace(spelling, name)
    assert set(re.findall(r"[A-Za-z_]\w*", expression)) <= {"tid", "bx", "by", "rank", "min", *loops}, expression
    code = compile(expression.replace("/", "//"), "<index>", "eval")
    return lambda **values: int(eval(code, {"__builtins__": {}, "min": min}, values))  # noqa: S307 (our own generated code)
