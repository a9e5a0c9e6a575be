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
* Epilogue "register": the fp32 fragment goes straight from registers to global memory,
  converted to the output dtype and guarded on M and N. Epilogue "tma": each consumer warpgroup
  packs its fragment to 16-bit pairs and writes it with stmatrix into a shared-memory staging
  tile (64x64 boxes, 128B-swizzled), fences the async proxy, and one thread TMA-stores the boxes
  (TMA clips the out-of-bounds part of a box, so tails stay correct); before the next tile
  overwrites the staging tile, that thread waits for the stores to have read it
  (cp.async.bulk.wait_group.read).
* persistent: grid = min(tiles, SMS) CTAs; CTA b computes tiles b, b+grid, ... The ring's stage
  and phase come from a per-CTA running k-tile count (it*k_tiles + kt), so they carry across
  tiles, and the consumers also release the last stage of each tile. raster_group maps the
  linear tile index to (tile_m, tile_n): groups of raster_group tile rows, column-major inside a
  group (1 = row-major), so concurrently running CTAs share A and B tiles in L2.

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
SMS = 132  # streaming multiprocessors of the H200 (and H100 SXM): the persistent grid's cap
STORE_BOX = 64  # the TMA-store epilogue's box: 64 rows x 64 columns (one 128-byte swizzle atom wide)
_AB_NAME = {"float16": "f16", "bfloat16": "bf16"}
# Epilogue helper: two adjacent fp32 accumulators -> one 4-byte store of two 16-bit values. The
# fragment holds column pairs (2*(lane%4), +1), so pairing halves the store instructions.
_STORE2 = {
    "float16": ("tirtune_store_f16x2", "half", "__floats2half2_rn", "half2"),
    "bfloat16": ("tirtune_store_bf16x2", "nv_bfloat16", "__floats2bfloat162_rn", "nv_bfloat162"),
}


# Epilogue helper for stmatrix: two fp32 accumulators -> one 32-bit word of two 16-bit values.
_PACK2 = {
    "float16": ("tirtune_pack_f16x2", "__floats2half2_rn", "half2"),
    "bfloat16": ("tirtune_pack_bf16x2", "__floats2bfloat162_rn", "nv_bfloat162"),
}


def _pack2_source(dtype: str) -> tuple[str, str]:
    name, convert, pair = _PACK2[dtype]
    source = (f"__forceinline__ __device__ unsigned int {name}(float lo, float hi) {{\n"
              f"  {pair} v = {convert}(lo, hi);\n"
              f"  return *reinterpret_cast<unsigned int*>(&v);\n}}\n")
    return name, source


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
    persistent: bool = False
    raster_group: int = 1
    epilogue: str = "register"

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
    def tiles(self) -> int:
        gm, gn = self.grid
        return gm * gn

    @property
    def ctas(self) -> int:
        """CTAs launched: one per tile, or at most one per SM when persistent."""
        return min(self.tiles, SMS) if self.persistent else self.tiles

    @property
    def tiles_per_cta(self) -> int:
        """Iterations of the persistent loop (the last may be idle on some CTAs)."""
        return -(-self.tiles // self.ctas)

    @property
    def store_boxes(self) -> tuple[int, int]:
        """64x64 boxes of the TMA-store staging tile along M and N."""
        return (self.blk_m // STORE_BOX, self.blk_n // STORE_BOX)

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
        persistent=config.persistent, raster_group=config.raster_group, epilogue=config.epilogue,
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
    PERSIST, G, TILES, GRID, ITERS = p.persistent, p.raster_group, p.tiles, p.ctas, p.tiles_per_cta
    TMA_EPI = p.epilogue == "tma"
    BOX_M, BOX_N = p.store_boxes
    a_layout = mma_shared_layout(DT, SwizzleMode.SWIZZLE_128B_ATOM, (S, BM, BK))
    b_layout = mma_shared_layout(DT, SwizzleMode.SWIZZLE_128B_ATOM, (S, BN, BK))
    d_layout = mma_shared_layout(DT, SwizzleMode.SWIZZLE_128B_ATOM, (BOX_M * BOX_N, STORE_BOX, STORE_BOX))
    # With N even every row starts 4-byte aligned and col (always even) < N implies col+1 < N.
    PAIRED = N % 2 == 0
    store2_name, store2_source = _store2_source(DT)
    pack2_name, pack2_source = _pack2_source(DT)
    wgmma = T.ptx[p.wgmma_name]
    set_regs_dec = T.ptx["setmaxnreg.dec.sync.aligned.u32"]
    set_regs_inc = T.ptx["setmaxnreg.inc.sync.aligned.u32"]
    stmatrix = T.ptx["stmatrix.sync.aligned.m8n8.x4.shared.b16"]
    bulk_commit = T.ptx["cp.async.bulk.commit_group"]
    bulk_wait_read = T.ptx["cp.async.bulk.wait_group.read"]

    def tile_origin(cta: Any, it: Any) -> tuple[Any, Any]:
        # Linear tile index -> (m0, n0): groups of G tile rows, column-major inside a group; the
        # last group may have fewer rows.
        tile = cta + it * GRID
        group = tile // (G * GN)
        rows_in_group = T.min(GM - group * G, G)
        tm = group * G + (tile % (G * GN)) % rows_in_group
        tn = (tile % (G * GN)) // rows_in_group
        return tm * BM, tn * BN

    # fmt: off
    @T.prim_func
    def main(A: T.Buffer((M, K), DT), B: T.Buffer((N, K), DT), D: T.Buffer((M, N), DT)):
        T.device_entry()
        if PERSIST:
            bx = T.cta_id([GRID])
        else:
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
        if TMA_EPI:
            Ds = pool.alloc((BOX_M * BOX_N, STORE_BOX, STORE_BOX), DT, layout=d_layout)
        pool.commit()
        full.init(1)
        empty.init(C)
        T.ptx.fence.mbarrier_init.release.cluster()
        T.cuda.cta_sync()

        if not PERSIST:
            m0 = T.meta_var(bx * BM)
            n0 = T.meta_var(by * BN)

        @T.inline
        def load_atom(j, kt, kk, m0, n0):
            Tx.copy_async(As[j % S, :, kk:kk + ATOM_K], A[m0:m0 + BM, kt * BK + kk:kt * BK + kk + ATOM_K],
                          dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([j % S]))
            Tx.copy_async(Bs[j % S, :, kk:kk + ATOM_K], B[n0:n0 + BN, kt * BK + kk:kt * BK + kk + ATOM_K],
                          dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([j % S]))

        @T.inline
        def load_tile(j, kt, m0, n0):
            # j counts k-tiles loaded by this CTA (stage j%S, use j//S); kt is the k-tile of the
            # output tile at (m0, n0). Wait until every consumer released what stage j%S held
            # (load j-S). The parity starts at 1, which a fresh barrier reports as complete: the
            # first S loads pass.
            empty.wait(j % S, ((j // S) & 1) ^ 1)
            full.arrive(j % S, TX_BYTES)
            # One box per 64-element swizzle atom along K: a box row may span at most 128 B with
            # 128B swizzle, and this keeps the tensor map 2-D whatever K is.
            load_atom(j, kt, 0, m0, n0)
            if BK == 2 * ATOM_K:
                load_atom(j, kt, ATOM_K, m0, n0)

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
        def store_block(acc, row0, n0):
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
        def stage_block(acc, box_row):
            # stmatrix m8n8.x4 writes four 8x8 matrices of 16-bit values: rows 0-7 / 8-15 of the
            # warp's 16 rows times columns 16p..16p+7 / 16p+8..16p+15. In the fragment those are
            # the register pairs (8p, 8p+1), (8p+2, 8p+3), (8p+4, 8p+5), (8p+6, 8p+7); lane l
            # gives the address of row l%8 of matrix l//8.
            for p16 in T.unroll(NACC // 8):
                srow = T.meta_var(16 * warp + 8 * ((lane // 8) & 1) + lane % 8)
                scol = T.meta_var(16 * (p16 % 4) + 8 * (lane // 16))
                stmatrix(Ds.ptr_to([box_row * BOX_N + p16 // 4, srow, scol]),
                         T.cuda.func_call(pack2_name, acc[8 * p16], acc[8 * p16 + 1],
                                          source_code=pack2_source, return_type="uint32"),
                         T.cuda.func_call(pack2_name, acc[8 * p16 + 2], acc[8 * p16 + 3],
                                          source_code=pack2_source, return_type="uint32"),
                         T.cuda.func_call(pack2_name, acc[8 * p16 + 4], acc[8 * p16 + 5],
                                          source_code=pack2_source, return_type="uint32"),
                         T.cuda.func_call(pack2_name, acc[8 * p16 + 6], acc[8 * p16 + 7],
                                          source_code=pack2_source, return_type="uint32"))

        @T.inline
        def tma_epilogue(c, acc0, acc1, m0, n0):
            # The staging rows of consumer c: boxes (c*MB + mb, *). Its previous tile's stores must
            # have read them before they are overwritten.
            if warp == 0:
                if lane == 0:
                    bulk_wait_read(0)
            T.cuda.warpgroup_sync(1 + c)
            stage_block(acc0, c * MB)
            if MB == 2:
                stage_block(acc1, c * MB + 1)
            T.ptx.fence.proxy.async_.shared__cta()
            T.cuda.warpgroup_sync(1 + c)
            if warp == 0:
                if lane == 0:
                    for mb in T.unroll(MB):
                        for nb in T.unroll(BOX_N):
                            r0 = T.meta_var(m0 + c * ROWS + mb * STORE_BOX)
                            c0 = T.meta_var(n0 + nb * STORE_BOX)
                            # With one consumer its box index is a constant: tma_auto must prove
                            # the staging box 128 B aligned, which it cannot through wg * size
                            # for every box size.
                            box = T.meta_var((c * MB + mb) * BOX_N + nb if C > 1 else mb * BOX_N + nb)
                            Tx.copy_async(D[r0:r0 + STORE_BOX, c0:c0 + STORE_BOX], Ds[box, :, :],
                                          dispatch="tma_auto")
                    bulk_commit()

        @T.inline
        def mainloop(c, acc0, acc1, desc_a, desc_b, j0, m0, n0):
            # j0: k-tiles this CTA consumed before this output tile (0 without a persistent loop).
            for i in T.unroll(NACC):
                acc0[i] = T.float32(0)
                if MB == 2:
                    acc1[i] = T.float32(0)
            for kt in range(KT):
                s = T.meta_var((j0 + kt) % S)
                full.wait(s, ((j0 + kt) // S) & 1)
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
                            empty.arrive((j0 + kt - 1) % S)
                if not WS:
                    if c == 0:
                        if warp == 0:
                            if lane == 0:
                                if kt + S - 1 < KT:
                                    load_tile(kt + S - 1, kt + S - 1, m0, n0)
            T.ptx.wgmma.wait_group.sync.aligned(0)
            if PERSIST:
                # The next tile's loads reuse this tile's last stage too.
                if warp == 0:
                    if lane == 0:
                        empty.arrive((j0 + KT - 1) % S)

        @T.inline
        def epilogue(c, acc0, acc1, m0, n0):
            if TMA_EPI:
                tma_epilogue(c, acc0, acc1, m0, n0)
            else:
                store_block(acc0, m0 + c * ROWS, n0)
                if MB == 2:
                    store_block(acc1, m0 + c * ROWS + WGMMA_M, n0)

        @T.inline
        def consume(c):
            acc0 = T.alloc_local((NACC,), "float32")
            if MB == 2:  # a 128-row consumer: a second m64 block with its own accumulators
                acc1 = T.alloc_local((NACC,), "float32")
            else:
                acc1 = T.meta_var(acc0)  # never read: the macros use it under MB == 2 only
            desc_a = T.alloc_local((1,), "uint64")
            desc_b = T.alloc_local((1,), "uint64")
            if PERSIST:
                for it in range(ITERS):
                    if bx + it * GRID < TILES:
                        tm0, tn0 = T.meta_var(tile_origin(bx, it))
                        mainloop(c, acc0, acc1, desc_a, desc_b, it * KT, tm0, tn0)
                        epilogue(c, acc0, acc1, tm0, tn0)
            else:
                mainloop(c, acc0, acc1, desc_a, desc_b, 0, m0, n0)
                epilogue(c, acc0, acc1, m0, n0)
            if TMA_EPI:
                # Shared memory must stay valid until the last stores have read it.
                if warp == 0:
                    if lane == 0:
                        bulk_wait_read(0)

        if WS:
            if wg == C:
                if REBALANCE:
                    set_regs_dec(PRODUCER_REGS)
                if warp == 0:
                    if lane == 0:
                        if PERSIST:
                            for it in range(ITERS):
                                if bx + it * GRID < TILES:
                                    pm0, pn0 = T.meta_var(tile_origin(bx, it))
                                    for kt in range(KT):
                                        load_tile(it * KT + kt, kt, pm0, pn0)
                        else:
                            for j in range(KT):
                                load_tile(j, j, m0, n0)
            else:
                if REBALANCE:
                    set_regs_inc(CONSUMER_REGS)
                consume(wg)
        else:
            if wg == 0:
                if warp == 0:
                    if lane == 0:
                        for j in T.unroll(PRE):
                            load_tile(j, j, m0, n0)
            consume(wg)
    # fmt: on
    return main
