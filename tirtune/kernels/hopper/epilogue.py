"""The Hopper kernel's register epilogue: a consumer's fp32 fragment straight to D in global memory.

A wgmma m64nN f32 fragment gives thread (warp, lane) of a warpgroup register r at row
16*warp + lane/4 + 8*((r>>1)&1) and column 8*(r>>2) + 2*(lane%4) + (r&1) of its m64 block
(`store_block`). Each value is converted to D's dtype (the operands' own; bf16 for e4m3 operands, fp16 with out_float16)
and stored under guards on M and N:

* with N even (every row 4-byte aligned, and col < N implies col+1 < N), the column pair
  (r, r+1) of a register pair goes out as one 4-byte store of two 16-bit values (`store2`);
* with N odd, one 2-byte store a register;
* with swap_ab the kernel's (row, col) is the problem's (n, m): the value goes to D[col, row],
  one 2-byte store each (a warp's store covers 8 consecutive elements of 4 rows of D; D of a
  small M is a few hundred KB).

The serial split-K reduction's last rank stores through `store_block` too, and the DSMEM
reduction's pairs through `store2` (`splitk.py`). The staged epilogues are `staging.py`.

A problem's fused epilogue (core/epilogue.py: scale_a, scale_b, scale_row, scale_col, bias, residual,
in that order; its block scales are the k loop's, `mma.py`) is applied to each fp32 value as it is
written to D, inside the same guards on M and N (`fuse`: the value at the kernel's (row, col),
which with swap_ab is the problem's (n, m)): `store_block` on every path, the DSMEM reduction on
each summed value (`splitk.py`), and, before a staged epilogue's stmatrix, to the fragment in
place (`fuse_block`, called by `roles.py`).
Partial sums (split-K's parked fragments and workspace, stream-K's hand-over) stay unfused. With
no epilogue `fuse` gives the value back unchanged, so the kernel is the one it was before.

swiglu (core/epilogue.py) pairs values instead: the kernel's GEMM is 2N wide, B's rows alternating
between 8 gate and 8 up rows, and `store_block` writes silu(gate) * up from two registers of one
thread. Without swap_ab B's rows are the kernel's columns: in a tile starting on a multiple of 16
columns (rules.swiglu_pairs_in_thread), register r with r>>2 even holds gate column
n0 + 8*(r>>2) + 2*(lane%4) + (r&1) and register r+4 its up partner, which go to D's column
n0/2 + 8*((r>>2)/2) + 2*(lane%4) + (r&1), paired (N is a multiple of 8, so even) as two columns
in one 4-byte store. With swap_ab B's rows are the kernel's rows 16*warp + lane/4 + 8*((r>>1)&1)
(from row0, a multiple of 16): the gate values are the registers with ((r>>1)&1) == 0 and their up
partners r+2, written to D[col, row0/2 + 8*warp + lane/4] one 2-byte store each. silu(x) is
x / (1 + exp(-x)) in fp32 (CUDA's __expf). The staged epilogues, split-K and stream-K never
see swiglu (rules.swiglu_register_epilogue, swiglu_whole_sums); `fuse`, which they call, refuses it.
"""

# The @T.inline macros are parsed by TVMScript, which reads parameter annotations as TIR types;
# they stay unannotated.
# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tirtune.core.epilogue import BLOCK_OPS
from tirtune.core.errors import SpaceError
from tirtune.kernels.hopper.frame import Frame, FusedOperands
from tirtune.kernels.hopper.plan import KernelPlan
from tirtune.kernels.skeleton import HALF2, PTX_TYPE

__all__ = ["Epilogue", "declare_operands", "store2_helper"]


def declare_operands(p: KernelPlan) -> FusedOperands:
    """The TIR buffers of the problem's fused-epilogue operands (core.epilogue.Operand), named and
    shaped as the problem has them; none without an epilogue."""
    from tvm import tirx

    pm, pn = p.problem_shape
    operands = p.fused.operands(pm, pn, p.out_dtype, p.k)
    buffers = {o.name: tirx.decl_buffer(o.shape, o.dtype, name=o.name) for o in operands}
    return FusedOperands(**buffers)


def store2_helper(dtype: str) -> tuple[str, str]:
    """Epilogue helper: two adjacent fp32 accumulators -> one 4-byte store of two 16-bit values. The
    fragment holds column pairs (2*(lane%4), +1), so pairing halves the store instructions."""
    elem, convert, pair = HALF2[dtype]
    name = f"tirtune_store_{PTX_TYPE[dtype]}x2"
    source = (
        f"__forceinline__ __device__ void {name}({elem}* dst, float lo, float hi) {{\n"
        f"  *reinterpret_cast<{pair}*>(dst) = {convert}(lo, hi);\n}}\n"
    )
    return name, source


@dataclass(frozen=True, slots=True)
class Epilogue:
    """The register epilogue's macros (TVMScript) and the fused epilogue's expression.

    store_block(acc, row0, n0): one m64 block's fragment `acc`, whose first row is row0 and first
        column n0 (the kernel's axes), fused, converted and stored to D, guarded on M and N.
    fuse_block(acc, row0, n0): the fused epilogue applied to the fragment in place (guarded on M
        and N; the elements past them keep their values), for the staged epilogues.
    fuse(value, row, col): a Python function: the fp32 expression `value` at the kernel's (row,
        col) through the problem's fused ops (`value` itself without any).
    """

    store_block: Any
    fuse_block: Any
    fuse: Any

    @classmethod
    def trace(cls, T: Any, p: KernelPlan, f: Frame) -> Epilogue:
        # DT: D's dtype (the operands' own, bf16 for e4m3 operands).
        M, N, DT, NACC, SWAP = p.m, p.n, p.out_dtype, p.acc_regs, p.swap_ab
        # With N even every row starts 4-byte aligned and col (always even) < N implies col+1 < N.
        PAIRED = N % 2 == 0
        store2_name, store2_source = store2_helper(DT)
        D, warp, lane, X = f.D, f.warp, f.lane, f.fused
        OPS = p.fused.operand_ops
        # swiglu: D is half the GEMM's width, PN columns (PM with swap_ab, the kernel's M halved).
        GATED, (_, PN) = p.fused.gated, p.problem_shape

        def silu(value: Any) -> Any:
            return value / (T.float32(1) + T.exp(T.float32(0) - value))

        def fuse(value: Any, row: Any, col: Any) -> Any:
            # The kernel's (row, col) is the problem's (m, n), or (n, m) with swap_ab; the
            # operands are in the problem's axes. core/epilogue.py's order.
            if GATED:
                raise SpaceError("swiglu pairs registers in store_block only (rules.swiglu_whole_sums)")
            pm, pn = (col, row) if SWAP else (row, col)
            for op in OPS:
                if op in BLOCK_OPS:
                    continue  # applied to each k-tile's product in the k loop (mma.py)
                if op == "scale_a":
                    value = value * X.scale_a[0]
                elif op == "scale_b":
                    value = value * X.scale_b[0]
                elif op == "scale_row":
                    value = value * X.scale_row[pm]
                elif op == "scale_col":
                    value = value * X.scale_col[pn]
                elif op == "bias":
                    value = value + T.cast(X.bias[pn], "float32")
                else:
                    value = value + T.cast(X.residual[pm, pn], "float32")
            return value

        # fmt: off
        @T.inline
        def store_block(acc, row0, n0):
            # wgmma m64nN f32 fragment: register r of a thread holds row
            # 16*warp + lane/4 + 8*((r>>1)&1), column 8*(r>>2) + 2*(lane%4) + (r&1).
            if GATED and SWAP:
                # swiglu, swapped: B's rows are the kernel's rows; gate r = 4*q + e (row bit 0),
                # up r + 2 (8 rows on), both to D[col, row0/2 + 8*warp + lane/4].
                for q in T.unroll(NACC // 4):
                    for e in T.unroll(2):
                        n = T.meta_var(row0 // 2 + 8 * warp + lane // 4)
                        col = T.meta_var(n0 + 8 * q + 2 * (lane % 4) + e)
                        if n < PN:
                            if col < N:
                                D[col, n] = T.cast(silu(acc[4 * q + e]) * acc[4 * q + e + 2], DT)
            elif GATED:
                # swiglu: gate registers 8*g + 2*h (+1), up registers 4 on (8 columns on); the
                # column pair goes to D's columns n0/2 + 8*g + 2*(lane%4) (+1), one 4-byte store.
                for g in T.unroll(NACC // 8):
                    for h in T.unroll(2):
                        row = T.meta_var(row0 + 16 * warp + lane // 4 + 8 * h)
                        col = T.meta_var(n0 // 2 + 8 * g + 2 * (lane % 4))
                        if row < M:
                            if col < PN:
                                T.evaluate(T.cuda.func_call(store2_name, D.ptr_to([row, col]),
                                                            silu(acc[8 * g + 2 * h]) * acc[8 * g + 2 * h + 4],
                                                            silu(acc[8 * g + 2 * h + 1]) * acc[8 * g + 2 * h + 5],
                                                            source_code=store2_source))
            elif SWAP:
                # The kernel's (row, col) is the problem's (n, m): D[col, row], one 2-byte store
                # each (a warp's store covers 8 consecutive n of 4 rows of D).
                for r in T.unroll(NACC):
                    row = T.meta_var(row0 + 16 * warp + lane // 4 + 8 * ((r >> 1) & 1))
                    col = T.meta_var(n0 + 8 * (r >> 2) + 2 * (lane % 4) + (r & 1))
                    if row < M:
                        if col < N:
                            D[col, row] = T.cast(fuse(acc[r], row, col), DT)
            elif PAIRED:
                for q in T.unroll(NACC // 2):
                    row = T.meta_var(row0 + 16 * warp + lane // 4 + 8 * (q & 1))
                    col = T.meta_var(n0 + 8 * (q >> 1) + 2 * (lane % 4))
                    if row < M:
                        if col < N:
                            T.evaluate(T.cuda.func_call(store2_name, D.ptr_to([row, col]),
                                                        fuse(acc[2 * q], row, col),
                                                        fuse(acc[2 * q + 1], row, col + 1),
                                                        source_code=store2_source))
            else:
                for r in T.unroll(NACC):
                    row = T.meta_var(row0 + 16 * warp + lane // 4 + 8 * ((r >> 1) & 1))
                    col = T.meta_var(n0 + 8 * (r >> 2) + 2 * (lane % 4) + (r & 1))
                    if row < M:
                        if col < N:
                            D[row, col] = T.cast(fuse(acc[r], row, col), DT)

        @T.inline
        def fuse_block(acc, row0, n0):
            for r in T.unroll(NACC):
                row = T.meta_var(row0 + 16 * warp + lane // 4 + 8 * ((r >> 1) & 1))
                col = T.meta_var(n0 + 8 * (r >> 2) + 2 * (lane % 4) + (r & 1))
                if row < M:
                    if col < N:
                        acc[r] = fuse(acc[r], row, col)
        # fmt: on

        return cls(store_block, fuse_block, fuse)
