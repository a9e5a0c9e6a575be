"""A block-scaled FP8 GEMM in Triton: the measuring child's baseline where torch has none.

D (M, N) bf16 or fp16 = sum over the 128-deep k blocks kb of (A_kb @ B_kb.T) * scale_a_block[kb, m] *
scale_b_block[n // 128, kb] (core/epilogue.py's block scales; A (M, K) and B (N, K) e4m3,
row-major). Each program owns one BLOCK_M x BLOCK_N tile of D, multiplies one k block at a time
with `tl.dot` on the e4m3 tiles (fp32 products), scales the block's product by A's row scales and
B's column scales and adds it to an fp32 sum, as DeepSeek-V3's serving stacks' Triton kernels do.
It is what `runner.inputs` times a block-scaled kernel against when torch._scaled_mm refuses the
block scales (its label says so), so it tries a few tile shapes and keeps the fastest for the
problem (`fastest_config`), as a user tuning Triton would. Runs under Triton's interpreter on the
CPU too (TRITON_INTERPRET=1: tests/test_fp8_block.py).
"""

from __future__ import annotations

import functools
from typing import Any

from tirtune.core.epilogue import BLOCK_K  # one scale block a step of the k loop

__all__ = ["CONFIGS", "block_scaled_mm", "fastest_config"]


# (BLOCK_M, BLOCK_N, num_warps, num_stages): the tile shapes tried, the fastest kept per problem.
CONFIGS: tuple[tuple[int, int, int, int], ...] = (
    (128, 128, 8, 3),
    (64, 128, 4, 4),
    (128, 64, 4, 4),
    (64, 64, 4, 3),
    (16, 128, 4, 4),
)


@functools.cache
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def block_scaled_fp8(  # type: ignore[no-untyped-def]
        a, b, d, sa, sb, M, N, K, KB, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BK: tl.constexpr
    ):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BK)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kb in range(0, KB):
            k = kb * BK + ks
            a_mask = (rows[:, None] < M) & (k[None, :] < K)
            b_mask = (cols[:, None] < N) & (k[None, :] < K)
            a_tile = tl.load(a + rows[:, None] * K + k[None, :], mask=a_mask, other=0.0)
            b_tile = tl.load(b + cols[:, None] * K + k[None, :], mask=b_mask, other=0.0)
            part = tl.dot(a_tile, tl.trans(b_tile))
            row_scale = tl.load(sa + kb * M + rows, mask=rows < M, other=0.0)
            col_scale = tl.load(sb + (cols // BK) * KB + kb, mask=cols < N, other=0.0)
            acc += part * row_scale[:, None] * col_scale[None, :]
        d_mask = (rows[:, None] < M) & (cols[None, :] < N)
        tl.store(d + rows[:, None] * N + cols[None, :], acc.to(d.dtype.element_ty), mask=d_mask)

    return block_scaled_fp8


def block_scaled_mm(a: Any, b: Any, scale_a_block: Any, scale_b_block: Any, d: Any, config: int = 0) -> Any:
    """D = the block-scaled product of e4m3 A (M, K) and B (N, K) into bf16 or fp16 `d` (M, N); the scales
    as core/epilogue.py lays them out: (ceil(K/128), M) and (ceil(N/128), ceil(K/128)), fp32,
    contiguous; `config` indexes CONFIGS."""
    m, k = a.shape
    n = b.shape[0]
    block_m, block_n, warps, stages = CONFIGS[config]
    grid = (-(-m // block_m), -(-n // block_n))
    _kernel()[grid](
        a,
        b,
        d,
        scale_a_block,
        scale_b_block,
        m,
        n,
        k,
        -(-k // BLOCK_K),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BK=BLOCK_K,
        num_warps=warps,
        num_stages=stages,
    )
    return d


# (M, N, K, device, D dtype) -> the CONFIGS index chosen for it in this process.
_CHOSEN: dict[tuple[int, int, int, str, str], int] = {}


def fastest_config(torch: Any, a: Any, b: Any, scale_a_block: Any, scale_b_block: Any, d: Any) -> int:
    """The index of the CONFIGS entry that runs this problem fastest on its GPU (each timed over a
    few launches after one to compile it, once a problem and process), 0 off a GPU."""
    if not a.is_cuda:
        return 0
    key = (a.shape[0], b.shape[0], a.shape[1], str(a.device), str(d.dtype))
    if key in _CHOSEN:
        return _CHOSEN[key]
    times = []
    for i in range(len(CONFIGS)):
        block_scaled_mm(a, b, scale_a_block, scale_b_block, d, i)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            block_scaled_mm(a, b, scale_a_block, scale_b_block, d, i)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    _CHOSEN[key] = times.index(min(times))
    return _CHOSEN[key]
