"""The Hopper kernel's loads: a stage's A and B tiles into the shared-memory ring.

* TMA (`load_tile`): the loading thread waits until the stage is free (`empty`: released by every
  consumer warpgroup of the tile, in every CTA of the cluster), arms the stage's `full` barrier
  with the bytes the whole stage will receive (`stage_bytes`), and issues one box per 128-byte
  swizzle atom along K (64 elements of f16/bf16, 128 of e4m3) and operand (a box row may span at
  most 128 B with the 128B swizzle, and this keeps the tensor maps 2-D whatever K is). TMA
  zero-fills a box past M, N or K and still counts its bytes, so partial tiles add zeros.
* The L2 options (`KernelPlan.load_options`, keyword arguments of these copies; none at their
  defaults, so those kernels are traced as before the options existed): l2_hint gives each
  operand's loads an L2 eviction priority (`.L2::cache_hint` with TVM's createpolicy word for
  evict_first or evict_last: UTMALDG's `desc[URx]` operand in SASS), l2_promotion the load tensor
  maps' L2 promotion (256 B: a miss fetches the neighbouring 128-byte atom too), and
  prefetch_tensormap has warp 0 prefetch every tensor map's descriptor, loads' and stores', when
  the kernel starts (UTMACCTL.PF).
* Multicast (cluster 2 or 4, persistent): the cluster's CTAs compute adjacent tiles along M (N)
  and share the B (A) tile: each loads 1/cluster of the shared tile's rows and multicasts it
  (cta_mask) into every CTA's stage at the same offset, signalling each CTA's `full` barrier,
  which expects the whole stage. One branch per rank keeps every slice offset a constant.
* One-row operands (M = 1 or N = 1): TMA cannot describe a box of rows over a tensor of one row
  (its unit dimension leaves the tensor map), so that operand is loaded as one row a stage and
  its ring is zeroed once before the barriers are published (`zero_ring`): the other rows
  multiply as zeros.
* k_rotate: tile t (linear index, M fastest) loads its k-tiles in the order (t + kt) mod k-tiles,
  so CTAs streaming at the same time read different columns of their rows instead of the same
  column block (every row's address differing only in its high bits). The consumers multiply
  stages in ring order as ever: only the producer's k index changes (docs/perf-notes.md,
  "k_rotate").
* Split-K: CTA rank r of a tile's split loads k-tiles [r*KT, (r+1)*KT); rank r of a tail tile
  (split_k_scope "tail") from r*K_TILES // split_k on, its count the kernel's k_count.
* Without a producer warpgroup, thread 0 of consumer 0 loads the first stages-1 k-tiles of a tile
  (`prologue`), and the mainloop (`mma.py`) the rest, one ahead of the ring's release.
* loader "threads" (`thread_load`, one stage, no producer, no TMA, no barriers): every consumer
  thread copies 16-byte chunks of the A and B tiles into the swizzled stage, zeros past M, N and
  K (the skeleton's guarded copy); the mainloop fences and syncs around it.

`Loads.trace` builds the macros from the plan, the skeleton and the kernel body's `Frame`.
"""

# The @T.inline macros are parsed by TVMScript, which reads parameter annotations as TIR types;
# they stay unannotated.
# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tirtune.kernels.hopper.frame import Frame
from tirtune.kernels.hopper.plan import KernelPlan
from tirtune.kernels.skeleton import WARPGROUP, Skeleton, copy16_helper

__all__ = ["COPY16", "Loads"]

# loader="threads": one 16-byte chunk from global to (swizzled) shared memory, or zeros.
COPY16 = copy16_helper("tirtune_copy16", "in")


@dataclass(frozen=True, slots=True)
class Loads:
    """The load macros of one kernel (TVMScript, called from the kernel body and the mainloop).

    zero_ring(X, rows): zero every stage of a one-row operand's ring X (`rows` rows a stage), fenced
        to the async proxy, before the barriers are published.
    load_tile(j, kt, m0, n0): the TMA loads of k-tile kt of the tile at (m0, n0) into ring position
        j (the CTA's running k-tile count), after waiting for the stage to be free.
    load_tile_at(j, kt, tm, tn): load_tile for this CTA's tile of cluster tile (tm, tn): what the
        skeleton's producer loop calls.
    prologue(c, j0, m0, n0): without a producer, thread 0 of consumer 0 loads a tile's first
        stages-1 k-tiles (j0: the k-tiles before the tile).
    thread_load(c, kt, m0, n0): loader "threads": consumer c's threads copy their chunks of k-tile
        kt into the one stage.
    k_index(kt, m0, n0): a Python function: the k-tile of K that the tile at (m0, n0) loads as its
        kt-th (split-K's rank, the tail split, k_rotate), which the block scales are read by.
    """

    zero_ring: Any
    load_tile: Any
    load_tile_at: Any
    prologue: Any
    thread_load: Any
    k_index: Any

    @classmethod
    def trace(cls, T: Any, p: KernelPlan, sk: Skeleton, f: Frame) -> Loads:
        from tvm.script.tirx import tile as Tx

        M, N, DT, BM, BN, BK, S = p.m, p.n, p.dtype, p.blk_m, p.blk_n, p.blk_k, p.stages
        # ATOM_K: elements of one 128-byte swizzle atom row (64 of f16/bf16, 128 of e4m3), one box.
        ATOM_K = p.atom_k
        # KT: the k-tiles one CTA multiplies (1/split_k of them in a split-K cluster).
        KT, GM, SPLIT, ATOMS, TX_BYTES = p.cta_k_tiles, p.grid[0], p.split_k, p.atoms, p.stage_bytes
        CL, ALONG_M, MC_ROWS = p.cluster, p.cluster_dim == "m", p.multicast_rows
        # Uneven multicast slices (plan.multicast_slices): each rank's rows are constants of a
        # branch of its own, since a TMA box's extent is fixed when the kernel is built.
        EVEN, SLICES = CL == 1 or p.multicast_even, p.multicast_slices
        ONE_A, ONE_B, K_ROTATE = p.one_row_a, p.one_row_b, p.k_rotate
        TAIL, K_TILES = p.split_tail, p.k_tiles
        LOAD_A, LOAD_B = p.load_options("a"), p.load_options("b")
        NTHREADS, CHUNKS_K = p.threads, BK // 8
        # Prefetch depth of the non-specialized pipeline: tiles loaded before the first MMA.
        PRE = min(S - 1, KT)
        ring = sk.ring
        XA, XB, As, Bs, full, empty = f.A, f.B, f.As, f.Bs, f.full, f.empty
        wg, warp, lane, rank = f.wg, f.warp, f.lane, f.rank

        def rotated(kt: Any, m0: Any, n0: Any) -> Any:
            # k_rotate: the tile at (m0, n0) loads its kt-th k-tile from its own start on, its linear
            # index modulo KT, so CTAs that stream at the same time read different columns of their
            # rows; without it, kt itself (the kernel traced as before the knob existed).
            return (kt + (m0 // BM + n0 // BN * GM) % KT) % KT if K_ROTATE else kt

        def k_index(kt: Any, m0: Any, n0: Any) -> Any:
            # The k-tile of K (0 .. k-tiles - 1) that the tile at (m0, n0) holds as its kt-th:
            # split_k_scope "tail": rank r of a tail tile from r*K_TILES // SPLIT on (uneven shares
            # where SPLIT does not divide K_TILES; no rotation; rank 0 for a whole wave's tile);
            # split-K: this CTA's k-tiles rank*KT + kt; else kt, rotated with k_rotate.
            if TAIL:
                return rank * K_TILES // SPLIT + kt
            if SPLIT > 1:
                return rank * KT + rotated(kt, m0, n0)
            return rotated(kt, m0, n0)

        # fmt: off
        @T.inline
        def zero_ring(X, rows):
            # A one-row operand's ring starts all zeros (TMA rewrites only row 0 of a stage), so
            # the rows past M (N) multiply as zeros; fenced to the async proxy that TMA and wgmma
            # use, before publish_barriers syncs the CTA.
            for i in range(-(-S * rows * BK // NTHREADS)):
                e = T.meta_var(i * NTHREADS + wg * WARPGROUP + warp * 32 + lane)
                if e < S * rows * BK:
                    X[e // (rows * BK), e // BK % rows, e % BK] = T.cast(0, DT)
            T.ptx.fence.proxy.async_.shared__cta()

        @T.inline
        def load_own(s, kt, kk, m0, n0):
            if ONE_A:
                # A single row (M = 1): a larger box would ask TMA for a unit dimension it
                # cannot describe; the stage's other rows stay zero (zero_ring).
                Tx.copy_async(As[s, 0:1, kk:kk + ATOM_K], XA[0:1, kt * BK + kk:kt * BK + kk + ATOM_K],
                              dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([s]), **LOAD_A)
            else:
                Tx.copy_async(As[s, :, kk:kk + ATOM_K], XA[m0:m0 + BM, kt * BK + kk:kt * BK + kk + ATOM_K],
                              dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([s]), **LOAD_A)
            if ONE_B:
                Tx.copy_async(Bs[s, 0:1, kk:kk + ATOM_K], XB[0:1, kt * BK + kk:kt * BK + kk + ATOM_K],
                              dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([s]), **LOAD_B)
            else:
                Tx.copy_async(Bs[s, :, kk:kk + ATOM_K], XB[n0:n0 + BN, kt * BK + kk:kt * BK + kk + ATOM_K],
                              dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([s]), **LOAD_B)

        @T.inline
        def load_shared_slice(s, kt, kk, m0, n0, r):
            # This CTA's 1/CL slice of the operand the cluster shares, multicast to every CTA of the
            # cluster (same shared-memory offset and barrier in each); its own operand, locally.
            k0 = T.meta_var(kt * BK + kk)
            if ALONG_M:
                Tx.copy_async(As[s, :, kk:kk + ATOM_K], XA[m0:m0 + BM, k0:k0 + ATOM_K],
                              dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([s]), **LOAD_A)
                Tx.copy_async(Bs[s, r * MC_ROWS:(r + 1) * MC_ROWS, kk:kk + ATOM_K],
                              XB[n0 + r * MC_ROWS:n0 + (r + 1) * MC_ROWS, k0:k0 + ATOM_K],
                              dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([s]), cta_mask=(1 << CL) - 1,
                              **LOAD_B)
            else:
                Tx.copy_async(As[s, r * MC_ROWS:(r + 1) * MC_ROWS, kk:kk + ATOM_K],
                              XA[m0 + r * MC_ROWS:m0 + (r + 1) * MC_ROWS, k0:k0 + ATOM_K],
                              dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([s]), cta_mask=(1 << CL) - 1,
                              **LOAD_A)
                Tx.copy_async(Bs[s, :, kk:kk + ATOM_K], XB[n0:n0 + BN, k0:k0 + ATOM_K],
                              dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([s]), **LOAD_B)

        @T.inline
        def load_unshared(s, kt, kk, m0, n0):
            # Uneven slices: this CTA's own operand (A along M, B along N), loaded locally.
            k0 = T.meta_var(kt * BK + kk)
            if ALONG_M:
                Tx.copy_async(As[s, :, kk:kk + ATOM_K], XA[m0:m0 + BM, k0:k0 + ATOM_K],
                              dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([s]), **LOAD_A)
            else:
                Tx.copy_async(Bs[s, :, kk:kk + ATOM_K], XB[n0:n0 + BN, k0:k0 + ATOM_K],
                              dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([s]), **LOAD_B)

        @T.inline
        def multicast_slice(s, kt, kk, m0, n0, lo, hi):
            # Uneven slices: rows [lo, hi) of the shared tile (constants), multicast to the cluster.
            k0 = T.meta_var(kt * BK + kk)
            if ALONG_M:
                Tx.copy_async(Bs[s, lo:hi, kk:kk + ATOM_K], XB[n0 + lo:n0 + hi, k0:k0 + ATOM_K],
                              dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([s]), cta_mask=(1 << CL) - 1,
                              **LOAD_B)
            else:
                Tx.copy_async(As[s, lo:hi, kk:kk + ATOM_K], XA[m0 + lo:m0 + hi, k0:k0 + ATOM_K],
                              dispatch="tma_auto", cta_group=1, mbar=full.ptr_to([s]), cta_mask=(1 << CL) - 1,
                              **LOAD_A)

        @T.inline
        def load_atom(s, kt, kk, m0, n0):
            if CL == 1:
                load_own(s, kt, kk, m0, n0)
            elif EVEN:
                # One branch per rank keeps every shared-memory slice offset a constant.
                for r in range(CL):
                    if rank == r:
                        load_shared_slice(s, kt, kk, m0, n0, r)
            else:
                # The own operand once (one tensor map), then this rank's slice: clusters of 2 or
                # 4 (knobs.CLUSTER_SIZES), a branch and a box for each rank.
                load_unshared(s, kt, kk, m0, n0)
                if rank == 0:
                    multicast_slice(s, kt, kk, m0, n0, SLICES[0][0], SLICES[0][1])
                if rank == 1:
                    multicast_slice(s, kt, kk, m0, n0, SLICES[1][0], SLICES[1][1])
                if CL == 4:
                    if rank == 2:
                        multicast_slice(s, kt, kk, m0, n0, SLICES[2][0], SLICES[2][1])
                    if rank == 3:
                        multicast_slice(s, kt, kk, m0, n0, SLICES[3][0], SLICES[3][1])

        @T.inline
        def load_atoms(j, kt, m0, n0):
            # The stage's ATOMS atoms along K (blk_k 64..256), unrolled at trace time.
            load_atom(ring.slot(j), kt, 0, m0, n0)
            if ATOMS >= 2:
                load_atom(ring.slot(j), kt, ATOM_K, m0, n0)
            if ATOMS >= 3:
                load_atom(ring.slot(j), kt, 2 * ATOM_K, m0, n0)
            if ATOMS >= 4:
                load_atom(ring.slot(j), kt, 3 * ATOM_K, m0, n0)

        @T.inline
        def load_tile(j, kt, m0, n0):
            # j counts k-tiles loaded by this CTA (its ring position); kt is the k-tile of the
            # output tile at (m0, n0). Wait until every consumer released what the stage held
            # (load j-S; in a cluster, the consumers of every CTA the multicast writes to).
            empty.wait(ring.slot(j), ring.free_phase(j))
            # The whole stage lands here: this CTA's loads plus the peers' multicast slices.
            full.arrive(ring.slot(j), TX_BYTES)
            # One box per 128-byte swizzle atom along K: a box row may span at most 128 B with
            # 128B swizzle, and this keeps the tensor map 2-D whatever K is.
            load_atoms(j, k_index(kt, m0, n0), m0, n0)

        @T.inline
        def load_tile_at(j, kt, tm, tn):
            # The shared producer loop hands over cluster tiles; this CTA loads its own tile.
            pm0, pn0 = T.meta_var(p.cta_origin(tm, tn, rank))
            load_tile(j, kt, pm0, pn0)

        @T.inline
        def prologue(c, j0, m0, n0):
            # Without a producer, thread 0 of consumer 0 loads the first PRE k-tiles of a tile.
            if c == 0:
                if warp == 0:
                    if lane == 0:
                        for j in T.unroll(PRE):
                            load_tile(j0 + j, j, m0, n0)

        @T.inline
        def copy_rows(S_, G_, rows, r0, limit, kt, tid):
            # Chunk q of rows x CHUNKS_K; when the threads do not divide the chunks evenly (three
            # consumers), the last round is guarded.
            for i in T.unroll(-(-rows * CHUNKS_K // NTHREADS)):
                q = T.meta_var(i * NTHREADS + tid)
                row = T.meta_var(q // CHUNKS_K)
                col = T.meta_var(q % CHUNKS_K * 8)
                if rows * CHUNKS_K % NTHREADS == 0 or i * NTHREADS + NTHREADS <= rows * CHUNKS_K:
                    sk.copy_chunk(COPY16, S_.ptr_to([0, row, col]), G_, r0 + row, limit, kt, col)
                else:
                    if q < rows * CHUNKS_K:
                        sk.copy_chunk(COPY16, S_.ptr_to([0, row, col]), G_, r0 + row, limit, kt, col)

        @T.inline
        def thread_load(c, kt, m0, n0):
            # loader="threads" (one stage, no producer): thread t of the C*128 copies chunks
            # t, t+C*128, ... of 8 elements (16 B) of the A and B tiles; a chunk past M, N or K
            # is zero-filled (K is a multiple of 8, so a chunk is wholly in or out).
            tid = T.meta_var(c * WARPGROUP + warp * 32 + lane)
            copy_rows(As, XA, BM, m0, M, kt, tid)
            copy_rows(Bs, XB, BN, n0, N, kt, tid)
        # fmt: on

        return cls(zero_ring, load_tile, load_tile_at, prologue, thread_load, k_index)
