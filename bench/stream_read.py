"""A plain streaming read of the decode weights, for the ceiling under the suite's flush.

`bench/decode_ceiling.py` times this beside cuBLAS and our decode kernels (case `stream
P=.. B=.. W=..`): a Triton kernel in which each of P programs reads one contiguous 1/P of the
weights, B elements at a time with evict_first loads (as our decode kernel's TMA loads of the
weights carry), and adds them up in fp32, writing one float per program so the loads stay live.
No MMA, no activations, no output tile: what a GEMM at M = 16 must at least spend reading its
33.5 MB, for a few launch shapes (few long programs to many short ones). Its best figure is the
read ceiling the 1.3x target is measured against; torch's own reduction (`read`) is a poor one,
slower than our GEMM (bench/results/decode/2026-12-01-ceiling.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["VARIANTS", "StreamVariant", "stream_sum"]


@dataclass(frozen=True, slots=True)
class StreamVariant:
    programs: int  # P: each reads elements // P contiguous elements
    block: int  # B: elements a load step
    warps: int

    @property
    def label(self) -> str:
        return f"stream P={self.programs} B={self.block} W={self.warps}"

    def per_program(self, elements: int) -> int:
        """Elements one program reads; refuses a split that leaves a remainder."""
        if elements % self.programs or (elements // self.programs) % self.block:
            raise ValueError(f"{self.label}: {elements} elements do not split into {self.programs} programs "
                             f"of whole {self.block}-element steps")
        return elements // self.programs


# One program an SM (132 on the H200 would leave a remainder: 128), two, four and more, at two step widths.
VARIANTS: tuple[StreamVariant, ...] = (
    StreamVariant(128, 4096, 8),
    StreamVariant(256, 4096, 8),
    StreamVariant(512, 4096, 4),
    StreamVariant(1024, 4096, 4),
    StreamVariant(2048, 2048, 4),
    StreamVariant(4096, 2048, 4),
)

_KERNEL: Any = None


def _kernel() -> Any:
    """The Triton kernel, defined on first use (where triton is installed: the GPU hosts, the test extras)."""
    global _KERNEL
    if _KERNEL is None:
        import triton
        import triton.language as tl

        @triton.jit  # type: ignore[misc]
        def stream(w_ptr, out_ptr, PER_PROG: tl.constexpr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
            pid = tl.program_id(0)
            base = pid.to(tl.int64) * PER_PROG
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for off in range(0, PER_PROG, BLOCK):
                idx = base + off + tl.arange(0, BLOCK)
                acc += tl.load(w_ptr + idx, eviction_policy="evict_first").to(tl.float32)
            tl.store(out_ptr + pid, tl.sum(acc, axis=0))

        _KERNEL = stream
    return _KERNEL


def stream_sum(w: Any, out: Any, variant: StreamVariant) -> Any:
    """Launch `variant` over the contiguous tensor `w`: out[p] = the fp32 sum of program p's share."""
    if not w.is_contiguous() or out.numel() < variant.programs:
        raise ValueError("stream_sum needs a contiguous input and one output float per program")
    per = variant.per_program(w.numel())
    _kernel()[(variant.programs,)](w, out, PER_PROG=per, BLOCK=variant.block, num_warps=variant.warps)
    return out
