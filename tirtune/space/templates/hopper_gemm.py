"""The Hopper (sm_90a) GEMM template: D = A @ B.T with TMA loads, an mbarrier ring and wgmma.

A (M,K) and B (N,K) are row-major (K-major) and D (M,N) has the problem's dtype; the product
accumulates in fp32 registers. One CTA computes one blk_m x blk_n tile of D:

* Shared memory holds a ring of `stages` stages, each an A tile (blk_m x blk_k) and a B tile
  (blk_n x blk_k) in the 128B-swizzled K-major layout. blk_k=128 is two 64-element swizzle
  atoms side by side; the TMA copy splits into one box per atom and the k16 steps of wgmma walk
  the descriptor across both.
* Each stage has a `full` barrier (one arrive.expect_tx by the loading thread, completed by the
  TMA bytes) and an `empty` barrier (one arrive per consumer warpgroup once its wgmma reads of
  the stage have retired).
* warp_specialized: an extra producer warpgroup (registers given back with setmaxnreg.dec) has one
  thread issue every load; the consumer warpgroups only wait, multiply and release. Otherwise
  thread 0 of consumer warpgroup 0 issues the load of tile kt+stages-1 right after tile kt-1 is
  released, a classic multistage prefetch pipeline.
* Consumer warpgroup c owns rows [c*rows, (c+1)*rows) of the tile (rows = blk_m/consumers, 64
  or 128, i.e. one or two m64 wgmma per k16 step, each with its own accumulator array).
* Epilogue: the fp32 fragment goes straight from registers to global memory, converted to the
  output dtype and guarded on M and N.

Tails: the loop runs ceil(K/blk_k) tiles; TMA zero-fills the out-of-bounds part of a box (and
still counts the whole box in its transaction bytes), so partial tiles along M, N and K add
zeros. The problem size is baked in at compile time (one build per problem).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tirtune.space.config import Config
from tirtune.space.errors import SpaceError
from tirtune.space.problem import Problem
from tirtune.space.rules import CONFIG_RULES, PROBLEM_RULES

__all__ = ["TEMPLATE_NAME", "KernelPlan", "build", "plan"]

logger = logging.getLogger(__name__)

TEMPLATE_NAME = "hopper_gemm"

WARPGROUP = 128
WGMMA_M = 64
WGMMA_K = 16
ATOM_K = 64  # elements of a 2-byte dtype in one 128-byte swizzle atom row
# Descriptor fields for a K-major 128B-swizzled tile: the stride between 8-row core groups is
# 8 rows x 128 B = 1024 B, in 16 B units; the leading offset is unused with swizzling.
DESC_LBO = 1
DESC_SBO = 64
DESC_SWIZZLE_128B = 3
# Register budgets after setmaxnreg (multiples of 8, within 24..256). With 3 warpgroups the
# launch gives 168 registers a thread (65536 / 384, rounded down to 8); 40 for the producer and
# 232 for two consumers add up to exactly 3 x 128 x 168. With one consumer (256 threads) every
# thread may already hold 255 registers, and ptxas ignores setmaxnreg there ("unable to determine
# register count at entry"), so it is only emitted with two consumers.
PRODUCER_REGS = 40
CONSUMER_REGS = 232
_AB_NAME = {"float16": "f16", "bfloat16": "bf16"}
# Epilogue helper: two adjacent fp32 accumulators -> one 4-byte store of two 16-bit values. The
# fragment holds column pairs (2*(lane%4), +1), so pairing halves the store instructions.
_STORE2 = {
    "float16": ("tirtune_store_f16x2", "half", "__floats2half2_rn", "half2"),
    "bfloat16": ("tirtune_store_bf16x2", "nv_bfloat16", "__floats2bfloat162_rn", "nv_bfloat162"),
}


def _store2_source(dtype: str) -> tuple[str, str]:
    name, elem, convert, pair = _STORE2[dtype]
    source = (f"__forceinline__ __device__ void {name}({elem}* dst, float lo, float hi) {{\n"
              f"  *reinterpret_cast<{pair}*>(dst) = {convert}(lo, hi);\n}}\n")
    return name, source


@dataclass(frozen=True, slots=True)
class KernelPlan:
    """Everything the kernel needs that follows from (config, problem), computed once in Python."""

    m: int
    n: int
    k: int
    dtype: str
    blk_m: int
    blk_n: int
    blk_k: int
    stages: int
    consumers: int
    warp_specialized: bool

    @property
    def rows(self) -> int:
        """Rows of the tile each consumer warpgroup owns (64 or 128)."""
        return self.blk_m // self.consumers

    @property
    def m_blocks(self) -> int:
        """m64 wgmma blocks per consumer warpgroup, each with its own accumulator array."""
        return self.rows // WGMMA_M

    @property
    def k_tiles(self) -> int:
        return -(-self.k // self.blk_k)

    @property
    def grid(self) -> tuple[int, int]:
        return (-(-self.m // self.blk_m), -(-self.n // self.blk_n))

    @property
    def warpgroups(self) -> int:
        return self.consumers + (1 if self.warp_specialized else 0)

    @property
    def threads(self) -> int:
        return self.warpgroups * WARPGROUP

    @property
    def acc_regs(self) -> int:
        """fp32 accumulator registers of one m64 x blk_n wgmma fragment per thread."""
        return self.blk_n // 2

    @property
    def rebalances_registers(self) -> bool:
        """setmaxnreg moves registers from the producer to the consumers (3 warpgroups only)."""
        return self.warp_specialized and self.consumers == 2

    @property
    def stage_bytes(self) -> int:
        """Bytes TMA delivers per stage: whole boxes, out-of-bounds zeros included."""
        return (self.blk_m + self.blk_n) * self.blk_k * 2

    @property
    def wgmma_name(self) -> str:
        ab = _AB_NAME[self.dtype]
        return f"wgmma.mma_async.sync.aligned.m64n{self.blk_n}k16.f32.{ab}.{ab}"


def plan(config: Config, problem: Problem) -> KernelPlan:
    """Check (config, problem) against the space's rules and derive the kernel constants."""
    reasons = [r for r in (rule(problem) for rule in PROBLEM_RULES) if r]
    reasons += [r for r in (rule(config, problem) for rule in CONFIG_RULES) if r]
    if reasons:
        what = f"{TEMPLATE_NAME} cannot build {config.label()} for {problem}"
        raise SpaceError(f"{what}: " + "; ".join(reasons))
    return KernelPlan(
        m=problem.m, n=problem.n, k=problem.k, dtype=problem.dtype,
        blk_m=config.blk_m, blk_n=config.blk_n, blk_k=config.blk_k, stages=config.stages,
        consumers=config.consumers, warp_specialized=config.warp_specialized,
    )


def build(config: Config, problem: Problem) -> Any:
    """The TIRx PrimFunc of this (config, problem): call it "main" in the IRModule.

    Raises SpaceError when the pair breaks a validity rule of the Hopper space.
    """
    p = plan(config, problem)
    logger.debug("tracing %s for %s", config.label(), problem)
    return _trace(p)


def _trace(p: KernelPlan) -> Any:
    # TVM is imported here, not at module import: the search space and the rules stay usable
    # (and fast to import) where no TVM is installed.
    from tvm.backend.cuda.lang.pipeline import MBarrier, TMABar
    from tvm.backend.cuda.tile_primitive.tma_utils import SwizzleMode, mma_shared_layout
    from tvm.script import tirx as T
    from tvm.script.tirx import tile as Tx

    M, N, K, DT = p.m, p.n, p.k, p.dtype
    BM, BN, BK, S = p.blk_m, p.blk_n, p.blk_k, p.stages
    C, ROWS, MB, KT = p.consumers, p.rows, p.m_blocks, p.k_tiles
    WS, NWG, NACC, REBALANCE = p.warp_specialized, p.warpgroups, p.acc_regs, p.rebalances_registers
    GM, GN = p.grid
    TX_BYTES = p.stage_bytes
    # Prefetch depth of the non-specialized pipeline: tiles loaded before the first MMA.
    PRE = min(S - 1, KT)
    a_layout = mma_shared_layout(DT, SwizzleMode.SWIZZLE_128B_ATOM, (S, BM, BK))
    b_layout = mma_shared_layout(DT, SwizzleMode.SWIZZLE_128B_ATOM, (S, BN, BK))
    # With N even every row starts 4-byte aligned and col (always even) < N implies col+1 < N.
    PAIRED = N % 2 == 0
    store2_name, store2_source = _store2_source(DT)
    wgmma = T.ptx[p.wgmma_name]
    set_regs_dec = T.ptx["setmaxnreg.dec.sync.aligned.u32"]
    set_regs_inc = T.ptx["setmaxnreg.inc.sync.aligned.u32"]

    # fmt: off
    @T.prim_func
    def main(A: T.Buffer((M, K), DT), B: T.Buffer((N, K), DT), D: T.Buffer((M, N), DT)):
        T.device_entry()
        bx, by = T.cta_id([GM, GN])
        wg = T.warpgroup_id([NWG])
        warp = T.warp_id_in_wg([4])
        lane = T.lane_id([32])

        pool = T.SMEMPool()
        full = TMABar(pool, S)
        empty = MBarrier(pool, S)
        # 128B swizzle needs 1024 B aligned tiles; every tile size below is a multiple of 1024.
        pool.move_base_to(1024)
        As = pool.alloc((S, BM, BK), DT, layout=a_layout)
        Bs = pool.alloc((S, BN, BK), DT, layout=b_layout)
        pool.commit()
        full.init(1)
        empty.init(C)
        T.ptx.fence.mbarrier_init.release.cluster()
        T.cuda.cta_sync()

        m0 = T.meta_var(bx * BM)
        n0 = T.meta_var(by * BN)

        @T.inline
        def load_atom(j, kk):
            Tx.copy_async(As[j % S, :, kk:kk + ATOM_K], A[m0:m0 + BM, j * BK + kk:j * BK + kk + ATOM_K],
                          dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([j % S]))
            Tx.copy_async(Bs[j % S, :, kk:kk + ATOM_K], B[n0:n0 + BN, j * BK + kk:j * BK + kk + ATOM_K],
                          dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([j % S]))

        @T.inline
        def load_tile(j):
            # Wait until every consumer released what stage j%S held (tile j-S). The parity
            # starts at 1, which a fresh barrier reports as complete: the first S loads pass.
            empty.wait(j % S, ((j // S) & 1) ^ 1)
            full.arrive(j % S, TX_BYTES)
            # One box per 64-element swizzle atom along K: a box row may span at most 128 B with
            # 128B swizzle, and this keeps the tensor map 2-D whatever K is.
            load_atom(j, 0)
            if BK == 2 * ATOM_K:
                load_atom(j, ATOM_K)

        @T.inline
        def mma_block(acc, desc_a, desc_b, s, row):
            for ki in T.unroll(BK // WGMMA_K):
                # ptr_to applies the swizzle; at a row that is a multiple of 8 it is the identity,
                # so this is the atom's base plus 32 B per k16 step, what the descriptor wants.
                T.cuda.wgmma.encode_matrix_descriptor(
                    T.address_of(desc_a[0]), As.ptr_to([s, row, ki * WGMMA_K]),
                    DESC_LBO, DESC_SBO, DESC_SWIZZLE_128B)
                T.cuda.wgmma.encode_matrix_descriptor(
                    T.address_of(desc_b[0]), Bs.ptr_to([s, 0, ki * WGMMA_K]),
                    DESC_LBO, DESC_SBO, DESC_SWIZZLE_128B)
                wgmma(*[acc[i] for i in range(NACC)], desc_a[0], desc_b[0], True, 1, 1, 0, 0)

        @T.inline
        def store_block(acc, row0):
            # wgmma m64nN f32 fragment: register r of a thread holds row
            # 16*warp + lane/4 + 8*((r>>1)&1), column 8*(r>>2) + 2*(lane%4) + (r&1).
            if PAIRED:
                for q in T.unroll(NACC // 2):
                    row = T.meta_var(row0 + 16 * warp + lane // 4 + 8 * (q & 1))
                    col = T.meta_var(n0 + 8 * (q >> 1) + 2 * (lane % 4))
                    if row < M:
                        if col < N:
                            T.evaluate(T.cuda.func_call(store2_name, D.ptr_to([row, col]), acc[2 * q],
                                                        acc[2 * q + 1], source_code=store2_source))
            else:
                for r in T.unroll(NACC):
                    row = T.meta_var(row0 + 16 * warp + lane // 4 + 8 * ((r >> 1) & 1))
                    col = T.meta_var(n0 + 8 * (r >> 2) + 2 * (lane % 4) + (r & 1))
                    if row < M:
                        if col < N:
                            D[row, col] = T.cast(acc[r], DT)

        @T.inline
        def consume(c):
            acc0 = T.alloc_local((NACC,), "float32")
            if MB == 2:  # a 128-row consumer: a second m64 block with its own accumulators
                acc1 = T.alloc_local((NACC,), "float32")
            desc_a = T.alloc_local((1,), "uint64")
            desc_b = T.alloc_local((1,), "uint64")
            for i in T.unroll(NACC):
                acc0[i] = T.float32(0)
                if MB == 2:
                    acc1[i] = T.float32(0)
            for kt in range(KT):
                s = T.meta_var(kt % S)
                full.wait(s, (kt // S) & 1)
                T.ptx.wgmma.fence.sync.aligned()
                mma_block(acc0, desc_a, desc_b, s, c * ROWS)
                if MB == 2:
                    mma_block(acc1, desc_a, desc_b, s, c * ROWS + WGMMA_M)
                T.ptx.wgmma.commit_group.sync.aligned()
                # Keep this tile's wgmma group in flight; the previous one has now retired, so
                # its stage goes back to the loader.
                T.ptx.wgmma.wait_group.sync.aligned(1)
                if kt > 0:
                    if warp == 0:
                        if lane == 0:
                            empty.arrive((kt - 1) % S)
                if not WS:
                    if c == 0:
                        if warp == 0:
                            if lane == 0:
                                if kt + S - 1 < KT:
                                    load_tile(kt + S - 1)
            T.ptx.wgmma.wait_group.sync.aligned(0)
            store_block(acc0, m0 + c * ROWS)
            if MB == 2:
                store_block(acc1, m0 + c * ROWS + WGMMA_M)

        if WS:
            if wg == C:
                if REBALANCE:
                    set_regs_dec(PRODUCER_REGS)
                if warp == 0:
                    if lane == 0:
                        for j in range(KT):
                            load_tile(j)
            else:
                if REBALANCE:
                    set_regs_inc(CONSUMER_REGS)
                consume(wg)
        else:
            if wg == 0:
                if warp == 0:
                    if lane == 0:
                        for j in T.unroll(PRE):
                            load_tile(j)
            consume(wg)
    # fmt: on
    return main
