"""The Blackwell kernel's loads: a stage's A and B tiles into the shared-memory ring.

* TMA (`produce`): the producer waits until the MMAs that read the stage have finished (`empty`,
  committed by tcgen05; a fresh barrier passes parity 1, so the first `stages` loads go straight
  through), then loads, one box per 64-element swizzle atom along K, an A tile of 128 rows per
  consumer (consumer c's rows are (c * cta_group + rank) * 128 past the cluster tile's first row)
  and this CTA's B rows (all of blk_n, or half in a CTA pair: rank * b_rows on). In a pair every
  TMA byte of both CTAs completes on CTA 0's `full` barrier, which CTA 0 alone arms with the
  pair's bytes (`tx_bytes`). TMA zero-fills the part of a box past M, N and K.
* loader "threads" (`thread_load`, one stage, no producer, no pair): every thread of the C*128
  copies 16-byte chunks t, t + C*128, ... of the A and B tiles into the swizzled stage, zeros past
  M, N and K (the skeleton's guarded copy; K is a multiple of 8, so a chunk is wholly in or out).

`Loads.trace` builds the macros from the plan, the skeleton and the kernel body's `Frame`.
"""

# The @T.inline macros are parsed by TVMScript, which reads parameter annotations as TIR types;
# they stay unannotated.
# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tirtune.kernels.blackwell.frame import Frame
from tirtune.kernels.blackwell.plan import BlackwellPlan, tx_bytes
from tirtune.kernels.skeleton import ATOM_K, WARPGROUP, Skeleton, copy16_helper
from tirtune.space.blackwell.rules import CONSUMER_ROWS

__all__ = ["COPY16", "Loads"]

# loader="threads": one 16-byte chunk from global to (swizzled) shared memory, or zeros past the edges.
COPY16 = copy16_helper("tirtune_bw_copy16", "inside")


@dataclass(frozen=True, slots=True)
class Loads:
    """The load macros of one kernel (TVMScript).

    produce(j, kt, tm, tn): wait for ring slot j % stages to be free, then load k-tile kt of
        cluster tile (tm, tn) into it: what the skeleton's producer loop calls.
    thread_load(tm, tn, kt): loader "threads": every thread copies its chunks of k-tile kt.
    """

    produce: Any
    thread_load: Any

    @classmethod
    def trace(cls, T: Any, p: BlackwellPlan, sk: Skeleton, f: Frame) -> Loads:
        from tvm.script.tirx import tile as Tx

        M, N, BK, C, CG = p.m, p.n, p.blk_k, p.consumers, p.cta_group
        ROWS, BROWS, TX = CONSUMER_ROWS, p.b_rows, tx_bytes(p)
        CTM, CTN = p.cluster_tile
        NTHREADS, CK = p.threads, BK // 8  # the copying threads; 16-byte chunks per tile row
        # Every thread copies whole rounds of chunks: C*128 rows of A, and blk_n (a multiple of 64) rows of B.
        assert p.loader != "threads" or (C * ROWS * CK % NTHREADS == 0 and BROWS * CK % NTHREADS == 0)
        ring = sk.ring
        A, B, As, Bs, full, full0, empty = f.A, f.B, f.As, f.Bs, f.full, f.full0, f.empty
        wg, warp, lane, rank = f.wg, f.warp, f.lane, f.rank

        # fmt: off
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
        def thread_load(tm, tn, kt):
            # loader="threads" (the seed's V1-V3): thread t of all C*128 copies 16-byte chunks t,
            # t + C*128, ... of the A and B tiles into the (swizzled) single stage; chunks past
            # M, N or K are zeros (K is a multiple of 8, so a chunk is wholly in or out).
            tid = T.meta_var(wg * WARPGROUP + warp * 32 + lane)
            for i in T.unroll(C * ROWS * CK // NTHREADS):
                q = T.meta_var(i * NTHREADS + tid)
                r = T.meta_var(q // CK)
                col = T.meta_var(q % CK * 8)
                sk.copy_chunk(COPY16, As.ptr_to([0, r // ROWS, r % ROWS, col]), A, tm * CTM + r, M, kt, col)
            for i in T.unroll(BROWS * CK // NTHREADS):
                q = T.meta_var(i * NTHREADS + tid)
                r = T.meta_var(q // CK)
                col = T.meta_var(q % CK * 8)
                sk.copy_chunk(COPY16, Bs.ptr_to([0, r, col]), B, tn * CTN + r, N, kt, col)

        # fmt: on

        return cls(produce, thread_load)
