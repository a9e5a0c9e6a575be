"""The Hopper kernel's staged epilogues: fragments through shared memory to TMA stores.

* "tma": each consumer warpgroup packs its fragment to 16-bit pairs and writes it with stmatrix
  into a shared-memory staging tile (64x64 boxes, 128B-swizzled), fences the async proxy, and one
  thread TMA-stores the boxes (TMA clips the part of a box past M and N, so tails stay correct).
  Before the next tile overwrites the staging tile, that thread waits until the stores have read
  it (cp.async.bulk.wait_group.read).
* "tma_chunked": the same, one 64x64 box at a time through two staging buffers per consumer: box
  i is written while box i-1's store is in flight (wait_group.read 1; 0 before a tile's first
  box), so 16 KiB a consumer replace the tile. With blk_n off the 64-wide box, each m-block's last
  box is `tail_cols` wide, staged unswizzled in its own two buffers (Dt, rows 2*tail bytes apart)
  and stored through its own narrower tensor map; a tail of 8 (mod 16) columns ends with one
  stmatrix x2.
* swap_ab ("tma_chunked" only): the kernel's tile is D's transpose, so each 8x8 matrix goes out
  through stmatrix .trans: box (mb, nb) holds D's rows n0 + 64*nb.. (the kernel's columns, the
  problem's M) by D's columns m0 + 64*mb.. (the kernel's rows), 128B-swizzled like the unswapped
  boxes, and is stored at D[n0 + 64*nb, m0 + c*row_base + 64*mb]. The narrower last box is the
  last `tail_cols` of D's rows: a TAIL x 64 buffer, swizzled the same way (its rows are 128 bytes),
  stored through its own map.
* epilogue warpgroup: an extra warpgroup whose warp c stores consumer c's staged output.
  Consumer c still writes its fragment with stmatrix (registers cannot move between
  warpgroups), fences, and arrives on `staged` (one barrier per staging buffer); warp c's lane 0
  waits for it, TMA-stores the buffer, waits until the store has read it and arrives on
  `drained`, which the consumer waits for before its next write to that buffer (the n-th use of
  a buffer waits for parity n & 1; a fresh barrier passes the first). The consumer never waits
  for a store; the epilogue warp walks the consumer's tiles in the same order (`drain_tile`).

Named barrier 1 + c syncs consumer c's warpgroup around its writes of the staging buffers.
"""

# The @T.inline macros are parsed by TVMScript, which reads parameter annotations as TIR types;
# they stay unannotated.
# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tirtune.kernels.hopper.frame import Frame
from tirtune.kernels.hopper.plan import STORE_BOX, KernelPlan
from tirtune.kernels.skeleton import HALF2, PTX_TYPE

__all__ = ["Staging", "pack2_helper"]


def pack2_helper(dtype: str) -> tuple[str, str]:
    """Epilogue helper for stmatrix: two fp32 accumulators -> one 32-bit word of two 16-bit values."""
    _, convert, pair = HALF2[dtype]
    name = f"tirtune_pack_{PTX_TYPE[dtype]}x2"
    source = (
        f"__forceinline__ __device__ unsigned int {name}(float lo, float hi) {{\n"
        f"  {pair} v = {convert}(lo, hi);\n"
        f"  return *reinterpret_cast<unsigned int*>(&v);\n}}\n"
    )
    return name, source


@dataclass(frozen=True, slots=True)
class Staging:
    """The staged epilogues' macros (TVMScript). c is the consumer warpgroup, (m0, n0) the tile's
    origin, nt the consumer's tiles before this one (the epilogue warpgroup's handover counts).

    tma_epilogue(c, acc0, acc1, m0, n0, nt): "tma": stage the consumer's whole rows, then store them
        (or hand them to the epilogue warpgroup).
    chunked_epilogue(c, acc0, acc1, m0, n0, nt): "tma_chunked": box by box through two buffers.
    drain_tile(c, nt, m0, n0): the epilogue warpgroup's warp c: store consumer c's nt-th tile as it
        is staged, handing each buffer back once its store has read it.
    stores_read(): one thread waits until the CTA's last stores have read shared memory.
    """

    tma_epilogue: Any
    chunked_epilogue: Any
    drain_tile: Any
    stores_read: Any

    @classmethod
    def trace(cls, T: Any, p: KernelPlan, f: Frame) -> Staging:
        from tvm.script.tirx import tile as Tx

        # DT: D's dtype (the staging tiles' too), the operands' own or bf16 for e4m3 operands.
        C, MB, NACC, ROW_BASE, DT = p.consumers, p.m_blocks, p.acc_regs, p.row_base, p.out_dtype
        # swap_ab: the staged boxes are D's transpose of the fragment (stmatrix .trans), stored at
        # D's (row, col) = the kernel's (col, row).
        SWAP = p.swap_ab
        TMA_EPI, CHUNKED, STORE_OPTS = p.epilogue == "tma", p.epilogue == "tma_chunked", p.store_options()
        _, BOX_N = p.store_boxes
        # "tma_chunked" with a narrower last box (blk_n off the 64-wide box): TAIL columns after the
        # BOX_N full boxes of each m-block, staged in two plain TAIL-wide buffers a consumer; NBOX
        # boxes an m-block in all (BOX_N when there is no tail).
        TAIL = p.tail_cols
        HAS_TAIL, TAIL_ODD8 = TAIL > 0, TAIL % 16 != 0
        NBOX = BOX_N + (1 if HAS_TAIL else 0)
        # Epilogue warpgroup: consumer c hands its staged pieces (CHUNKS per tile, in NBUF buffers)
        # to warp c of the epilogue warpgroup through staged/drained barriers.
        EWG, CHUNKS = p.epilogue_warpgroup, p.store_chunks
        NBUF = 2 if CHUNKED else 1
        pack2_name, pack2_source = pack2_helper(DT)
        stmatrix = T.ptx["stmatrix.sync.aligned.m8n8.x4.shared.b16"]
        stmatrix2 = T.ptx["stmatrix.sync.aligned.m8n8.x2.shared.b16"]
        if SWAP:
            stmatrix = T.ptx["stmatrix.sync.aligned.m8n8.x4.trans.shared.b16"]
            stmatrix2 = T.ptx["stmatrix.sync.aligned.m8n8.x2.trans.shared.b16"]
        bulk_commit = T.ptx["cp.async.bulk.commit_group"]
        bulk_wait_read = T.ptx["cp.async.bulk.wait_group.read"]
        D, Ds, Dt, staged, drained, warp, lane = f.D, f.Ds, f.Dt, f.staged, f.drained, f.warp, f.lane

        def chunk_buffer(c: Any, i: Any) -> Any:
            # "tma_chunked": consumer c's staging buffer for its box i (a constant with one consumer).
            return c * 2 + i % 2 if C > 1 else i % 2

        def chunk_use(nt: Any, i: int) -> Any:
            # Epilogue warpgroup: the uses of staging buffer i % NBUF before piece i of a consumer's
            # nt-th tile (each of the buffer's barriers completes once per use).
            return nt * ((CHUNKS + NBUF - 1 - i % NBUF) // NBUF) + i // NBUF

        # fmt: off
        @T.inline
        def take_buffer(c, b, use):
            # Epilogue warpgroup: before consumer c writes its staging buffer b for the use-th
            # time, the store of use-1 must have read it (a fresh barrier passes use 0).
            if warp == 0:
                if lane == 0:
                    drained.wait(c * NBUF + b, (use & 1) ^ 1)

        @T.inline
        def stmatrix16(staging, acc, box, p16, scol0):
            # stmatrix m8n8.x4 writes four 8x8 matrices of 16-bit values: rows 0-7 / 8-15 of the
            # warp's 16 rows times columns 16p..16p+7 / 16p+8..16p+15. In the fragment those are
            # the register pairs (8p, 8p+1), (8p+2, 8p+3), (8p+4, 8p+5), (8p+6, 8p+7); lane l
            # gives the address of row l%8 of matrix l//8. `staging`: the swizzled 64x64 boxes
            # (Ds) or the narrow last box (Dt: plain, rows 2*TAIL bytes apart, a multiple of 16
            # that puts a matrix's 8 rows on distinct banks; swapped, TAIL swizzled 128-byte rows).
            # swap_ab (.trans): matrix j's row i is the fragment's column i, 8 of its rows; the
            # staging box is D's rows (the fragment's columns) by D's columns (its rows).
            if SWAP:
                srow = T.meta_var(scol0 + 8 * (lane // 16) + lane % 8)
                scol = T.meta_var(16 * warp + 8 * ((lane // 8) & 1))
            else:
                srow = T.meta_var(16 * warp + 8 * ((lane // 8) & 1) + lane % 8)
                scol = T.meta_var(scol0 + 8 * (lane // 16))
            stmatrix(staging.ptr_to([box, srow, scol]),
                     T.cuda.func_call(pack2_name, acc[8 * p16], acc[8 * p16 + 1],
                                      source_code=pack2_source, return_type="uint32"),
                     T.cuda.func_call(pack2_name, acc[8 * p16 + 2], acc[8 * p16 + 3],
                                      source_code=pack2_source, return_type="uint32"),
                     T.cuda.func_call(pack2_name, acc[8 * p16 + 4], acc[8 * p16 + 5],
                                      source_code=pack2_source, return_type="uint32"),
                     T.cuda.func_call(pack2_name, acc[8 * p16 + 6], acc[8 * p16 + 7],
                                      source_code=pack2_source, return_type="uint32"))

        @T.inline
        def stage_block(acc, box_row):
            for p16 in T.unroll(NACC // 8):
                stmatrix16(Ds, acc, box_row * BOX_N + p16 // 4, p16, 16 * (p16 % 4))

        @T.inline
        def store_rows(c, m0, n0):
            # TMA-store consumer c's staged boxes (one thread).
            for mb in T.unroll(MB):
                for nb in T.unroll(BOX_N):
                    r0 = T.meta_var(m0 + c * ROW_BASE + mb * STORE_BOX)
                    c0 = T.meta_var(n0 + nb * STORE_BOX)
                    # With one consumer its box index is a constant: tma_auto must prove
                    # the staging box 128 B aligned, which it cannot through wg * size
                    # for every box size.
                    box = T.meta_var((c * MB + mb) * BOX_N + nb if C > 1 else mb * BOX_N + nb)
                    Tx.copy_async(D[r0:r0 + STORE_BOX, c0:c0 + STORE_BOX], Ds[box, :, :],
                                  dispatch="tma_auto", **STORE_OPTS)
            bulk_commit()

        @T.inline
        def tma_epilogue(c, acc0, acc1, m0, n0, nt):
            # The staging rows of consumer c: boxes (c*MB + mb, *). Its previous tile's stores must
            # have read them before they are overwritten.
            if EWG:
                take_buffer(c, 0, chunk_use(nt, 0))
            else:
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
                    if EWG:
                        staged.arrive(c)
                    else:
                        store_rows(c, m0, n0)

        @T.inline
        def claim_piece(c, i, nt):
            # Piece i of this consumer's output (a 64-wide box, or the narrower last one) goes
            # through staging buffer i%2. Before overwriting it: with the epilogue warpgroup, its
            # store has drained it; else at most the previous piece's store may still be reading
            # (the one in the other buffer), and a tile's first piece waits for all (its buffer
            # parity may repeat the previous tile's last piece).
            if EWG:
                take_buffer(c, i % 2, chunk_use(nt, i))
            else:
                if warp == 0:
                    if lane == 0:
                        if i == 0:
                            bulk_wait_read(0)
                        else:
                            bulk_wait_read(1)
            T.cuda.warpgroup_sync(1 + c)

        @T.inline
        def store_box(c, buf, m0, n0, mb, nb):
            r0 = T.meta_var(m0 + c * ROW_BASE + mb * STORE_BOX)
            c0 = T.meta_var(n0 + nb * STORE_BOX)
            if SWAP:
                Tx.copy_async(D[c0:c0 + STORE_BOX, r0:r0 + STORE_BOX], Ds[buf, :, :], dispatch="tma_auto",
                              **STORE_OPTS)
            else:
                Tx.copy_async(D[r0:r0 + STORE_BOX, c0:c0 + STORE_BOX], Ds[buf, :, :], dispatch="tma_auto",
                              **STORE_OPTS)
            bulk_commit()

        @T.inline
        def store_tail(c, buf, m0, n0, mb):
            r0 = T.meta_var(m0 + c * ROW_BASE + mb * STORE_BOX)
            c0 = T.meta_var(n0 + BOX_N * STORE_BOX)
            if SWAP:
                Tx.copy_async(D[c0:c0 + TAIL, r0:r0 + STORE_BOX], Dt[buf, :, :], dispatch="tma_auto",
                              **STORE_OPTS)
            else:
                Tx.copy_async(D[r0:r0 + STORE_BOX, c0:c0 + TAIL], Dt[buf, :, :], dispatch="tma_auto",
                              **STORE_OPTS)
            bulk_commit()

        @T.inline
        def publish_piece(c, i, buf, m0, n0, mb, nb, tail):
            # The staged piece, fenced to the async proxy, goes to the epilogue warpgroup or to
            # its TMA store (the tail through its own map).
            T.ptx.fence.proxy.async_.shared__cta()
            T.cuda.warpgroup_sync(1 + c)
            if warp == 0:
                if lane == 0:
                    if EWG:
                        staged.arrive(c * NBUF + i % 2)
                    else:
                        if tail:
                            store_tail(c, buf, m0, n0, mb)
                        else:
                            store_box(c, buf, m0, n0, mb, nb)

        @T.inline
        def chunked_box(c, acc, m0, n0, mb, nb, nt):
            # Box i = mb*NBOX + nb of this consumer's output.
            i = T.meta_var(mb * NBOX + nb)
            buf = T.meta_var(chunk_buffer(c, i))
            claim_piece(c, i, nt)
            for q in T.unroll(4):
                stmatrix16(Ds, acc, buf, nb * 4 + q, 16 * q)
            publish_piece(c, i, buf, m0, n0, mb, nb, False)

        @T.inline
        def tail_stmatrix8(acc, buf, p8, scol0):
            # stmatrix m8n8.x2: the 8 columns 8*p8.. of the warp's 16 rows, register pairs
            # (4*p8, 4*p8+1) (rows 0-7) and (4*p8+2, 4*p8+3) (rows 8-15); lanes 0-15 give the
            # addresses (row l%8 of matrix l//8), the others' are ignored. swap_ab (.trans): the
            # 8 columns are the tail box's last 8 rows, each 8 of the fragment's rows.
            if SWAP:
                srow = T.meta_var(scol0 + lane % 8)
                scol = T.meta_var(16 * warp + 8 * ((lane // 8) & 1))
            else:
                srow = T.meta_var(16 * warp + 8 * ((lane // 8) & 1) + lane % 8)
                scol = T.meta_var(scol0)
            stmatrix2(Dt.ptr_to([buf, srow, scol]),
                      T.cuda.func_call(pack2_name, acc[4 * p8], acc[4 * p8 + 1],
                                       source_code=pack2_source, return_type="uint32"),
                      T.cuda.func_call(pack2_name, acc[4 * p8 + 2], acc[4 * p8 + 3],
                                       source_code=pack2_source, return_type="uint32"))

        @T.inline
        def chunked_tail(c, acc, m0, n0, mb, nt):
            # The m-block's last box, TAIL columns wide (piece i = mb*NBOX + BOX_N): staged in
            # tail buffer i%2 under the same rules as a full box, stored through its own map.
            i = T.meta_var(mb * NBOX + BOX_N)
            buf = T.meta_var(chunk_buffer(c, i))
            claim_piece(c, i, nt)
            for q in T.unroll(TAIL // 16):
                stmatrix16(Dt, acc, buf, BOX_N * 4 + q, 16 * q)
            if TAIL_ODD8:
                tail_stmatrix8(acc, buf, BOX_N * 8 + TAIL // 8 - 1, TAIL - 8)
            publish_piece(c, i, buf, m0, n0, mb, BOX_N, True)

        @T.inline
        def chunked_epilogue(c, acc0, acc1, m0, n0, nt):
            for nb in T.unroll(BOX_N):
                chunked_box(c, acc0, m0, n0, 0, nb, nt)
            if HAS_TAIL:
                chunked_tail(c, acc0, m0, n0, 0, nt)
            if MB == 2:
                for nb in T.unroll(BOX_N):
                    chunked_box(c, acc1, m0, n0, 1, nb, nt)
                if HAS_TAIL:
                    chunked_tail(c, acc1, m0, n0, 1, nt)

        @T.inline
        def drain_tile(c, nt, m0, n0):
            # Epilogue warpgroup, warp c, lane 0: store consumer c's nt-th tile at (m0, n0) piece
            # by piece as the consumer stages it, and hand each buffer back once its store has
            # read it.
            if TMA_EPI:
                staged.wait(c, nt & 1)
                store_rows(c, m0, n0)
                bulk_wait_read(0)
                drained.arrive(c)
            else:
                for mb in T.unroll(MB):
                    for nb in T.unroll(BOX_N):
                        i = T.meta_var(mb * NBOX + nb)
                        staged.wait(c * NBUF + i % 2, chunk_use(nt, i) & 1)
                        store_box(c, chunk_buffer(c, i), m0, n0, mb, nb)
                        bulk_wait_read(0)
                        drained.arrive(c * NBUF + i % 2)
                    if HAS_TAIL:
                        t = T.meta_var(mb * NBOX + BOX_N)
                        staged.wait(c * NBUF + t % 2, chunk_use(nt, t) & 1)
                        store_tail(c, chunk_buffer(c, t), m0, n0, mb)
                        bulk_wait_read(0)
                        drained.arrive(c * NBUF + t % 2)

        @T.inline
        def stores_read():
            # Shared memory must stay valid until the last stores have read it.
            if warp == 0:
                if lane == 0:
                    bulk_wait_read(0)
        # fmt: on

        return cls(tma_epilogue, chunked_epilogue, drain_tile, stores_read)
