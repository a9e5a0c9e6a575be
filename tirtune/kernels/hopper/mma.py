"""The Hopper kernel's MMA: wgmma from the ring into register accumulators, and the consumers' k loop.

* A consumer warpgroup owns `m_blocks` m64 blocks of its tile's rows (64 or 128 rows), each with
  its own fp32 fragment of blk_n/2 registers a thread (`acc0`, `acc1`). A k-tile is blk_k/16 k16
  steps (blk_k/32 k32 steps for e4m3); each step encodes the A and B shared-memory descriptors
  (K-major, 128B swizzle: ptr_to applies the swizzle, which at a row that is a multiple of 8 is
  the identity, so a step is the atom's base plus 32 B) and issues one m64nNk16 (k32) wgmma a block.
* The ring (`mainloop`, `k_tile`): wait for the stage's `full` barrier, multiply, commit; wgmma
  keeps one commit group in flight (wait_group 1), so k-tile kt-1's stage is released while kt's
  MMAs run (`release`: one thread a consumer warpgroup, in every CTA of the cluster, whose
  producers multicast into the stage). With one stage: wait_group 0, then release. Persistent:
  the last stage of each tile is released too. Without a producer warpgroup, thread 0 of
  consumer 0 loads k-tile kt+stages-1 after releasing kt-1 (a classic multistage prefetch), or,
  with one stage, loads the k-tile and then waits for it. loader "threads": the CTA copies the
  k-tile itself between two CTA barriers (`loads.thread_load`).
* Ping-pong: a consumer arrives on its `order` barrier once it has waited for every stage of its
  tile, so the other consumer may start on the ring.
* trim (ragged edges): an m64 block whose rows all lie past M issues no wgmma, the last tile
  column multiplies with a wgmma as wide as its valid columns (rounded up to 8; its fragment is a
  prefix of the full one), and the last k-tile stops after its last k16 step that starts before
  K. Uniform branches, per k-tile, each around a whole run of wgmmas (`mma_trimmed`).
* peel_k: the k loop runs one k-tile short and the last k-tile follows it as straight-line code
  issuing only its k16 steps that start before K: the tail's zero-padded MMAs are skipped with no
  branch in the loop (measured against trim in docs/perf-notes.md, "peel_k").

* Block scales (FP8, core/epilogue.py; `block_mainloop`): a k-tile is one 128-deep k block
  (rules.fp8_block_k_tile). Its product goes to fragments of its own (tmp0, tmp1: the first k32
  step overwrites them, scale-d false; one array a m64 block holds the sums, the product and the
  scales, `fragment_regs`), the block's scales are read while the wgmma run (without
  swap_ab A's scales of the thread's two rows of each m64 block and B's one a 128 columns of the
  tile; with it B's one of the block's 64 rows and A's of the thread's blk_n/4 columns), then the
  consumer waits for the k-tile (wait_group 0: the fragments are read next), hands its stage back
  and adds tmp * scale_a * scale_b to the tile's sums: one FFMA a register. The k block a k-tile
  holds is the loads' (`Loads.k_index`: split-K's rank, the tail split, k_rotate). The consumer
  holds twice the accumulators (rules.fp8_block_registers). With two product buffers
  (rules.fp8_block_buffers: a third fragment's registers and two stages) the k loop takes k-tiles
  in pairs: both issued, wait_group 1 retires the first, promoted while the second's wgmma run,
  then wait_group 0 and the second's promotion (an odd last k-tile alone). No commit group stays
  in flight across the loop's back edge: that made ptxas serialize every wgmma (C7514).
  block_stagger (rules.block_stagger_supported): odd consumers multiply their first k-tile alone
  and pair the rest, so that each pair's end (wait_group 0, a promotion with none of the
  consumer's own wgmma in flight) falls while an even consumer's wgmma run.

`Mma.trace` builds the macros from the plan, the skeleton's ring, the kernel body's `Frame` and
the loads (which the non-specialized mainloop issues itself).
"""

# The @T.inline macros are parsed by TVMScript, which reads parameter annotations as TIR types;
# they stay unannotated.
# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tirtune.core.epilogue import BLOCK_K
from tirtune.kernels.hopper.frame import Frame
from tirtune.kernels.hopper.loads import Loads
from tirtune.kernels.hopper.plan import WGMMA_M, KernelPlan
from tirtune.kernels.skeleton import Ring
from tirtune.space.hopper.rules import fp8_block_scale_regs

__all__ = ["DESC_LBO", "DESC_SBO", "DESC_SWIZZLE_128B", "Mma"]

# Descriptor fields for a K-major 128B-swizzled tile: the stride between 8-row core groups is
# 8 rows x 128 B = 1024 B, in 16 B units; the leading offset is unused with swizzling.
DESC_LBO = 1
DESC_SBO = 64
DESC_SWIZZLE_128B = 3


@dataclass(frozen=True, slots=True)
class Mma:
    """The consumers' MMA macros (TVMScript, called from the consumer roles).

    mainloop(c, acc0, acc1, desc_a, desc_b, j0, m0, n0): consumer c's whole k loop over the tile at
        (m0, n0) into its zeroed fragments acc0 (acc1: the second m64 block, when it has one), with
        desc_a/desc_b its descriptor registers; j0 is the CTA's k-tiles before this tile (its ring
        position).
    release(stage): free a stage for the loads (one thread a consumer warpgroup, every CTA of the
        cluster).
    mainloop_span(c, acc0, acc1, desc_a, desc_b, j0, count, m0, n0): stream_k: the same over
        `count` consecutive k-tiles of the tile (a run-time count), from ring position j0.
    block_mainloop(c, acc0, acc1, desc_a, desc_b, j0, m0, n0): the block scales' k loop: each
        k-tile's product into the second part of acc0 (acc1), scaled and added to its first part.
    fragment_regs: the fp32 registers of one m64 block's fragment array: acc_regs, or with block
        scales twice that plus the scales a thread reads for the block.
    """

    mainloop: Any
    release: Any
    mainloop_span: Any
    block_mainloop: Any
    fragment_regs: int

    @classmethod
    def trace(cls, T: Any, p: KernelPlan, ring: Ring, f: Frame, loads: Loads) -> Mma:
        M, N, BN, BK, S, KT = p.m, p.n, p.blk_n, p.blk_k, p.stages, p.cta_k_tiles
        # WGMMA_K: k of one wgmma step (16 of f16/bf16, 32 of e4m3: 32 bytes either way); the
        # e4m3 wgmma takes no transpose immediates (TRANS: the 16-bit forms' two zeros).
        WGMMA_K, TRANS = p.wgmma_k, ((0, 0) if p.wgmma_transposes else ())
        MB, NACC, ROW_BASE, CL = p.m_blocks, p.acc_regs, p.row_base, p.cluster
        WS, PERSIST, PINGPONG, THREADS = p.warp_specialized, p.persistent, p.pingpong, p.loader == "threads"
        # trim: the last tile column's narrower wgmma (TRIM_N columns), the last k-tile's live k16
        # steps (TRIM_K), the m64 blocks wholly past M skipped (TRIM_M); TRIM: any of them.
        TRIM_N, TRIM_K, TRIM_M = p.trim_n, p.trim_k, p.trim_m
        TRIM = bool(TRIM_N or TRIM_K or TRIM_M)
        # peel_k: the consumers' k loop runs LOOP_KT k-tiles, the last (PEELED) follows it with its
        # PEEL_K live k16 steps.
        PEEL_K = p.peel_k
        PEELED = PEEL_K > 0
        # f.k_count: KT, or (split_k_scope "tail") the CTA's own count, an expression.
        LOOP_KT = f.k_count - 1 if PEELED else f.k_count
        # Block scales (FP8, core/epilogue.py): each k-tile (one 128-deep k block) is multiplied into
        # fragments of its own (`tmp0`, `tmp1`), which are then scaled by the block's two scales and
        # added to the tile's sums (`promote`).
        BLOCK, SWAP, X = p.block_scaled, p.swap_ab, f.fused
        PM, NBLK = p.problem_shape[0], -(-p.problem_shape[1] // BLOCK_K)  # rows of A, 128-row blocks of B
        # Scales a thread reads for one m64 block: without swap_ab A's two rows' and B's (one a
        # 128 columns of the tile); with it B's one (the block's 64 rows lie in one 128-row block)
        # and A's, one a column of the fragment (blk_n / 4).
        B_GROUPS = max(1, BN // BLOCK_K)
        SCALES = fp8_block_scale_regs(BN, SWAP)
        # A block-scaled consumer's fragment, one array a m64 block: the sums (NACC), then for each
        # of its BUFFERS k-tile products (rules.fp8_block_buffers) the product (from TMP[b]) and its
        # scales (from SCL[b]): `fragment_regs` in all. Buffer 0 lies where the one-buffer kernel
        # has always kept its product and scales.
        BUFFERS, STAGGER = p.block_buffers, p.block_stagger
        TMP = tuple(NACC + b * (NACC + SCALES) for b in range(BUFFERS))
        SCL = tuple(t + NACC for t in TMP)
        k_index = loads.k_index
        wgmma = T.ptx[p.wgmma_name]
        wgmma_narrow = T.ptx[p.wgmma_of(TRIM_N)] if TRIM_N else None
        As, Bs, full, empty, order, warp, lane = f.As, f.Bs, f.full, f.empty, f.order, f.warp, f.lane
        load_tile, thread_load = loads.load_tile, loads.thread_load

        # fmt: off
        @T.inline
        def release(stage):
            # One thread per consumer warpgroup frees a stage: in every CTA of the cluster, whose
            # producers multicast into it.
            if warp == 0:
                if lane == 0:
                    if CL == 1:
                        empty.arrive(stage)
                    else:
                        for r in range(CL):
                            empty.arrive(stage, remote=r)

        @T.inline
        def await_stage(c, j0, m0, n0, kt):
            # Wait for k-tile kt's stage; without a producer and with one stage (no ring to run
            # ahead in), thread 0 of consumer 0 loads it first.
            if not WS:
                if S == 1:
                    if c == 0:
                        if warp == 0:
                            if lane == 0:
                                load_tile(j0 + kt, kt, m0, n0)
            full.wait(ring.slot(j0 + kt), ring.phase(j0 + kt))

        @T.inline
        def prefetch(c, j0, m0, n0, kt):
            # Without a producer, thread 0 of consumer 0 loads the k-tile stages-1 ahead once kt's
            # predecessor's stage is free (a classic multistage prefetch).
            if not WS:
                if S > 1:
                    if c == 0:
                        if warp == 0:
                            if lane == 0:
                                if kt + S - 1 < KT:
                                    load_tile(j0 + kt + S - 1, kt + S - 1, m0, n0)

        @T.inline
        def describe(desc_a, desc_b, s, row, ki):
            # The A and B descriptors of k step ki of stage s (A from `row`). ptr_to applies the
            # swizzle; at a row that is a multiple of 8 it is the identity, so this is the atom's
            # base plus 32 B per k step, what the descriptor wants.
            T.cuda.wgmma.encode_matrix_descriptor(
                T.address_of(desc_a[0]), As.ptr_to([s, row, ki * WGMMA_K]),
                DESC_LBO, DESC_SBO, DESC_SWIZZLE_128B)
            T.cuda.wgmma.encode_matrix_descriptor(
                T.address_of(desc_b[0]), Bs.ptr_to([s, 0, ki * WGMMA_K]),
                DESC_LBO, DESC_SBO, DESC_SWIZZLE_128B)

        @T.inline
        def block_steps(acc, desc_a, desc_b, s, row, b):
            # Block scales: the k-tile's product alone into product buffer b of the fragment (TMP[b]
            # on), its first step overwriting (scale-d false), the rest adding.
            for ki in T.unroll(BK // WGMMA_K):
                describe(desc_a, desc_b, s, row, ki)
                wgmma(*[acc[TMP[b] + i] for i in range(NACC)], desc_a[0], desc_b[0], ki > 0, 1, 1, *TRANS)

        @T.inline
        def read_scales(acc, row0, n0, kb, b):
            # The block's scales this thread's fragment needs (module docstring), into buffer b's,
            # read before the k-tile's wgmma retire so that their latency hides under them. Rows and
            # columns past the problem read its last ones (their sums are never stored).
            if SWAP:
                # The kernel's rows are the problem's N (B's rows), its columns the problem's M.
                acc[SCL[b]] = X.scale_b_block[T.min(row0 // BLOCK_K, NBLK - 1), kb]
                for q in T.unroll(BN // 8):
                    for e in T.unroll(2):
                        col = T.meta_var(T.min(n0 + 8 * q + 2 * (lane % 4) + e, PM - 1))
                        acc[SCL[b] + 1 + 2 * q + e] = X.scale_a_block[kb, col]
            else:
                for h in T.unroll(2):
                    acc[SCL[b] + h] = X.scale_a_block[kb, T.min(row0 + 16 * warp + lane // 4 + 8 * h, PM - 1)]
                for g in T.unroll(B_GROUPS):
                    acc[SCL[b] + 2 + g] = X.scale_b_block[T.min(n0 // BLOCK_K + g, NBLK - 1), kb]

        @T.inline
        def promote(acc, b):
            # sum += product * (A's scale x B's scale) from buffer b, register r at row 16*warp +
            # lane/4 + 8*((r>>1)&1), column 8*(r>>2) + 2*(lane%4) + (r&1) of its m64 block.
            for r in T.unroll(NACC):
                if SWAP:
                    acc[r] = acc[r] + acc[TMP[b] + r] * (acc[SCL[b]] * acc[SCL[b] + 1 + 2 * (r >> 2) + (r & 1)])
                else:
                    sb = T.meta_var(acc[SCL[b] + 2 + 8 * (r >> 2) // BLOCK_K])  # B's scale of the column's block
                    acc[r] = acc[r] + acc[TMP[b] + r] * (acc[SCL[b] + ((r >> 1) & 1)] * sb)

        @T.inline
        def block_issue(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, kt, b):
            # Block scales: k-tile kt (a 128-deep k block, rules.fp8_block_k_tile) into product
            # buffer b as one commit group, then its scales read while it runs.
            await_stage(c, j0, m0, n0, kt)
            s = T.meta_var(ring.slot(j0 + kt))
            kb = T.meta_var(k_index(kt, m0, n0))
            T.ptx.wgmma.fence.sync.aligned()
            block_steps(acc0, desc_a, desc_b, s, c * ROW_BASE, b)
            if MB == 2:
                block_steps(acc1, desc_a, desc_b, s, c * ROW_BASE + WGMMA_M, b)
            T.ptx.wgmma.commit_group.sync.aligned()
            read_scales(acc0, m0 + c * ROW_BASE, n0, kb, b)
            if MB == 2:
                read_scales(acc1, m0 + c * ROW_BASE + WGMMA_M, n0, kb, b)

        @T.inline
        def block_retire(acc0, acc1, j0, kt, b, pending):
            # Wait until at most `pending` commit groups are in flight, which retires k-tile kt's
            # (buffer b's: its registers are read next), hand its stage back and add its scaled
            # product to the sums.
            T.ptx.wgmma.wait_group.sync.aligned(pending)
            release(ring.slot(j0 + kt))
            promote(acc0, b)
            if MB == 2:
                promote(acc1, b)

        @T.inline
        def block_k_tile(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, kt):
            # One product buffer: multiply k-tile kt, read its scales while it runs, wait for it
            # (the fragments are read next), hand the stage back and add the scaled product to the
            # sums; the tensor cores wait for the promotion.
            block_issue(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, kt, 0)
            block_retire(acc0, acc1, j0, kt, 0, 0)
            prefetch(c, j0, m0, n0, kt)

        @T.inline
        def mma_steps(acc, desc_a, desc_b, s, row, steps, narrow):
            # The first `steps` k16 steps of a stage, with the full wgmma or (narrow, trim) the
            # last tile column's TRIM_N wide one, whose fragment is the first TRIM_N/2 registers
            # of the full one. A trimmed tile takes its branches per k-tile, around a whole run of
            # wgmmas, never between two of them.
            for ki in T.unroll(steps):
                describe(desc_a, desc_b, s, row, ki)
                if narrow:
                    wgmma_narrow(*[acc[i] for i in range(TRIM_N // 2)], desc_a[0], desc_b[0], True, 1, 1, *TRANS)  # type: ignore[misc]
                else:
                    wgmma(*[acc[i] for i in range(NACC)], desc_a[0], desc_b[0], True, 1, 1, *TRANS)

        @T.inline
        def mma_depth(acc, desc_a, desc_b, s, row, kt, narrow):
            # The last k-tile issues only its TRIM_K steps that start before K.
            if TRIM_K > 0:
                if kt < KT - 1:
                    mma_steps(acc, desc_a, desc_b, s, row, BK // WGMMA_K, narrow)
                else:
                    mma_steps(acc, desc_a, desc_b, s, row, TRIM_K, narrow)
            else:
                mma_steps(acc, desc_a, desc_b, s, row, BK // WGMMA_K, narrow)

        @T.inline
        def mma_width(acc, desc_a, desc_b, s, row, n0, kt):
            if TRIM_N > 0:
                if n0 + BN > N:
                    mma_depth(acc, desc_a, desc_b, s, row, kt, True)
                else:
                    mma_depth(acc, desc_a, desc_b, s, row, kt, False)
            else:
                mma_depth(acc, desc_a, desc_b, s, row, kt, False)

        @T.inline
        def mma_trimmed(acc, desc_a, desc_b, s, row, m0, n0, kt):
            # An m64 block whose rows all lie past M issues no wgmma (its fragment stays zero;
            # the epilogue's stores of it are clipped or guarded).
            if TRIM_M:
                if m0 + row < M:
                    mma_width(acc, desc_a, desc_b, s, row, n0, kt)
            else:
                mma_width(acc, desc_a, desc_b, s, row, n0, kt)

        @T.inline
        def k_tile(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, kt, steps):
            # One k-tile of the consumers' loop: wait for its stage (or load it), issue its first
            # `steps` k16 steps of wgmma, hand the previous stage back.
            if THREADS:
                # Every consumer thread copies 16-byte chunks into the swizzled stage, then
                # the writes are fenced to the async proxy wgmma reads through.
                T.cuda.cta_sync()  # the previous k-tile's wgmma (all warpgroups) retired
                thread_load(c, kt, m0, n0)
                T.ptx.fence.proxy.async_.shared__cta()
                T.cuda.cta_sync()
            else:
                await_stage(c, j0, m0, n0, kt)
            s = T.meta_var(ring.slot(j0 + kt))
            T.ptx.wgmma.fence.sync.aligned()
            if TRIM:
                mma_trimmed(acc0, desc_a, desc_b, s, c * ROW_BASE, m0, n0, kt)
                if MB == 2:
                    mma_trimmed(acc1, desc_a, desc_b, s, c * ROW_BASE + WGMMA_M, m0, n0, kt)
            else:
                mma_steps(acc0, desc_a, desc_b, s, c * ROW_BASE, steps, False)
                if MB == 2:
                    mma_steps(acc1, desc_a, desc_b, s, c * ROW_BASE + WGMMA_M, steps, False)
            T.ptx.wgmma.commit_group.sync.aligned()
            if S == 1:
                T.ptx.wgmma.wait_group.sync.aligned(0)
                if not THREADS:
                    release(s)
            else:
                # Keep this tile's wgmma group in flight; the previous one has now retired, so
                # its stage goes back to the loader.
                T.ptx.wgmma.wait_group.sync.aligned(1)
                if kt > 0:
                    release(ring.slot(j0 + kt - 1))
            prefetch(c, j0, m0, n0, kt)

        @T.inline
        def zero_fragments(acc0, acc1):
            for i in T.unroll(NACC):
                acc0[i] = T.float32(0)
                if MB == 2:
                    acc1[i] = T.float32(0)

        @T.inline
        def block_pairs(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, first, count):
            # Two product buffers: `count` k-tiles from k-tile `first` (a Python int) in pairs, the
            # first into buffer 0 and the second into buffer 1, then a wait for the first alone
            # (wait_group 1) and its promotion while the second's wgmma run, then for the second.
            # No group stays in flight across the loop's back edge: where one did (each k-tile's
            # wgmma issued before the last one's promotion), ptxas serialized every wgmma (C7514).
            # An odd last k-tile runs alone.
            for kp in range(count // 2):
                kt = T.meta_var(2 * kp if first == 0 else first + 2 * kp)
                block_issue(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, kt, 0)
                prefetch(c, j0, m0, n0, kt)
                block_issue(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, kt + 1, 1)
                block_retire(acc0, acc1, j0, kt, 0, 1)
                prefetch(c, j0, m0, n0, kt + 1)
                block_retire(acc0, acc1, j0, kt + 1, 1, 0)
            if count % 2 == 1:
                block_issue(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, f.k_count - 1, 0)
                block_retire(acc0, acc1, j0, f.k_count - 1, 0, 0)
                prefetch(c, j0, m0, n0, f.k_count - 1)

        @T.inline
        def block_mainloop(c, acc0, acc1, desc_a, desc_b, j0, m0, n0):
            # Block scales: every k-tile's stage is handed back as soon as its product is summed.
            zero_fragments(acc0, acc1)
            if BUFFERS == 1:
                for kt in range(f.k_count):
                    block_k_tile(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, kt)
            elif STAGGER:
                # block_stagger: an odd consumer takes its first k-tile alone, then pairs from
                # the second, so its pairs end (wait_group 0, then a promotion with no wgmma of its
                # own in flight) half a pair away from an even consumer's, whose wgmma then keep the
                # tensor cores busy. Both branches are uniform over a warpgroup.
                if c % 2 == 0:
                    block_pairs(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, 0, f.k_count)
                elif f.k_count > 0:  # a tail split's CTA may own no k-tile
                    block_k_tile(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, 0)
                    block_pairs(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, 1, f.k_count - 1)
            else:
                block_pairs(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, 0, f.k_count)
            if PINGPONG:
                if warp == 0:
                    if lane == 0:
                        order.arrive(c)

        @T.inline
        def mainloop(c, acc0, acc1, desc_a, desc_b, j0, m0, n0):
            # j0: k-tiles this CTA consumed before this output tile (0 without a persistent loop).
            zero_fragments(acc0, acc1)
            # peel_k: the last k-tile runs after the loop with only its PEEL_K live k16 steps
            # (straight-line code: no branch in the loop's body).
            for kt in range(LOOP_KT):
                k_tile(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, kt, BK // WGMMA_K)
            if PEELED:
                k_tile(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, KT - 1, PEEL_K)
            if PINGPONG:
                # Every stage of this tile has landed (this thread waited for each): the other
                # consumer may start waiting on the ring for its next tile.
                if warp == 0:
                    if lane == 0:
                        order.arrive(c)
            if S > 1:
                T.ptx.wgmma.wait_group.sync.aligned(0)
                if PERSIST:
                    # The next tile's loads reuse this tile's last stage too.
                    release(ring.slot(j0 + KT - 1))

        @T.inline
        def mainloop_span(c, acc0, acc1, desc_a, desc_b, j0, count, m0, n0):
            # stream_k (a producer, no trim, peel or thread loader: rules.stream_k_supported): the
            # piece of a tile this CTA multiplies, `count` k-tiles from ring position j0; which of
            # the tile's k-tiles they are is the producer's business.
            zero_fragments(acc0, acc1)
            for kt in range(count):
                k_tile(c, acc0, acc1, desc_a, desc_b, j0, m0, n0, kt, BK // WGMMA_K)
            T.ptx.wgmma.wait_group.sync.aligned(0)
            release(ring.slot(j0 + count - 1))
        # fmt: on

        return cls(
            mainloop, release, mainloop_span, block_mainloop, NACC + BUFFERS * (NACC + SCALES) if BLOCK else NACC
        )
