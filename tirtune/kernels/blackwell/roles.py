"""The Blackwell kernel's warp roles: each walks this cluster's tiles (the skeleton's schedule and
ring), so the roles agree on every tile's ring position and accumulator phase.

* warp_specialized: the extra warpgroup's warp 3 (`producer`, one elected thread) loads every
  k-tile; its warp c (`mma_issuer`, one elected thread, CTA 0 alone in a pair) issues consumer c's
  MMAs; warpgroup c (`writeback`) only writes back consumer c's accumulator.
* Otherwise (`single`): each tile in turn is loaded and multiplied (one elected thread of
  warpgroup 0, or every thread copying with the thread loader), then every consumer warpgroup
  writes its accumulator back.
"""

# The @T.inline macros are parsed by TVMScript, which reads parameter annotations as TIR types;
# they stay unannotated.
# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tirtune.kernels.blackwell.epilogue import Epilogue
from tirtune.kernels.blackwell.frame import Frame
from tirtune.kernels.blackwell.loads import Loads
from tirtune.kernels.blackwell.mma import Mma
from tirtune.kernels.blackwell.plan import BlackwellPlan
from tirtune.kernels.skeleton import Skeleton

__all__ = ["Roles"]


@dataclass(frozen=True, slots=True)
class Roles:
    """The warp roles' macros (TVMScript, called from the kernel body; c: the consumer).

    producer(): load every k-tile of the cluster's tiles.
    mma_issuer(c): issue consumer c's MMAs for each of the cluster's tiles.
    writeback(c): write back consumer c's accumulator of each of the cluster's tiles.
    single(): not warp-specialized: each tile loaded, multiplied and written back in turn.
    """

    producer: Any
    mma_issuer: Any
    writeback: Any
    single: Any

    @classmethod
    def trace(
        cls, T: Any, p: BlackwellPlan, sk: Skeleton, f: Frame, loads: Loads, mma: Mma, epilogue: Epilogue
    ) -> Roles:
        C, THREADS = p.consumers, p.loader == "threads"
        wg, warp, cid = f.wg, f.warp, f.cid
        produce, writeback_tile = loads.produce, epilogue.writeback
        issue_mma, single_thread_tile, threads_tile = mma.issue_mma, mma.single_thread_tile, mma.threads_tile

        # fmt: off
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
                    writeback_tile(c, it, tm, tn)

        @T.inline
        def producer():
            sk.produce_tiles(cid, produce)

        @T.inline
        def mma_issuer(c):
            sk.for_each_tile(cid, issue_mma, (c,))

        @T.inline
        def writeback(c):
            sk.for_each_tile(cid, writeback_tile, (c,))

        @T.inline
        def single():
            sk.for_each_tile(cid, mono_tile, ())
        # fmt: on

        return cls(producer, mma_issuer, writeback, single)
