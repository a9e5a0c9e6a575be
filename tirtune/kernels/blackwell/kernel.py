"""The Blackwell (sm_100a) GEMM kernel: D = A @ B.T with TMA, tcgen05.mma and TMEM accumulators.

Compile-checked, not yet run on a B200 (tirtune.space.blackwell.STATUS). A (M,K) and B (N,K) are
row-major (K-major), D (M,N) has the problem's dtype, the product accumulates in fp32 in tensor
memory (TMEM). One CTA owns a blk_m x blk_n output tile:

* Shared memory holds a ring of `stages` stages; a stage is one 128 x blk_k A tile per consumer and
  a B tile (blk_n rows, or blk_n/2 with a CTA pair), 128B-swizzled and K-major.
* Four barriers (the seed's V7): `full` (TMA -> MMA: the stage's bytes landed), `empty` (MMA ->
  TMA: tcgen05.commit once the MMAs reading the stage finished), `acc_full` (MMA -> writeback,
  one slot per consumer: the accumulator is complete) and `acc_empty` (writeback -> MMA: TMEM may
  be overwritten).
* Consumer c computes rows [c*128, c*128+128) of the tile into TMEM columns [c*blk_n, (c+1)*blk_n),
  both consumers reading the same B stage (the seed's V9). warp_specialized or not, loader
  "threads" (the seed's V1-V6): `roles.py`.
* cluster=2: two CTAs along M form a tcgen05 CTA pair (cta_group::2, MMA M=256). Each CTA loads its
  own A rows and half of the B rows, all TMA bytes complete on CTA 0's `full` barrier, CTA 0 alone
  issues the MMAs, and their commits are multicast to both CTAs' `empty` and `acc_full`; both
  CTAs' writeback threads release the accumulator on CTA 0's `acc_empty` (the seed's V8).
* persistent: min(tiles, SMs) CTAs (whole pairs) loop over tiles; the barrier phases carry over
  from tile to tile. raster_group maps tile indices as on Hopper (grouped rows, column-major).

TMEM: 512 columns are always allocated, so the accumulator starts at column 0 (a TVM 0.27
pitfall: an allocated address loaded at run time cannot be a buffer's base); another CTA on the
same SM waits in tcgen05.alloc until the holder frees it at exit. Tails: TMA zero-fills loads past
the edges; the problem size is baked in at compile time.

The kernel by concern, as on Hopper (`tirtune.kernels.hopper`), each module's docstring saying
the rest: plan.py (`BlackwellPlan`), frame.py (what the kernel body makes), loads.py (TMA stages,
the thread loader), mma.py (tcgen05.mma issue), epilogue.py (tcgen05.ld, register or TMA
stores), roles.py (the warp roles), and the skeleton shared with Hopper
(`tirtune.kernels.skeleton`). Here, in `main`: the barriers, the ring, TMEM's allocation and
release, and the roles' dispatch.
"""

# The kernel body is TVMScript, parsed by TVM: its T.Buffer(...) parameters are what TVMScript
# expects, not typed Python.
# mypy: disable-error-code="no-untyped-def,untyped-decorator,valid-type"
from __future__ import annotations

import logging
from typing import Any

from tirtune.core.config import Config
from tirtune.core.problem import Problem
from tirtune.kernels.blackwell.epilogue import Epilogue
from tirtune.kernels.blackwell.frame import Frame
from tirtune.kernels.blackwell.loads import Loads
from tirtune.kernels.blackwell.mma import Mma
from tirtune.kernels.blackwell.plan import ARCH, SMS, TEMPLATE_NAME, BlackwellPlan, plan, tx_bytes
from tirtune.kernels.blackwell.roles import Roles
from tirtune.kernels.skeleton import WARPGROUP, Skeleton
from tirtune.space.blackwell.rules import CONSUMER_ROWS, EPILOGUE_CHUNK, TMEM_COLUMNS

__all__ = ["ARCH", "SMS", "TEMPLATE_NAME", "BlackwellPlan", "build", "plan", "tx_bytes"]

logger = logging.getLogger(__name__)

PRODUCER_WARP = 3  # of the producer warpgroup; warps 0..consumers-1 issue the MMAs


def build(config: Config, problem: Problem) -> Any:
    """The TIRx PrimFunc of this (config, problem) for sm_100a: call it "main" in the IRModule.

    Raises SpaceError when the pair breaks a rule of the Blackwell space.
    """
    p = plan(config, problem)
    logger.debug("tracing %s for %s (sm_100a)", config.label(), problem)
    return _trace(p)


def _trace(p: BlackwellPlan) -> Any:
    # TVM is imported here: the space and its rules stay importable where TVM is not installed.
    from tvm.backend.cuda.lang.pipeline import MBarrier, TCGen05Bar, TMABar
    from tvm.script import tirx as T
    from tvm.tirx.layout import S, TCol, TileLayout, TLane

    M, N, K, DT = p.m, p.n, p.k, p.dtype
    BK, ST, C, CG = p.blk_k, p.stages, p.consumers, p.cta_group
    ROWS, BROWS, EPI = CONSUMER_ROWS, p.b_rows, EPILOGUE_CHUNK
    WS, NWG, GRID = p.warp_specialized, p.warpgroups, p.ctas
    TMA_EPI = p.epilogue == "tma"
    sk = Skeleton.trace(T, p)
    alloc = T.ptx[f"tcgen05.alloc.cta_group::{CG}.sync.aligned.shared::cta.b32"]
    dealloc = T.ptx[f"tcgen05.dealloc.cta_group::{CG}.sync.aligned.b32"]
    relinquish = T.ptx[f"tcgen05.relinquish_alloc_permit.cta_group::{CG}.sync.aligned"]
    fence_after = T.ptx["tcgen05.fence::after_thread_sync"]
    proxy_fence = T.ptx["fence.proxy.async.shared::cta"]

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
        else:
            full0, acc_empty0 = T.meta_var((None, None))
        cid = T.meta_var(bx // CG)

        # The concerns' macros, built on what this body made.
        f = T.meta_var(Frame(A, B, D, As, Bs, Ds, tmem, full, empty, acc_full, acc_empty, full0, acc_empty0,
                             wg, warp, lane, rank, cid))
        loads = T.meta_var(Loads.trace(T, p, sk, f))
        mma = T.meta_var(Mma.trace(T, p, sk.ring, f, loads))
        epilogue = T.meta_var(Epilogue.trace(T, p, f))
        roles = T.meta_var(Roles.trace(T, p, sk, f, loads, mma, epilogue))

        # Warp roles: each walks this cluster's tiles (shared schedule and ring).
        if WS:
            if wg == C:
                if warp == PRODUCER_WARP:
                    if T.cuda.elect_sync():
                        roles.producer()
                else:
                    for c in T.unroll(C):
                        if warp == c:
                            if rank == 0:
                                if T.cuda.elect_sync():
                                    roles.mma_issuer(c)
            else:
                for c in T.unroll(C):
                    if wg == c:
                        roles.writeback(c)
        else:
            roles.single()
        if TMA_EPI:
            epilogue.stores_done()
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
