"""The Hopper kernel's split-K: the partial sums of a tile's CTAs reduced into D.

split_k CTAs compute one output tile; CTA rank r multiplies k-tiles [r*KT, (r+1)*KT) (KT =
k_tiles / split_k) through its own ring (`loads.py`). Two ways to add the partial fragments:

* "dsmem" (a cluster of split_k consecutive CTAs along x): each CTA parks its fp32 fragment in its
  own shared memory, register-major (Red[register][thread]: a warp's stores and loads are 128
  consecutive bytes; `park`). A cluster barrier (arrive.release, wait.acquire) publishes the
  fragments; consumer thread t of rank r then sums register pairs r, r+split_k, ... of thread t's
  fragment over the cluster's CTAs in rank order 0..split_k-1 (mapa.shared::cluster +
  ld.shared::cluster: the same order on every CTA, so the result is bitwise reproducible) and
  stores them, converted, to D (`reduce_cluster`). A second cluster barrier keeps every CTA's
  shared memory alive until its peers have read it; it arrives relaxed, since its only job is
  that lifetime (a releasing arrive would wait, MEMBAR.ALL.GPU, for the CTA's own D stores: ~0.5-1
  us at the end of a ~10 us decode GEMM). Each output element is stored once.
* "serial" (no cluster): the tile's CTAs take turns on a static global fp32 workspace slot in rank
  order, handing over through a per-tile semaphore (acquire/release): rank r waits for turn r,
  adds the slot to its fragment, and either writes the sum back and passes the turn on, or (the
  last rank) stores D (`epilogue.store_block`) and resets the semaphore for the next launch
  (`serial_epilogue`).

A fused epilogue (core/epilogue.py) is applied where D is written: to each sum of the DSMEM
reduction, and by `store_block` for the serial one's last rank; the partial sums stay unfused.
"""

# The @T.inline macros are parsed by TVMScript, which reads parameter annotations as TIR types;
# they stay unannotated.
# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tirtune.kernels.hopper.epilogue import Epilogue, store2_helper
from tirtune.kernels.hopper.frame import Frame
from tirtune.kernels.hopper.plan import WGMMA_M, KernelPlan
from tirtune.kernels.skeleton import WARPGROUP

__all__ = ["CLUSTER_SYNC_RELAXED", "DSMEM_LOAD", "SplitK", "serial_helper"]

# "dsmem": the cluster barrier after the reduction, arriving relaxed (see the module's docstring).
CLUSTER_SYNC_RELAXED = (
    "tirtune_cluster_sync_relaxed",
    "__forceinline__ __device__ void tirtune_cluster_sync_relaxed() {\n"
    '  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");\n'
    '  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");\n}\n',
)

# "dsmem": one fp32 of a peer CTA's shared memory (cluster rank `rank`), at the offset `src` has
# in this CTA's: mapa turns the CTA-local address into the peer's in the cluster's shared window,
# ld.shared::cluster reads it.
DSMEM_LOAD = (
    "tirtune_dsmem_ld_f32",
    "__forceinline__ __device__ float tirtune_dsmem_ld_f32(const void* src, int rank) {\n"
    "  unsigned int local = static_cast<unsigned int>(__cvta_generic_to_shared(src));\n"
    "  unsigned int remote;\n"
    "  float v;\n"
    '  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));\n'
    '  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");\n'
    "  return v;\n}\n",
)

# "serial": the operations of tirtune_splitk_serial (constants, folded after inlining).
SK_WAIT, SK_SIGNAL, SK_LOAD, SK_STORE, SK_FENCE, SK_BAR = range(6)
SK_BAR_ID = 5  # a named barrier over the consumer warpgroups (1-4 serve single warpgroups)


def serial_helper(workspace: int, tiles: int) -> tuple[str, str]:
    """Serial split-K's one helper: the workspace (a partial fp32 tile per output tile) and the
    per-tile semaphores are static device arrays sized at compile time (the problem is), zero at
    module load; the semaphore of a tile is back at 0 when the kernel ends. `op` selects: wait
    until sem[index] == value (acquire), sem[index] = value (release), load / store ws[index]
    at L2 (another SM wrote or reads it), a fence, a named barrier (index) of `value` threads."""
    name = "tirtune_splitk_serial"
    source = (
        f"__forceinline__ __device__ float {name}(int op, int index, int value, float x) {{\n"
        f"  static float ws[{workspace}];\n"
        f"  static int sem[{tiles}];\n"
        "  if (op == 0) {\n"
        "    int seen;\n"
        "    do {\n"
        '      asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(seen) : "l"(&sem[index]) : "memory");\n'
        "    } while (seen != value);\n"
        "  } else if (op == 1) {\n"
        '    asm volatile("st.release.gpu.global.b32 [%0], %1;" :: "l"(&sem[index]), "r"(value) : "memory");\n'
        "  } else if (op == 2) {\n"
        "    return __ldcg(&ws[index]);\n"
        "  } else if (op == 3) {\n"
        "    __stcg(&ws[index], x);\n"
        "  } else if (op == 4) {\n"
        "    __threadfence();\n"
        "  } else {\n"
        '    asm volatile("bar.sync %0, %1;" :: "r"(index), "r"(value) : "memory");\n'
        "  }\n"
        "  return 0.0f;\n}\n"
    )
    return name, source


@dataclass(frozen=True, slots=True)
class SplitK:
    """The split-K macros (TVMScript). c is the consumer warpgroup, acc0/acc1 its fragments.

    park(c, acc0, acc1): "dsmem": park the consumer's fragments in this CTA's Red.
    reduce_cluster(): "dsmem", after every role: publish the parked fragments across the cluster,
        sum this CTA's share of every consumer thread's registers in rank order, store it to D.
    serial_epilogue(c, acc0, acc1, m0, n0): "serial": this rank's turn on the tile's workspace
        slot, and the last rank's store to D.
    stream_hand(c, acc0, acc1): stream_k: hand the partial tile of this CTA's first piece to the
        CTA before it (workspace slot bx).
    stream_take(c, acc0, acc1): stream_k: add the partial tile the CTA after this one handed over
        (slot bx + 1) before this CTA stores its last piece's tile.
    """

    park: Any
    reduce_cluster: Any
    serial_epilogue: Any
    stream_hand: Any
    stream_take: Any

    @classmethod
    def trace(cls, T: Any, p: KernelPlan, f: Frame, epilogue: Epilogue) -> SplitK:
        # DT: D's dtype, the operands' own or bf16 for e4m3 operands.
        M, N, DT, C, MB, NACC, ROW_BASE = p.m, p.n, p.out_dtype, p.consumers, p.m_blocks, p.acc_regs, p.row_base
        SWAP, SPLIT, NREG, GN = p.swap_ab, p.split_k, p.reduce_regs, p.grid[1]
        # With N even every row starts 4-byte aligned and col (always even) < N implies col+1 < N.
        PAIRED = N % 2 == 0
        store2_name, store2_source = store2_helper(DT)
        dsmem_name, dsmem_source = DSMEM_LOAD
        # One workspace slot and semaphore per split tile (every tile, or the tail's).
        serial_name, serial_source = serial_helper(p.workspace_slots * NREG * C * WARPGROUP, p.workspace_slots)
        TAIL, DP = p.split_tail, p.dp_tiles
        store_block, fuse = epilogue.store_block, epilogue.fuse
        D, Red, wg, warp, lane, rank, bx, by, m0, n0 = f.D, f.Red, f.wg, f.warp, f.lane, f.rank, f.bx, f.by, f.m0, f.n0

        def serial_op(op: int, index: Any, value: Any, x: Any = 0.0) -> Any:
            # The serial split-K helper (see serial_helper); its float result is the workspace load.
            return T.cuda.func_call(
                serial_name,
                op,
                index,
                value,
                T.float32(x) if isinstance(x, float) else x,
                source_code=serial_source,
                return_type="float32",
            )

        def cluster_sum(ptr: Any) -> Any:
            # Split-K: the fp32 at this shared-memory offset summed over the cluster's CTAs, in rank
            # order (the same order on every CTA: the result is bitwise reproducible).
            total = None
            for r in range(SPLIT):
                v = T.cuda.func_call(dsmem_name, ptr, r, source_code=dsmem_source, return_type="float32")
                total = v if total is None else total + v
            return total

        # fmt: off
        @T.inline
        def park_block(acc, c, mb):
            # Split-K: park the fragment in this CTA's shared memory, register-major
            # (Red[mb*NACC + r, thread]: a warp's 32 stores fill 128 consecutive bytes).
            for r in T.unroll(NACC):
                Red[mb * NACC + r, c * WARPGROUP + warp * 32 + lane] = acc[r]

        @T.inline
        def reduce_pair(c, t, q, m0, n0):
            # Registers q, q+1 (q even) of fragment block q // NACC: one row, two adjacent columns.
            grow = T.meta_var(m0 + c * ROW_BASE + q // NACC * WGMMA_M + 16 * warp + lane // 4
                              + 8 * ((q % NACC >> 1) & 1))
            gcol = T.meta_var(n0 + 8 * (q % NACC >> 2) + 2 * (lane % 4))
            lo = T.meta_var(fuse(cluster_sum(Red.ptr_to([q, t])), grow, gcol))
            hi = T.meta_var(fuse(cluster_sum(Red.ptr_to([q + 1, t])), grow, gcol + 1))
            if grow < M:
                if SWAP:
                    if gcol < N:
                        D[gcol, grow] = T.cast(lo, DT)
                    if gcol + 1 < N:
                        D[gcol + 1, grow] = T.cast(hi, DT)
                elif PAIRED:
                    if gcol < N:
                        T.evaluate(T.cuda.func_call(store2_name, D.ptr_to([grow, gcol]), lo, hi,
                                                    source_code=store2_source))
                else:
                    if gcol < N:
                        D[grow, gcol] = T.cast(lo, DT)
                    if gcol + 1 < N:
                        D[grow, gcol + 1] = T.cast(hi, DT)

        @T.inline
        def reduce_tile(c, m0, n0):
            # Split-K, after the cluster barrier: this CTA (rank) sums register pairs rank,
            # rank+SPLIT, ... of every consumer thread's fragment over the SPLIT CTAs of the
            # cluster, in rank order, and stores them: each output element once, by one CTA.
            t = T.meta_var(c * WARPGROUP + warp * 32 + lane)
            for i in T.unroll(-(-NREG // 2 // SPLIT)):
                q = T.meta_var(2 * (i * SPLIT + rank))  # the pair's first register
                if NREG // 2 % SPLIT == 0 or i * SPLIT + rank < NREG // 2:
                    reduce_pair(c, t, q, m0, n0)

        @T.inline
        def take_partial(acc, tile, t, mb):
            # acc += the workspace slot (register-major per tile, as the DSMEM reduction parks it).
            for r in T.unroll(NACC):
                acc[r] = acc[r] + serial_op(SK_LOAD, ((tile * NREG + mb * NACC + r) * C * WARPGROUP) + t, 0)

        @T.inline
        def hand_partial(acc, tile, t, mb):
            for r in T.unroll(NACC):
                T.evaluate(serial_op(SK_STORE, ((tile * NREG + mb * NACC + r) * C * WARPGROUP) + t, 0, acc[r]))

        @T.inline
        def signal(c, slot, value):
            # One thread of the consumers sets the slot's semaphore (releasing).
            if c == 0:
                if warp == 0:
                    if lane == 0:
                        T.evaluate(serial_op(SK_SIGNAL, slot, value))

        @T.inline
        def take_turn(c, acc0, acc1, slot, turn):
            # Wait (one thread, acquiring) until the slot's semaphore reads `turn`, then every
            # consumer thread adds the slot's partial tile to its fragment.
            t = T.meta_var(c * WARPGROUP + warp * 32 + lane)
            if c == 0:
                if warp == 0:
                    if lane == 0:
                        T.evaluate(serial_op(SK_WAIT, slot, turn))
            T.evaluate(serial_op(SK_BAR, SK_BAR_ID, C * WARPGROUP))
            take_partial(acc0, slot, t, 0)
            if MB == 2:
                take_partial(acc1, slot, t, 1)

        @T.inline
        def pass_turn(c, acc0, acc1, slot, turn):
            # Write the fragment to the slot, fence, meet the other consumers, then set the slot's
            # semaphore to `turn`.
            t = T.meta_var(c * WARPGROUP + warp * 32 + lane)
            hand_partial(acc0, slot, t, 0)
            if MB == 2:
                hand_partial(acc1, slot, t, 1)
            T.evaluate(serial_op(SK_FENCE, 0, 0))
            T.evaluate(serial_op(SK_BAR, SK_BAR_ID, C * WARPGROUP))
            signal(c, slot, turn)

        @T.inline
        def serial_epilogue(c, acc0, acc1, m0, n0):
            # Serial split-K: the tile's CTAs take turns (rank order) on a global fp32 workspace
            # slot, handing over through the tile's semaphore: rank r waits for turn r, adds the
            # slot (ranks 0..r-1's sum) to its fragment, and either writes the sum back and
            # passes the turn on, or (the last rank) stores D and resets the semaphore to 0 for
            # the next launch. One thread waits and signals; the consumers sync around it.
            if TAIL:
                tile = T.meta_var((bx - DP) // SPLIT)  # the tail tile's slot
            else:
                tile = T.meta_var(bx // SPLIT * GN + by)
            if rank > 0:
                take_turn(c, acc0, acc1, tile, rank)
            if rank < SPLIT - 1:
                pass_turn(c, acc0, acc1, tile, rank + 1)
            else:
                store_block(acc0, m0 + c * ROW_BASE, n0)
                if MB == 2:
                    store_block(acc1, m0 + c * ROW_BASE + WGMMA_M, n0)
                signal(c, tile, 0)

        @T.inline
        def stream_hand(c, acc0, acc1):
            # stream_k: this CTA's first piece holds the later k-tiles of a tile another CTA
            # (bx - 1) finishes: park the partial tile in slot bx, then raise its semaphore to 1.
            pass_turn(c, acc0, acc1, bx, 1)

        @T.inline
        def stream_take(c, acc0, acc1):
            # stream_k: this CTA's last piece holds a tile's first k-tiles and CTA bx + 1 the rest:
            # wait for its slot, add the partial, put the semaphore back to 0 for the next launch.
            take_turn(c, acc0, acc1, bx + 1, 1)
            signal(c, bx + 1, 0)

        @T.inline
        def park(c, acc0, acc1):
            park_block(acc0, c, 0)
            if MB == 2:
                park_block(acc1, c, 1)

        @T.inline
        def reduce_cluster():
            # Every CTA of the cluster has parked its fragment (barrier.cluster.arrive releases,
            # .wait acquires): the consumer threads reduce their share; the second barrier keeps
            # each CTA's shared memory alive until its peers have read it.
            T.cuda.cluster_sync()
            if wg < C:
                reduce_tile(wg, m0, n0)
            T.evaluate(T.cuda.func_call(CLUSTER_SYNC_RELAXED[0], source_code=CLUSTER_SYNC_RELAXED[1]))
        # fmt: on

        return cls(park, reduce_cluster, serial_epilogue, stream_hand, stream_take)
