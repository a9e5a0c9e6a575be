"""The Hopper kernel's warp roles: who walks which tiles, and what each does with a tile.

* The producer warpgroup (warp_specialized: after the consumers; registers given back with
  setmaxnreg.dec) has one thread issue every load: the skeleton's producer loop over the
  cluster's tiles, or the one tile's k-tiles.
* A consumer warpgroup (setmaxnreg.inc where the plan rebalances registers) allocates its
  fragments and descriptor registers once, then for each of its tiles runs the mainloop and the
  tile's epilogue (`tile_epilogue`: serial split-K, parking for the DSMEM reduction, the staged "tma"
  or "tma_chunked" stores, or the register stores; a fused epilogue is applied to the fragments
  in place before they are staged, while the register stores and the reductions apply it as they
  store). Its tiles: the one tile of a CTA, the persistent loop over the cluster's tiles (the
  skeleton's), or, ping-pong (persistent, 2 consumers), every other tile: consumer c takes the
  CTA's tiles c, c+2, ...; its mainloop starts once the other consumer has waited for all the
  stages of the tile before (the `order` barrier pair), so the ring is consumed in order and one
  consumer's epilogue overlaps the other's MMAs. Without a producer, the prefetching thread
  starts each tile's ring first.
* The epilogue warpgroup (after the producer): warp c stores consumer c's staged tiles, walking
  them in the consumer's order.

`Roles.trace` builds the role macros from the plan, the skeleton and the kernel body's `Frame`,
composing the bundles of the other concerns.
"""

# The @T.inline macros are parsed by TVMScript, which reads parameter annotations as TIR types;
# they stay unannotated.
# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tirtune.kernels.hopper.epilogue import Epilogue
from tirtune.kernels.hopper.frame import Frame
from tirtune.kernels.hopper.loads import Loads
from tirtune.kernels.hopper.mma import Mma
from tirtune.kernels.hopper.plan import WGMMA_M, KernelPlan
from tirtune.kernels.hopper.splitk import SplitK
from tirtune.kernels.hopper.staging import Staging
from tirtune.kernels.skeleton import Skeleton, raster

__all__ = ["Roles"]


@dataclass(frozen=True, slots=True)
class Roles:
    """The warp roles' macros (TVMScript, called from the kernel body).

    producer(): the producer warpgroup: one thread loads every k-tile of the CTA's tiles.
    consumer(): a consumer warpgroup of a warp-specialized kernel (its registers raised first).
    consume(c): consumer warpgroup c's tiles: mainloop and epilogue each.
    epilogue_warpgroup(): warp c (lane 0) stores consumer c's staged tiles.
    """

    producer: Any
    consumer: Any
    consume: Any
    epilogue_warpgroup: Any

    @classmethod
    def trace(
        cls,
        T: Any,
        p: KernelPlan,
        sk: Skeleton,
        f: Frame,
        loads: Loads,
        mma: Mma,
        epilogue: Epilogue,
        staging: Staging,
        splitk: SplitK,
    ) -> Roles:
        C, KT, MB, ROW_BASE = p.consumers, p.cta_k_tiles, p.m_blocks, p.row_base
        WS, PERSIST, PINGPONG, REBALANCE = p.warp_specialized, p.persistent, p.pingpong, p.rebalances_registers
        SPLIT, SERIAL, EWG, TAIL = p.split_k, p.serial_split, p.epilogue_warpgroup, p.split_tail
        TMA_EPI, CHUNKED = p.epilogue == "tma", p.epilogue == "tma_chunked"
        sched = sk.schedule
        NCL, ITERS, CTILES = sched.clusters, sched.iterations, sched.tiles
        set_regs_dec = T.ptx["setmaxnreg.dec.sync.aligned.u32"]
        set_regs_inc = T.ptx["setmaxnreg.inc.sync.aligned.u32"]
        order, wg, warp, lane, rank, cid, m0, n0 = f.order, f.wg, f.warp, f.lane, f.rank, f.cid, f.m0, f.n0
        load_tile, load_tile_at, prologue = loads.load_tile, loads.load_tile_at, loads.prologue
        # Block scales (FP8): the k loop that scales each k-tile's product (its fragments hold the
        # product and the scales after the sums: `Mma.fragment_regs`).
        mainloop, FRAG = (mma.block_mainloop if p.block_scaled else mma.mainloop), mma.fragment_regs
        store_block, park, serial_epilogue = epilogue.store_block, splitk.park, splitk.serial_epilogue
        fuse_block, FUSED = epilogue.fuse_block, not p.fused.is_none
        tma_epilogue, chunked_epilogue = staging.tma_epilogue, staging.chunked_epilogue
        drain_tile, stores_read = staging.drain_tile, staging.stores_read
        # stream_k: the CTA's share [G0, G1) of the stream of k-tiles (tile t's k-tile kt is
        # t * K_TILES + kt) and the most tiles it touches (plan.stream_span, plan.stream_units).
        STREAM, K_TILES, UNITS = p.stream_k, p.k_tiles, p.stream_share_units if p.stream_k else 0
        G0: Any = f.bx * p.stream_iterations // sched.ctas if STREAM else None
        G1: Any = (f.bx + 1) * p.stream_iterations // sched.ctas if STREAM else None
        # stream_k_scope "tail": the data-parallel rounds before the share, each CTA's whole tiles
        # r * CTAs + bx at ring positions r * K_TILES, and the shared stream's first tile.
        ROUNDS, FIRST = (p.stream_rounds, p.stream_first_tile) if STREAM else (0, 0)
        mainloop_span, stream_hand, stream_take = mma.mainloop_span, splitk.stream_hand, splitk.stream_take

        def piece(u: Any) -> tuple[Any, Any, Any, Any]:
            # stream_k: the u-th tile (of the stream) the CTA's share touches, the k-tiles [kb, ke)
            # of it the share holds (plan.stream_pieces; only where t * K_TILES < G1), and the ring
            # position of its first k-tile (after the data-parallel rounds' tiles).
            t = G0 // K_TILES + u
            kb = T.max(G0, t * K_TILES) - t * K_TILES
            return t, kb, T.min(G1, t * K_TILES + K_TILES) - t * K_TILES, ROUNDS * K_TILES + t * K_TILES + kb - G0

        def tile_origin(cid: Any, it: Any, rank: Any) -> tuple[Any, Any]:
            # The it-th tile of cluster cid as the shared schedule orders them (for the ping-pong
            # consumers, which walk every other tile; the other loops are the skeleton's).
            tm, tn = raster(T, cid + it * NCL, sched.grid_m, sched.grid_n, sched.raster_group)
            return p.cta_origin(tm, tn, rank)

        # fmt: off
        @T.inline
        def store_fragments(c, acc0, acc1, m0, n0):
            # The register epilogue: consumer c's one or two m64 blocks straight to D.
            store_block(acc0, m0 + c * ROW_BASE, n0)
            if MB == 2:
                store_block(acc1, m0 + c * ROW_BASE + WGMMA_M, n0)

        @T.inline
        def fuse_fragments(c, acc0, acc1, m0, n0):
            # The fused epilogue on consumer c's fragments, in place, before they are staged.
            fuse_block(acc0, m0 + c * ROW_BASE, n0)
            if MB == 2:
                fuse_block(acc1, m0 + c * ROW_BASE + WGMMA_M, n0)

        @T.inline
        def tile_epilogue(c, acc0, acc1, m0, n0, nt):
            # nt: the consumer's tiles before this one (the epilogue warpgroup's handover counts).
            if TAIL:
                # split_k_scope "tail": a tail tile's CTAs reduce in turn; a whole wave's tile
                # is stored from its registers.
                if f.bx >= p.dp_tiles:
                    serial_epilogue(c, acc0, acc1, m0, n0)
                else:
                    store_fragments(c, acc0, acc1, m0, n0)
            elif SERIAL:
                serial_epilogue(c, acc0, acc1, m0, n0)
            elif SPLIT > 1:
                park(c, acc0, acc1)
            elif TMA_EPI:
                if FUSED:
                    fuse_fragments(c, acc0, acc1, m0, n0)
                tma_epilogue(c, acc0, acc1, m0, n0, nt)
            elif CHUNKED:
                if FUSED:
                    fuse_fragments(c, acc0, acc1, m0, n0)
                chunked_epilogue(c, acc0, acc1, m0, n0, nt)
            else:
                store_fragments(c, acc0, acc1, m0, n0)

        @T.inline
        def consume_tile(c, acc0, acc1, desc_a, desc_b, it, tm, tn):
            # One tile of the persistent loop; `it` places its k-tiles in the ring.
            tm0, tn0 = T.meta_var(p.cta_origin(tm, tn, rank))
            if not WS:
                # The prefetching thread starts each tile's ring (its stages were released by the
                # previous tile's consumers).
                prologue(c, it * KT, tm0, tn0)
            mainloop(c, acc0, acc1, desc_a, desc_b, it * KT, tm0, tn0)
            tile_epilogue(c, acc0, acc1, tm0, tn0, it)

        @T.inline
        def for_each_piece(body, args):
            # stream_k: the CTA's data-parallel tiles (stream_k_scope "tail"), then each tile its
            # share touches, in order, with the k-tiles [kb, ke) of it the share holds; the
            # producer and the consumers walk the same pieces.
            if ROUNDS > 0:
                for r in range(ROUNDS):
                    tile = r * sched.ctas + f.bx
                    tm, tn = T.meta_var(raster(T, tile, sched.grid_m, sched.grid_n, sched.raster_group))
                    body(*args, r, 0, K_TILES, r * K_TILES, tm, tn)
            for u in range(UNITS):
                t, kb, ke, j0 = T.meta_var(piece(u))
                if t * K_TILES < G1:
                    # Two spellings, not `tile = FIRST + t`: an assignment here becomes a binding of
                    # its own in the kernel, and stream_k_scope "all" keeps its source byte for byte.
                    tm, tn = T.meta_var(
                        raster(T, FIRST + t, sched.grid_m, sched.grid_n, sched.raster_group) if ROUNDS > 0
                        else raster(T, t, sched.grid_m, sched.grid_n, sched.raster_group)
                    )
                    body(*args, ROUNDS + u, kb, ke, j0, tm, tn)

        @T.inline
        def consume_piece(c, acc0, acc1, desc_a, desc_b, u, kb, ke, j0, tm, tn):
            # stream_k: a piece that starts mid-tile (the share's first) goes to CTA bx - 1 as a
            # partial tile; one that ends mid-tile (the share's last) waits for CTA bx + 1's
            # partial of the same tile (handed over as soon as its share begins), adds it and
            # stores the tile; a whole tile is stored as it is.
            tm0, tn0 = T.meta_var(p.cta_origin(tm, tn, rank))
            mainloop_span(c, acc0, acc1, desc_a, desc_b, j0, ke - kb, tm0, tn0)
            if kb > 0:
                stream_hand(c, acc0, acc1)
            else:
                if ke < K_TILES:
                    stream_take(c, acc0, acc1)
                tile_epilogue(c, acc0, acc1, tm0, tn0, u)

        @T.inline
        def produce_piece(u, kb, ke, j0, tm, tn):
            # stream_k: the piece's k-tiles at the CTA's next ring positions.
            for i in range(ke - kb):
                load_tile_at(j0 + i, kb + i, tm, tn)

        @T.inline
        def consume(c):
            acc0 = T.alloc_local((FRAG,), "float32")
            if MB == 2:  # a 128-row consumer: a second m64 block with its own accumulators
                acc1 = T.alloc_local((FRAG,), "float32")
            else:
                acc1 = T.meta_var(acc0)  # never read: the macros use it under MB == 2 only
            desc_a = T.alloc_local((1,), "uint64")
            desc_b = T.alloc_local((1,), "uint64")
            if STREAM:
                for_each_piece(consume_piece, (c, acc0, acc1, desc_a, desc_b))
            elif PINGPONG:
                # Consumer c computes this CTA's tiles c, c+2, ...; its mainloop starts once the
                # other consumer has all the stages of the tile before (so the two never wait on
                # the ring out of order), and its epilogue overlaps the other's mainloop.
                for t in range((ITERS + 1) // 2):
                    if cid + (2 * t + c) * NCL < CTILES:
                        tm0, tn0 = T.meta_var(tile_origin(cid, 2 * t + c, rank))
                        if 2 * t + c > 0:
                            order.wait(1 - c, ((2 * t + c - 1) // 2) & 1)
                        mainloop(c, acc0, acc1, desc_a, desc_b, (2 * t + c) * KT, tm0, tn0)
                        tile_epilogue(c, acc0, acc1, tm0, tn0, t)
            elif PERSIST:
                sk.for_each_tile(cid, consume_tile, (c, acc0, acc1, desc_a, desc_b))
            else:
                mainloop(c, acc0, acc1, desc_a, desc_b, 0, m0, n0)
                tile_epilogue(c, acc0, acc1, m0, n0, 0)
            if (TMA_EPI or CHUNKED) and not EWG:
                stores_read()  # shared memory stays valid until the last stores have read it

        @T.inline
        def drain_cta_tile(c, it, tm, tn):
            tm0, tn0 = T.meta_var(p.cta_origin(tm, tn, rank))
            drain_tile(c, it, tm0, tn0)

        @T.inline
        def drain(c):
            # The same tiles in the same order as consumer c.
            if PINGPONG:
                for t in range((ITERS + 1) // 2):
                    if cid + (2 * t + c) * NCL < CTILES:
                        tm0, tn0 = T.meta_var(tile_origin(cid, 2 * t + c, rank))
                        drain_tile(c, t, tm0, tn0)
            elif PERSIST:
                sk.for_each_tile(cid, drain_cta_tile, (c,))
            else:
                drain_tile(c, 0, m0, n0)

        @T.inline
        def consumer():
            if REBALANCE:
                set_regs_inc(p.consumer_regs)
            consume(wg)

        @T.inline
        def producer():
            if REBALANCE:
                set_regs_dec(p.producer_regs)
            if warp == 0:
                if lane == 0:
                    if STREAM:
                        for_each_piece(produce_piece, ())
                    elif PERSIST:
                        sk.produce_tiles(cid, load_tile_at)
                    else:
                        for j in range(f.k_count):
                            load_tile(j, j, m0, n0)

        @T.inline
        def epilogue_warpgroup():
            # Warp c serves consumer c.
            if REBALANCE:
                set_regs_dec(p.producer_regs)
            for c in range(C):
                if warp == c:
                    if lane == 0:
                        drain(c)
        # fmt: on

        return cls(producer, consumer, consume, epilogue_warpgroup)
