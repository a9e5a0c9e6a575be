"""The Blackwell (sm_100a) GEMM template: D = A @ B.T with TMA, tcgen05.mma and TMEM accumulators.

Compile-checked, not yet run on a B200 (tirtune.space.blackwell.STATUS). A (M,K) and B (N,K) are
row-major (K-major), D (M,N) has the problem's dtype, the product accumulates in fp32 in tensor
memory (TMEM). One CTA owns a blk_m x blk_n output tile:

* Shared memory holds a ring of `stages` stages; a stage is one 128 x blk_k A tile per consumer and
  a B tile (blk_n rows, or blk_n/2 with a CTA pair), 128B-swizzled and K-major.
* Four barriers (the seed's V7): `full` (TMA -> MMA: the stage's bytes landed), `empty` (MMA ->
  TMA: tcgen05.commit once the MMAs reading the stage finished), `acc_full` (MMA -> writeback,
  one slot per consumer: the accumulator is complete) and `acc_empty` (writeback -> MMA: TMEM may
  be overwritten).
* warp_specialized: an extra warpgroup whose warp 3 issues the TMA loads and whose warp c issues
  consumer c's MMAs (one elected thread each); warpgroup c only writes back consumer c's
  accumulator. Otherwise one elected thread of warpgroup 0 loads (up to `stages` k-tiles ahead)
  and issues the MMAs, and every warpgroup then writes back its consumer (the seed's V4-V6).
* loader "threads" (one stage, no producer, no pair): every thread copies 16-byte chunks of the
  k-tile into the swizzled stage, a CTA barrier, one elected thread multiplies, and the next copy
  waits for those MMAs (the seed's V1-V3: synchronous, no overlap).
* Consumer c computes rows [c*128, c*128+128) of the tile into TMEM columns [c*blk_n, (c+1)*blk_n),
  both consumers reading the same B stage (the seed's V9).
* cluster=2: two CTAs along M form a tcgen05 CTA pair (cta_group::2, MMA M=256). Each CTA loads its
  own A rows and half of the B rows, all TMA bytes complete on CTA 0's `full` barrier, CTA 0 alone
  issues the MMAs, and their commits are multicast to both CTAs' `empty` and `acc_full`; both
  CTAs' writeback threads release the accumulator on CTA 0's `acc_empty` (the seed's V8).
* persistent: min(tiles, SMs) CTAs (whole pairs) loop over tiles; the barrier phases carry over
  from tile to tile. raster_group maps tile indices as on Hopper (grouped rows, column-major).
* Epilogue, 64 columns at a time: tcgen05.ld (32x32b.x64) into registers, then "register" (16-byte
  stores to global memory, guarded on M and N) or "tma" (a 128 x 64 swizzled staging chunk per
  consumer, then a TMA store that clips at the edges).

TMEM: 512 columns are always allocated, so the accumulator starts at column 0 (a 0.27 pitfall:
an allocated address loaded at run time cannot be a buffer's base); another CTA on the same SM
waits in tcgen05.alloc until the holder frees it at exit. Tails: TMA zero-fills loads past the
edges; the problem size is baked in at compile time.

Shared with the Hopper branch (`skeleton.py`, DESIGN.md decision 6): the plan's common part
(`GemmPlan`) and the tile schedule (cluster tiles of a CTA pair, capped at SMS CTAs), the swizzled
A/B ring and staging tile in the shared-memory pool, the ring's stage and phase bookkeeping, the
barriers' publication, the raster mapping and the loops over a cluster's tiles (the TMA
producer's included), and the thread loader's guarded 16-byte copy. This branch's own: the
tcgen05 barriers (`empty` committed by the tensor core, `acc_full`/`acc_empty`), TMEM allocation,
the boxes a stage loads (`load_stage`: A per consumer, half of B per CTA of a pair, all bytes on
CTA 0's `full`), the MMA issue (`mma_stage`, `issue_mma`), the warp roles and the epilogue
(`tcgen05.ld`, `writeback`, `store_chunk`).
"""

# The TVMScript kernel body (prim_func, inline macros) is parsed by TVM, not typed Python: its
# unannotated macros and T.Buffer(...) parameters are what TVMScript expects.
# mypy: disable-error-code="no-untyped-def,untyped-decorator,valid-type"
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tirtune.core.config import Config
from tirtune.core.problem import Problem
from tirtune.kernels.skeleton import (
    ATOM_K,
    HALF2,
    WARPGROUP,
    GemmPlan,
    Skeleton,
    TileSchedule,
    copy16_helper,
    plan_fields,
)
from tirtune.space.blackwell_rules import (
    BLACKWELL_CONFIG_RULES,
    BLACKWELL_PROBLEM_RULES,
    CONSUMER_ROWS,
    EPILOGUE_CHUNK,
    TMEM_COLUMNS,
)
from tirtune.space.rules import refuse_if_broken

__all__ = ["ARCH", "SMS", "TEMPLATE_NAME", "BlackwellPlan", "build", "plan"]

logger = logging.getLogger(__name__)

TEMPLATE_NAME = "blackwell_gemm"
ARCH = "sm_100a"  # the target compile_one builds this template for
SMS = 148  # streaming multiprocessors of the B200: the persistent grid's cap
PRODUCER_WARP = 3  # of the producer warpgroup; warps 0..consumers-1 issue the MMAs


@dataclass(frozen=True, slots=True)
class BlackwellPlan(GemmPlan):
    """Everything the kernel needs that follows from (config, problem), computed once in Python:
    the shared part (`GemmPlan`) plus the CTA pair."""

    cta_group: int = 1

    @property
    def b_rows(self) -> int:
        """Rows of B this CTA loads per stage (half of blk_n in a CTA pair)."""
        return self.blk_n // self.cta_group

    @property
    def mma_shape(self) -> tuple[int, int, int]:
        """(M, N, K) of one tcgen05.mma instruction: M spans the CTA pair."""
        return (CONSUMER_ROWS * self.cta_group, self.blk_n, 16)

    @property
    def cluster_tile(self) -> tuple[int, int]:
        return (self.blk_m * self.cta_group, self.blk_n)

    @property
    def tile_schedule(self) -> TileSchedule:
        """Cluster tiles (a CTA pair's 2*blk_m x blk_n, or one CTA's tile): one cluster each, or at
        most one CTA per SM (whole pairs) when persistent."""
        tm, tn = self.cluster_tile
        grid = (-(-self.m // tm), -(-self.n // tn))
        return TileSchedule.of(grid, self.cta_group, self.persistent, SMS, self.raster_group)

    @property
    def tiles(self) -> int:
        """Cluster tiles of the output."""
        return self.tile_schedule.tiles

    @property
    def tiles_per_cluster(self) -> int:
        return self.tile_schedule.iterations

    @property
    def tmem_columns(self) -> int:
        """Columns the accumulators use (the allocation is always all 512)."""
        return self.consumers * self.blk_n

    @property
    def stage_bytes(self) -> int:
        """Bytes TMA delivers into one CTA per stage: whole boxes, out-of-bounds zeros included."""
        return (self.consumers * CONSUMER_ROWS + self.b_rows) * self.blk_k * 2


def plan(config: Config, problem: Problem) -> BlackwellPlan:
    """Check (config, problem) against the Blackwell rules and derive the kernel constants."""
    refuse_if_broken(TEMPLATE_NAME, config, problem, BLACKWELL_PROBLEM_RULES, BLACKWELL_CONFIG_RULES)
    return BlackwellPlan(**plan_fields(config, problem), cta_group=config.cluster)


def build(config: Config, problem: Problem) -> Any:
    """The TIRx PrimFunc of this (config, problem) for sm_100a: call it "main" in the IRModule.

    Raises SpaceError when the pair breaks a rule of the Blackwell space.
    """
    p = plan(config, problem)
    logger.debug("tracing %s for %s (sm_100a)", config.label(), problem)
    return _trace(p)


def tx_bytes(p: BlackwellPlan) -> int:
    """Bytes the `full` barrier (CTA 0's, in a pair) waits for per stage."""
    return p.stage_bytes * p.cta_group


# loader="threads": one 16-byte chunk from global to (swizzled) shared memory, or zeros past the edges.
_COPY16 = copy16_helper("tirtune_bw_copy16", "inside")


def _store8_source(dtype: str) -> tuple[str, str]:
    """Epilogue helper: eight fp32 values -> one 16-byte store of eight 16-bit values."""
    elem, convert, pair = HALF2[dtype]
    name = f"tirtune_store8_{elem}"
    args = ", ".join(f"float v{i}" for i in range(8))
    packs = "".join(f"  {pair} p{i} = {convert}(v{2 * i}, v{2 * i + 1});\n" for i in range(4))
    words = ", ".join(f"*reinterpret_cast<unsigned int*>(&p{i})" for i in range(4))
    source = (
        f"__forceinline__ __device__ void {name}({elem}* dst, {args}) {{\n{packs}"
        f"  *reinterpret_cast<uint4*>(dst) = make_uint4({words});\n}}\n"
    )
    return name, source


# -- the kernel ------------------------------------------------------------------------------------


def _trace(p: BlackwellPlan) -> Any:
    # TVM is imported here: the space and its rules stay importable where TVM is not installed.
    from tvm.backend.cuda.lang.pipeline import MBarrier, TCGen05Bar, TMABar
    from tvm.script import tirx as T
    from tvm.script.tirx import tile as Tx
    from tvm.tirx.layout import S, TCol, TileLayout, TLane, tid_in_wg

    M, N, K, DT = p.m, p.n, p.k, p.dtype
    BN, BK, ST, C, CG = p.blk_n, p.blk_k, p.stages, p.consumers, p.cta_group
    ROWS, BROWS, KT, EPI = CONSUMER_ROWS, p.b_rows, p.k_tiles, EPILOGUE_CHUNK
    WS, NWG, GRID = p.warp_specialized, p.warpgroups, p.ctas
    CTM, CTN = p.cluster_tile
    TX = tx_bytes(p)
    TMA_EPI = p.epilogue == "tma"
    CHUNKS = BN // EPI
    PRE = min(ST, KT)  # k-tiles the single-thread pipeline loads before its first MMA
    THREADS = p.loader == "threads"
    NTHREADS, CK = p.threads, BK // 8  # the copying threads; 16-byte chunks per tile row
    # Every thread copies whole rounds of chunks: C*128 rows of A, and blk_n (a multiple of 64) rows of B.
    assert not THREADS or (C * ROWS * CK % NTHREADS == 0 and BROWS * CK % NTHREADS == 0)
    MASK = 3 if CG == 2 else None  # commits reach both CTAs of a pair
    VEC8 = N % 8 == 0  # every 8-column group of a row starts 16-byte aligned
    sk = Skeleton.trace(T, p)
    ring = sk.ring
    store8_name, store8_source = _store8_source(DT)
    alloc = T.ptx[f"tcgen05.alloc.cta_group::{CG}.sync.aligned.shared::cta.b32"]
    dealloc = T.ptx[f"tcgen05.dealloc.cta_group::{CG}.sync.aligned.b32"]
    relinquish = T.ptx[f"tcgen05.relinquish_alloc_permit.cta_group::{CG}.sync.aligned"]
    fence_after = T.ptx["tcgen05.fence::after_thread_sync"]
    wait_ld = T.ptx["tcgen05.wait::ld.sync.aligned"]
    proxy_fence = T.ptx["fence.proxy.async.shared::cta"]
    bulk_commit = T.ptx["cp.async.bulk.commit_group"]
    bulk_wait_read = T.ptx["cp.async.bulk.wait_group.read"]
    bulk_wait = T.ptx["cp.async.bulk.wait_group"]

    # fmt: off
    @T.prim_func
    def main(A: T.Buffer((M, K), DT), B: T.Buffer((N, K), DT), D: T.Buffer((M, N), DT)):
        T.device_entry()
        bx = T.cta_id([GRID])
        if CG == 2:
            rank, _unused = T.cta_id_in_cluster([2, 1])
        else:
            rank = T.meta_var(0)
        wg = T.warpgroup_id([NWG])
        warp = T.warp_id_in_wg([4])
        lane = T.lane_id([32])

        pool = T.SMEMPool()
        tmem_slot = pool.alloc((1,), "uint32")
        full = TMABar(pool, ST)
        empty = TCGen05Bar(pool, ST)
        acc_full = TCGen05Bar(pool, C)
        acc_empty = MBarrier(pool, C)
        As, Bs, Ds = T.meta_var(sk.ring_tiles(pool, (ST, C, ROWS, BK), (ST, BROWS, BK),
                                              (C, ROWS, EPI) if TMA_EPI else None))
        full.init(1)
        empty.init(C if WS else 1)  # one commit per MMA-issuing thread
        acc_full.init(1)
        acc_empty.init(WARPGROUP * CG)  # every writeback thread of the pair
        if wg == 0:
            if warp == 0:
                alloc(tmem_slot.ptr_to([0]), T.uint32(TMEM_COLUMNS))
        proxy_fence()
        sk.publish_barriers()
        fence_after()
        tmem = T.decl_buffer((ROWS, TMEM_COLUMNS), "float32", scope="tmem", allocated_addr=0,
                             layout=TileLayout(S[(ROWS, TMEM_COLUMNS):(1 @ TLane, 1 @ TCol)]))
        if CG == 2:
            full0 = full.remote_view(0)
            acc_empty0 = acc_empty.remote_view(0)
        cid = T.meta_var(bx // CG)

        @T.inline
        def load_stage(j, kt, tm, tn):
            # k-tile kt of cluster tile (tm, tn) into ring slot j % ST; consumer c's A rows are
            # (c * CG + rank) * 128 past the cluster tile's first row, this CTA's B rows rank * BROWS.
            s = T.meta_var(ring.slot(j))
            bar = T.meta_var(full0.ptr_to([s]) if CG == 2 else full.ptr_to([s]))
            for c in T.unroll(C):
                a0 = T.meta_var(tm * CTM + (c * CG + rank) * ROWS)
                for kk in T.unroll(BK // ATOM_K):
                    k0 = T.meta_var(kt * BK + kk * ATOM_K)
                    Tx.copy_async(As[s, c, :, kk * ATOM_K:kk * ATOM_K + ATOM_K], A[a0:a0 + ROWS, k0:k0 + ATOM_K],
                                  dispatch="tma_auto", cta_group=CG, mbar=bar)
            b0 = T.meta_var(tn * CTN + rank * BROWS)
            for kk in T.unroll(BK // ATOM_K):
                k0 = T.meta_var(kt * BK + kk * ATOM_K)
                Tx.copy_async(Bs[s, :, kk * ATOM_K:kk * ATOM_K + ATOM_K], B[b0:b0 + BROWS, k0:k0 + ATOM_K],
                              dispatch="tma_auto", cta_group=CG, mbar=bar)
            if CG == 2:
                if rank == 0:
                    full0.arrive(s, TX)
            else:
                full.arrive(s, TX)

        @T.inline
        def produce(j, kt, tm, tn):
            # Wait until the MMAs that read slot j % ST (k-tile j - ST) are done; a fresh barrier
            # passes parity 1, so the first ST loads go straight through.
            empty.wait(ring.slot(j), ring.free_phase(j))
            load_stage(j, kt, tm, tn)

        @T.inline
        def mma_stage(c, j, kt):
            # One k-tile of consumer c: tcgen05.mma over each 64-wide swizzle atom of the stage.
            s = T.meta_var(ring.slot(j))
            for kk in T.unroll(BK // ATOM_K):
                Tx.gemm_async(tmem[:, c * BN:c * BN + BN], As[s, c, :, kk * ATOM_K:kk * ATOM_K + ATOM_K],
                              Bs[s, :, kk * ATOM_K:kk * ATOM_K + ATOM_K], accum=(kt * (BK // ATOM_K) + kk != 0),
                              dispatch="tcgen05", cta_group=CG)

        @T.inline
        def store_chunk(c, ch, reg, tm, tn):
            # Thread t of the warpgroup holds row t of the consumer's 128 rows, 64 columns.
            row = T.meta_var(tm * CTM + (c * CG + rank) * ROWS + warp * 32 + lane)
            col0 = T.meta_var(tn * CTN + ch * EPI)
            if TMA_EPI:
                reg16 = T.alloc_local((EPI,), DT)
                Tx.cast(reg16[:], reg[:])
                if warp == 0:
                    if lane == 0:
                        bulk_wait_read(0)  # the previous chunk's store has read the staging tile
                T.cuda.warpgroup_sync(1 + c)
                Tx.copy(Ds[c, warp * 32 + lane, :], reg16[:])
                proxy_fence()
                T.cuda.warpgroup_sync(1 + c)
                if warp == 0:
                    if lane == 0:
                        r0 = T.meta_var(tm * CTM + (c * CG + rank) * ROWS)
                        Tx.copy_async(D[r0:r0 + ROWS, col0:col0 + EPI], Ds[c, :, :], dispatch="tma_auto")
                        bulk_commit()
            elif VEC8:
                if row < M:
                    for q in T.unroll(EPI // 8):
                        if col0 + 8 * q < N:
                            T.evaluate(T.cuda.func_call(
                                store8_name, D.ptr_to([row, col0 + 8 * q]), *[reg[8 * q + i] for i in range(8)],
                                source_code=store8_source))
            else:
                if row < M:
                    for i in T.unroll(EPI):
                        if col0 + i < N:
                            D[row, col0 + i] = T.cast(reg[i], DT)

        @T.inline
        def writeback(c, it, tm, tn):
            # Consumer c's accumulator for this CTA's 128 rows: TMEM -> registers -> D.
            acc_full.wait(c, it & 1)
            fence_after()
            for ch in T.unroll(CHUNKS):
                reg = T.alloc_local((EPI,), "float32")
                reg_wg = reg.view(ROWS, EPI, layout=TileLayout(S[(ROWS, EPI):(1 @ tid_in_wg, 1)]))
                Tx.wg.copy_async(reg_wg[:], tmem[:, c * BN + ch * EPI:c * BN + ch * EPI + EPI])
                wait_ld()
                if ch == CHUNKS - 1:
                    # The accumulator is in registers: the MMAs of the next tile may overwrite it.
                    if CG == 2:
                        acc_empty0.arrive(c)
                    else:
                        acc_empty.arrive(c)
                store_chunk(c, ch, reg, tm, tn)

        @T.inline
        def issue_mma(c, it, tm, tn):
            # The elected thread of consumer c's MMA warp (CTA 0 of a pair): one tile's k-loop
            # (the tile's ring position `it` is all it needs, not where the tile lies).
            acc_empty.wait(c, (it & 1) ^ 1)
            fence_after()
            for kt in range(KT):
                j = T.meta_var(it * KT + kt)
                full.wait(ring.slot(j), ring.phase(j))
                fence_after()
                mma_stage(c, j, kt)
                empty.arrive(ring.slot(j), cta_group=CG, cta_mask=MASK)
            acc_full.arrive(c, cta_group=CG, cta_mask=MASK)

        @T.inline
        def single_thread_tile(it, tm, tn):
            # Not warp-specialized: one thread loads up to ST k-tiles ahead and issues every MMA.
            for c in T.unroll(C):
                acc_empty.wait(c, (it & 1) ^ 1)
            for kt in T.unroll(PRE):
                produce(it * KT + kt, kt, tm, tn)
            for kt in range(KT):
                j = T.meta_var(it * KT + kt)
                full.wait(ring.slot(j), ring.phase(j))
                fence_after()
                for c in T.unroll(C):
                    mma_stage(c, j, kt)
                empty.arrive(ring.slot(j), cta_group=1)
                if kt + ST < KT:
                    produce(j + ST, kt + ST, tm, tn)
            for c in T.unroll(C):
                acc_full.arrive(c, cta_group=1)

        @T.inline
        def thread_load(tm, tn, kt):
            # loader="threads" (the seed's V1-V3): thread t of all C*128 copies 16-byte chunks t,
            # t + C*128, ... of the A and B tiles into the (swizzled) single stage; chunks past
            # M, N or K are zeros (K is a multiple of 8, so a chunk is wholly in or out).
            tid = T.meta_var(wg * WARPGROUP + warp * 32 + lane)
            for i in T.unroll(C * ROWS * CK // NTHREADS):
                q = T.meta_var(i * NTHREADS + tid)
                r = T.meta_var(q // CK)
                col = T.meta_var(q % CK * 8)
                sk.copy_chunk(_COPY16, As.ptr_to([0, r // ROWS, r % ROWS, col]), A, tm * CTM + r, M, kt, col)
            for i in T.unroll(BROWS * CK // NTHREADS):
                q = T.meta_var(i * NTHREADS + tid)
                r = T.meta_var(q // CK)
                col = T.meta_var(q % CK * 8)
                sk.copy_chunk(_COPY16, Bs.ptr_to([0, r, col]), B, tn * CTN + r, N, kt, col)

        @T.inline
        def threads_tile(it, tm, tn):
            # Synchronous: every thread copies k-tile kt once the MMAs of kt-1 have read the one
            # stage, the copies are fenced to the async proxy tcgen05 reads through, and one
            # elected thread multiplies; its commit frees the stage again.
            for kt in range(KT):
                j = T.meta_var(it * KT + kt)
                empty.wait(ring.slot(j), ring.free_phase(j))
                thread_load(tm, tn, kt)
                proxy_fence()
                T.cuda.cta_sync()
                if wg == 0:
                    if warp == 0:
                        if T.cuda.elect_sync():
                            if kt == 0:
                                for c in T.unroll(C):
                                    acc_empty.wait(c, (it & 1) ^ 1)
                            fence_after()
                            for c in T.unroll(C):
                                mma_stage(c, j, kt)
                            empty.arrive(ring.slot(j), cta_group=1)
                            if kt == KT - 1:
                                for c in T.unroll(C):
                                    acc_full.arrive(c, cta_group=1)
                        T.cuda.warp_sync()

        @T.inline
        def mono_tile(it, tm, tn):
            # Not warp-specialized: load and multiply (all threads copying, or one thread issuing),
            # then every consumer warpgroup writes its accumulator back.
            if THREADS:
                threads_tile(it, tm, tn)
            else:
                if wg == 0:
                    if warp == 0:
                        if T.cuda.elect_sync():
                            single_thread_tile(it, tm, tn)
                        T.cuda.warp_sync()
            for c in T.unroll(C):
                if wg == c:
                    writeback(c, it, tm, tn)

        # Warp roles: each walks this cluster's tiles (shared schedule and ring).
        if WS:
            if wg == C:
                if warp == PRODUCER_WARP:
                    if T.cuda.elect_sync():
                        sk.produce_tiles(cid, produce)
                else:
                    for c in T.unroll(C):
                        if warp == c:
                            if rank == 0:
                                if T.cuda.elect_sync():
                                    sk.for_each_tile(cid, issue_mma, (c,))
            else:
                for c in T.unroll(C):
                    if wg == c:
                        sk.for_each_tile(cid, writeback, (c,))
        else:
            sk.for_each_tile(cid, mono_tile, ())
        if TMA_EPI:
            if warp == 0:
                if lane == 0:
                    bulk_wait(0)  # shared memory stays valid until the last store is done
        # Lanes left the elected-thread loops at different times; the .aligned cluster barrier (and
        # tcgen05.dealloc) need whole, converged warps.
        T.cuda.warp_sync()
        if CG == 2:
            T.cuda.cluster_sync()  # neither CTA frees TMEM while the pair's MMAs may use it
        else:
            T.cuda.cta_sync()
        if wg == 0:
            if warp == 0:
                relinquish()
                dealloc(T.uint32(0), T.uint32(TMEM_COLUMNS))
    # fmt: on
    return main
