"""The Hopper (sm_90a) GEMM kernel, hopper-gemm/5: D = A @ B.T with TMA, an mbarrier ring, wgmma.

A (M,K) and B (N,K) are row-major (K-major) and D (M,N) has the problem's output dtype (its own,
bf16 for e4m3 operands); the product accumulates in fp32 registers. One CTA computes one
blk_m x blk_n tile of D at a time:

* Shared memory holds a ring of `stages` stages, each an A tile (blk_m x blk_k) and a B tile
  (blk_n x blk_k) in the 128B-swizzled K-major layout (blk_k 128 or 256: two or four 128-byte
  swizzle atoms side by side, or one or two of e4m3), then the optional output staging, after the
  barriers.
* Each stage has a `full` barrier (one arrive.expect_tx by the loading thread, completed by the
  TMA bytes) and an `empty` barrier (one arrive per consumer warpgroup of the tile, in every CTA
  of the cluster, once its wgmma reads of the stage have retired).
* warp_specialized: an extra producer warpgroup has one thread issue every load; the consumer
  warpgroups only wait, multiply and release; an optional epilogue warpgroup stores their staged
  output. Otherwise the consumers load their own ring ahead of the MMAs.
* persistent: min(tiles, SMs) CTAs (whole clusters, as many as fit in the GPCs) walk the cluster
  tiles in raster order; the ring's stage and phase come from a per-CTA running k-tile count, so
  they carry across tiles. Clusters (2 or 4 CTAs along M or N) share the other operand's tile by
  multicast; split-K spreads a tile's k-tiles over split_k CTAs. Barriers are initialised before
  a cluster barrier, and a final one keeps every CTA's shared memory alive until its peers are
  done with it.
* Tails: TMA zero-fills the part of a box past M, N and K (and still counts its bytes), so partial
  tiles add zeros; the problem size is baked in at compile time (one build per problem).
* A fused epilogue (core/epilogue.py) adds its operands after D (bias, residual, scales: plain
  global loads where D is written, `epilogue.py`); a kernel without one takes (A, B, D) as before.

The kernel by concern, each module's docstring saying the rest:

    plan.py      KernelPlan: everything derived from (config, problem) in Python
    frame.py     Frame: the buffers, barriers and thread coordinates the kernel body makes
    loads.py     TMA loads, multicast slices, one-row operands, k rotation, the thread loader
    mma.py       wgmma steps, the k-tile, the consumers' mainloop, trim and peel
    epilogue.py  the register epilogue (fragment stores, swapped stores)
    staging.py   the staged epilogues (stmatrix, TMA stores, chunks, tail boxes) and the
                 epilogue warpgroup's handover
    splitk.py    split-K: the cluster reduction through DSMEM and the serial workspace
    roles.py     the warp roles: producer, consumers (one tile, persistent, ping-pong), storer

and the skeleton shared with the Blackwell branch (`tirtune.kernels.skeleton`): the plan's common
part and tile schedule, the swizzled ring in the shared-memory pool, the ring's bookkeeping,
barrier publication, the raster mapping and persistent loops, the producer's loop, the thread
loader's guarded copy. Here, in `main`, the kernel body: it creates what TVMScript names after
its variables (the operands' views, the CTA and thread indices, the barriers, the tiles), hands
them to the bundles in a `Frame`, and composes the bundles' macros into the warp roles.
"""

# The kernel body is TVMScript, parsed by TVM: its T.Buffer(...) parameters are what TVMScript
# expects, not typed Python.
# mypy: disable-error-code="valid-type"
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from tirtune.core.config import Config
from tirtune.core.problem import Problem
from tirtune.kernels.hopper.epilogue import Epilogue, declare_operands
from tirtune.kernels.hopper.frame import Frame, FusedOperands
from tirtune.kernels.hopper.loads import Loads
from tirtune.kernels.hopper.mma import Mma
from tirtune.kernels.hopper.plan import STORE_BOX, TEMPLATE_NAME, KernelPlan, plan
from tirtune.kernels.hopper.roles import Roles
from tirtune.kernels.hopper.splitk import SplitK
from tirtune.kernels.hopper.staging import Staging
from tirtune.kernels.skeleton import WARPGROUP, Skeleton
from tirtune.space.hopper.rules import CONFIG_RULES, ConfigRule

__all__ = ["TEMPLATE_NAME", "KernelPlan", "build", "plan", "ring_tiles"]

logger = logging.getLogger(__name__)


def build(config: Config, problem: Problem, config_rules: Sequence[ConfigRule] = CONFIG_RULES) -> Any:
    """The TIRx PrimFunc of this (config, problem): call it "main" in the IRModule.

    Raises SpaceError when the pair breaks a validity rule of the Hopper space (`config_rules`:
    its config rules unless told otherwise, `plan`).
    """
    p = plan(config, problem, config_rules)
    logger.debug("tracing %s for %s", config.label(), problem)
    return _trace(p)


def ring_tiles(sk: Skeleton, pool: Any, p: KernelPlan) -> tuple[Any, Any, Any, Any, Any]:
    """The shared-memory tiles after the barriers, (As, Bs, Ds, Dt, Red): the ring's A and B tiles,
    the TMA-store epilogues' 64x64 staging boxes, the narrow last box's two buffers a consumer
    ("tma_chunked" with blk_n off the box), split-K's parked fragments ("dsmem": a consumer
    thread's registers, register-major); None where the plan has none."""
    S, BM, BN, BK, C = p.stages, p.blk_m, p.blk_n, p.blk_k, p.consumers
    staged = p.epilogue in ("tma", "tma_chunked")
    staging = (p.staging_boxes, STORE_BOX, STORE_BOX) if staged else None
    if p.split_k > 1 and not p.serial_split:
        As, Bs, Ds, Red = sk.ring_tiles(pool, (S, BM, BK), (S, BN, BK), staging, (p.reduce_regs, C * WARPGROUP))
        return As, Bs, Ds, None, Red
    if p.tail_cols > 0:
        # The narrower last box: tail_cols columns of 64 rows, plain; swapped, D's last tail_cols
        # rows of the tile, 64 columns (128 B) wide, swizzled like the full boxes.
        tail = (2 * C, p.tail_cols, STORE_BOX) if p.swap_ab else (2 * C, STORE_BOX, p.tail_cols)
        As, Bs, Ds, Dt = sk.ring_tiles(
            pool, (S, BM, BK), (S, BN, BK), staging, tail_shape=tail, tail_swizzled=p.swap_ab
        )
        return As, Bs, Ds, Dt, None
    As, Bs, Ds = sk.ring_tiles(pool, (S, BM, BK), (S, BN, BK), staging)
    return As, Bs, Ds, None, None


def _trace(p: KernelPlan) -> Any:
    # TVM is imported here, not at module import: the search space and the rules stay usable
    # (and fast to import) where no TVM is installed.
    from tvm.backend.cuda.lang.pipeline import MBarrier, TMABar
    from tvm.script import tirx as T

    # M and N are the kernel's (with swap_ab: the problem's N and M); PM x PN is D's shape, AR and
    # BR the rows of A and B (PM and PN, but BR = 2N with swiglu).
    K, DT, (PM, PN), (GM, GN) = p.k, p.dtype, p.problem_shape, p.grid
    # D's dtype: the operands' own, bf16 for e4m3 operands.
    OUT = p.out_dtype
    AR, BR = p.gemm_shape
    S, BM, BN, C, NWG, WS = p.stages, p.blk_m, p.blk_n, p.consumers, p.warpgroups, p.warp_specialized
    SWAP, SPLIT, SERIAL, PERSIST, CL = p.swap_ab, p.split_k, p.serial_split, p.persistent, p.cluster
    PINGPONG, EWG, ONE_A, ONE_B = p.pingpong, p.epilogue_warpgroup, p.one_row_a, p.one_row_b
    # The epilogue warpgroup's staged/drained barriers: one per staging buffer of a consumer.
    NBUF = 2 if p.epilogue == "tma_chunked" else 1
    GRID = p.tile_schedule.ctas
    TAIL, DP = p.split_tail, p.dp_tiles
    sk = Skeleton.trace(T, p)
    # The fused epilogue's operands: used in the body, made parameters once it is traced (the
    # body alone does not declare them, so the parser's well-formedness check is run after that,
    # by `with_operands`, for every kernel).
    fused = declare_operands(p)

    # fmt: off
    @T.prim_func(check_well_formed=False)  # type: ignore[untyped-decorator]
    def main(A: T.Buffer((AR, K), DT), B: T.Buffer((BR, K), DT), D: T.Buffer((PM, PN), OUT)):  # type: ignore[no-untyped-def]
        T.device_entry()
        # The kernel's operands: with swap_ab it multiplies B by A (D^T = B A^T).
        if SWAP:
            XA = T.meta_var(B)
            XB = T.meta_var(A)
        else:
            XA = T.meta_var(A)
            XB = T.meta_var(B)
        # The CTA: its grid coordinates, its rank in a cluster (or split), the cluster it belongs
        # to in a persistent grid, and the one tile it computes when it computes one.
        if TAIL:
            # split_k_scope "tail": CTAs [0, DP) take tiles [0, DP) over the whole K; rank r of tail
            # tile i (DP + i in tile order) is CTA DP + i*SPLIT + r, over its share of the k-tiles.
            # Tile t is column t // GM, row t % GM (the 2-D grid's order).
            bx = T.cta_id([p.ctas])
            by = T.meta_var(None)
            rank = T.meta_var(T.max(bx - DP, 0) % SPLIT)
            cid = T.meta_var(None)
            tile = T.meta_var(T.min(bx, DP + T.max(bx - DP, 0) // SPLIT))
            m0 = T.meta_var(tile % GM * BM)
            n0 = T.meta_var(tile // GM * BN)
        elif SPLIT > 1:
            # SPLIT consecutive CTAs along x (a cluster, unless serial) compute one tile; rank r
            # multiplies k-tiles [r*KT, (r+1)*KT).
            bx, by = T.cta_id([GM * SPLIT, GN])
            if SERIAL:
                rank = T.meta_var(bx % SPLIT)
            else:
                rank, _rank_y = T.cta_id_in_cluster([SPLIT, 1])
            cid = T.meta_var(None)
            m0 = T.meta_var(bx // SPLIT * BM)
            n0 = T.meta_var(by * BN)
        elif PERSIST:
            bx = T.cta_id([GRID])
            if CL > 1:
                rank, _rank_y = T.cta_id_in_cluster([CL, 1])
                cid = T.meta_var(bx // CL)
            else:
                rank = T.meta_var(0)
                cid = T.meta_var(bx)
            by, m0, n0 = T.meta_var((None, None, None))
        else:
            bx, by = T.cta_id([GM, GN])
            rank, cid = T.meta_var((None, None))
            m0 = T.meta_var(bx * BM)
            n0 = T.meta_var(by * BN)
        # The k-tiles this CTA multiplies: with split_k_scope "tail", the whole K for a whole
        # wave's tile, 1/SPLIT of it for a tail tile's CTA.
        if TAIL:
            # Rank r of a tail tile: k-tiles [r*KT // SPLIT, (r+1)*KT // SPLIT) (loads.py).
            if p.k_tiles % SPLIT == 0:
                k_count = T.meta_var(T.if_then_else(bx < DP, p.k_tiles, p.cta_k_tiles))
            else:
                k_count = T.meta_var(T.if_then_else(
                    bx < DP, p.k_tiles, (rank + 1) * p.k_tiles // SPLIT - rank * p.k_tiles // SPLIT))
        else:
            k_count = T.meta_var(p.cta_k_tiles)
        wg = T.warpgroup_id([NWG])
        warp = T.warp_id_in_wg([4])
        lane = T.lane_id([32])

        pool = T.SMEMPool()
        full = TMABar(pool, S)
        empty = MBarrier(pool, S)
        if PINGPONG:
            # order[c]: consumer c finished waiting for the stages of its latest tile.
            order = MBarrier(pool, 2)
        else:
            order = T.meta_var(None)
        if EWG:
            # staged[c*NBUF + b]: consumer c wrote its staging buffer b; drained[...]: the epilogue
            # warpgroup's store has read it. Each completes once per use of the buffer.
            staged = MBarrier(pool, C * NBUF)
            drained = MBarrier(pool, C * NBUF)
        else:
            staged, drained = T.meta_var((None, None))
        As, Bs, Ds, Dt, Red = T.meta_var(ring_tiles(sk, pool, p))

        # The concerns' macros, built on what this body made.
        f = T.meta_var(Frame(XA, XB, D, As, Bs, Ds, Dt, Red, full, empty, order, staged, drained,
                             wg, warp, lane, rank, cid, bx, by, m0, n0, k_count, fused))
        loads = T.meta_var(Loads.trace(T, p, sk, f))
        mma = T.meta_var(Mma.trace(T, p, sk.ring, f, loads))
        epilogue = T.meta_var(Epilogue.trace(T, p, f))
        staging = T.meta_var(Staging.trace(T, p, f))
        splitk = T.meta_var(SplitK.trace(T, p, f, epilogue))
        roles = T.meta_var(Roles.trace(T, p, sk, f, loads, mma, epilogue, staging, splitk))

        full.init(1)
        empty.init(p.releasers)
        if PINGPONG:
            order.init(1)
        if EWG:
            staged.init(1)
            drained.init(1)
        if ONE_A:
            loads.zero_ring(As, BM)
        if ONE_B:
            loads.zero_ring(Bs, BN)
        sk.publish_barriers()

        # The warp roles: the producer warpgroup follows the consumers, the epilogue warpgroup
        # the producer; without a producer the consumers load their own ring.
        if WS:
            if wg == C:
                roles.producer()
            else:
                if EWG:
                    if wg == C + 1:
                        roles.epilogue_warpgroup()
                    else:
                        roles.consumer()
                else:
                    roles.consumer()
        else:
            if not PERSIST:
                loads.prologue(wg, 0, m0, n0)
            roles.consume(wg)
        if SPLIT > 1 and not SERIAL:
            splitk.reduce_cluster()
        if CL > 1:
            # No CTA leaves while a peer may still multicast into it or arrive on its barriers.
            T.cuda.cluster_sync()
    # fmt: on
    return with_operands(main, fused)


def with_operands(func: Any, fused: FusedOperands) -> Any:
    """`func` taking the fused epilogue's operands after its own parameters (A, B, D; `func`
    itself without any), checked as the TVMScript parser checks a function it parsed (its
    well-formedness, then TIRx's own rules), now that every buffer its body reads is declared."""
    import tvm

    if fused.params():
        func = tvm.tirx.PrimFunc([*func.params, *fused.params()], func.body, func.ret_type, func.attrs)
    tvm.s_tir.analysis.verify_well_formed(tvm.IRModule.from_expr(func))
    tvm.tirx.analysis.verify_tirx_well_formed(func)
    return func
