"""The Blackwell kernel's MMA: tcgen05.mma from the ring into the TMEM accumulators.

* A k-tile of consumer c (`mma_stage`) is one tcgen05.mma per 64-wide swizzle atom of the stage:
  its 128 A rows (256 across a CTA pair, cta_group::2) times the stage's B tile, accumulating into
  TMEM columns [c*blk_n, (c+1)*blk_n) from the tile's first atom on.
* warp_specialized (`issue_mma`): the elected thread of consumer c's MMA warp (CTA 0 alone in a
  pair) waits until the accumulator has been read back (`acc_empty`), then for each k-tile waits
  for its stage (`full`), multiplies, and commits to `empty` (multicast to both CTAs of a pair);
  after the tile's last k-tile it commits to `acc_full`.
* Not warp-specialized (`single_thread_tile`): one elected thread loads up to `stages` k-tiles
  ahead and issues every consumer's MMAs.
* loader "threads" (`threads_tile`): synchronous: every thread copies k-tile kt once the MMAs of
  kt-1 have read the one stage, the copies are fenced to the async proxy tcgen05 reads through,
  and one elected thread multiplies; its commit frees the stage again.

`Mma.trace` builds the macros from the plan, the skeleton's ring, the kernel body's `Frame` and
the loads.
"""

# The @T.inline macros are parsed by TVMScript, which reads parameter annotations as TIR types;
# they stay unannotated.
# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tirtune.kernels.blackwell.frame import Frame
from tirtune.kernels.blackwell.loads import Loads
from tirtune.kernels.blackwell.plan import BlackwellPlan
from tirtune.kernels.skeleton import ATOM_K, Ring

__all__ = ["Mma"]


@dataclass(frozen=True, slots=True)
class Mma:
    """The MMA macros (TVMScript). `it` is the tile's place in the CTA's walk (its ring position and
    accumulator phase), (tm, tn) the cluster tile.

    issue_mma(c, it, tm, tn): consumer c's MMA thread, one tile (warp-specialized).
    single_thread_tile(it, tm, tn): one thread loads and multiplies a tile (not warp-specialized).
    threads_tile(it, tm, tn): loader "threads": all threads copy, one thread multiplies.
    """

    issue_mma: Any
    single_thread_tile: Any
    threads_tile: Any

    @classmethod
    def trace(cls, T: Any, p: BlackwellPlan, ring: Ring, f: Frame, loads: Loads) -> Mma:
        from tvm.script.tirx import tile as Tx

        BN, BK, ST, C, CG, KT = p.blk_n, p.blk_k, p.stages, p.consumers, p.cta_group, p.k_tiles
        PRE = min(ST, KT)  # k-tiles the single-thread pipeline loads before its first MMA
        MASK = 3 if CG == 2 else None  # commits reach both CTAs of a pair
        fence_after = T.ptx["tcgen05.fence::after_thread_sync"]
        proxy_fence = T.ptx["fence.proxy.async.shared::cta"]
        As, Bs, tmem, full, empty, acc_full, acc_empty = f.As, f.Bs, f.tmem, f.full, f.empty, f.acc_full, f.acc_empty
        wg, warp = f.wg, f.warp
        produce, thread_load = loads.produce, loads.thread_load

        # fmt: off
        @T.inline
        def mma_stage(c, j, kt):
            # One k-tile of consumer c: tcgen05.mma over each 64-wide swizzle atom of the stage.
            s = T.meta_var(ring.slot(j))
            for kk in T.unroll(BK // ATOM_K):
                Tx.gemm_async(tmem[:, c * BN:c * BN + BN], As[s, c, :, kk * ATOM_K:kk * ATOM_K + ATOM_K],
                              Bs[s, :, kk * ATOM_K:kk * ATOM_K + ATOM_K], accum=(kt * (BK // ATOM_K) + kk != 0),
                              dispatch="tcgen05", cta_group=CG)

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

        # fmt: on

        return cls(issue_mma, single_thread_tile, threads_tile)
