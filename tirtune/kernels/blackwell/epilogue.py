"""The Blackwell kernel's epilogue: the TMEM accumulators back to D, 64 columns at a time.

`writeback` waits until consumer c's accumulator is complete (`acc_full`), then per 64-column
chunk (EPILOGUE_CHUNK) reads it with tcgen05.ld (32x32b.x64: thread t of the warpgroup gets row t
of the consumer's 128 rows) and stores it (`store_chunk`). Once the last chunk is in registers it
releases the accumulator (`acc_empty`: CTA 0's, in a pair, where both CTAs' writeback threads
arrive), so the next tile's MMAs overlap the stores.

* "register": with N % 8 == 0 one 16-byte store of eight 16-bit values per 8 columns (`store8`),
  otherwise element by element, guarded on M and N.
* "tma": the chunk, converted, goes into a 128 x 64 swizzled staging chunk per consumer, and one
  thread TMA-stores it (TMA clips at the edges) after the previous chunk's store has read the
  staging (cp.async.bulk.wait_group.read); the kernel's end waits for every store
  (`stores_done`).
"""

# The @T.inline macros are parsed by TVMScript, which reads parameter annotations as TIR types;
# they stay unannotated.
# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tirtune.kernels.blackwell.frame import Frame
from tirtune.kernels.blackwell.plan import BlackwellPlan
from tirtune.kernels.skeleton import HALF2
from tirtune.space.blackwell.rules import CONSUMER_ROWS, EPILOGUE_CHUNK

__all__ = ["Epilogue", "store8_helper"]


def store8_helper(dtype: str) -> tuple[str, str]:
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


@dataclass(frozen=True, slots=True)
class Epilogue:
    """The epilogue's macros (TVMScript).

    writeback(c, it, tm, tn): consumer warpgroup c writes back its accumulator of cluster tile
        (tm, tn), the `it`-th of the CTA's walk (the accumulator barriers' phase).
    stores_done(): one thread waits until every TMA store is done (shared memory stays valid).
    """

    writeback: Any
    stores_done: Any

    @classmethod
    def trace(cls, T: Any, p: BlackwellPlan, f: Frame) -> Epilogue:
        from tvm.script.tirx import tile as Tx
        from tvm.tirx.layout import S, TileLayout, tid_in_wg

        M, N, DT, BN, CG = p.m, p.n, p.dtype, p.blk_n, p.cta_group
        ROWS, EPI = CONSUMER_ROWS, EPILOGUE_CHUNK
        CTM, CTN = p.cluster_tile
        TMA_EPI = p.epilogue == "tma"
        CHUNKS = BN // EPI
        VEC8 = N % 8 == 0  # every 8-column group of a row starts 16-byte aligned
        store8_name, store8_source = store8_helper(DT)
        fence_after = T.ptx["tcgen05.fence::after_thread_sync"]
        wait_ld = T.ptx["tcgen05.wait::ld.sync.aligned"]
        proxy_fence = T.ptx["fence.proxy.async.shared::cta"]
        bulk_commit = T.ptx["cp.async.bulk.commit_group"]
        bulk_wait_read = T.ptx["cp.async.bulk.wait_group.read"]
        bulk_wait = T.ptx["cp.async.bulk.wait_group"]
        D, Ds, tmem, acc_full, acc_empty, acc_empty0 = f.D, f.Ds, f.tmem, f.acc_full, f.acc_empty, f.acc_empty0
        warp, lane, rank = f.warp, f.lane, f.rank

        # fmt: off
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
        def stores_done():
            if warp == 0:
                if lane == 0:
                    bulk_wait(0)  # shared memory stays valid until the last store is done
        # fmt: on

        return cls(writeback, stores_done)
