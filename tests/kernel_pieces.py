"""Tiny kernels for testing one concern of a GEMM kernel alone (tests/test_hopper_pieces.py,
tests/test_blackwell_pieces.py).

`hopper_body(config, problem, use)` traces a kernel whose body is the Hopper kernel body's
preamble (tirtune/kernels/hopper/kernel.py: the operands as the kernel multiplies them, the CTA and
thread indices, the barriers the plan needs, the ring's tiles), its `Frame`, and then only what
`use(T, p, sk, f)` emits: a test builds one concern's bundle there and calls one of its macros.
The kernel is lowered to CUDA (TVM only, no nvcc) and the kernel function's body returned, where
the test counts what that piece must emit. `blackwell_body` is the same for the Blackwell kernel.
These kernels are never run: they only have to lower.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tirtune.builder import toolchain
from tirtune.core import Config, Problem
from tirtune.kernels.blackwell import plan as blackwell_plan
from tirtune.kernels.blackwell.frame import Frame as BlackwellFrame
from tirtune.kernels.hopper import plan as hopper_plan
from tirtune.kernels.hopper.frame import Frame as HopperFrame
from tirtune.kernels.hopper.kernel import ring_tiles
from tirtune.kernels.skeleton import Skeleton

Use = Callable[[Any, Any, Skeleton, Any], None]


def kernel_function(source: str) -> str:
    """The body of the __global__ function of a lowered module's CUDA source."""
    start = source.index('extern "C" __global__ void')
    return source[start : source.index("\n}\n", start)]


def count(name: str, body: str) -> int:
    """Calls of `name` (a device function or builtin, matched as a name followed by "(")."""
    return body.count(f"{name}(")


def hopper_source(config: Config, problem: Problem, use: Use) -> str:
    """The whole CUDA source (helpers, kernel, host wrapper) of the tiny Hopper kernel."""

    def template(config: Config, problem: Problem) -> Any:
        from tvm.backend.cuda.lang.pipeline import MBarrier, TMABar
        from tvm.script import tirx as T

        p = hopper_plan(config, problem)
        K, DT, (PM, PN), (GM, GN) = p.k, p.dtype, p.problem_shape, p.grid
        S, C, NWG, SWAP, CL, SPLIT = p.stages, p.consumers, p.warpgroups, p.swap_ab, p.cluster, p.split_k
        PERSIST, PINGPONG, EWG = p.persistent, p.pingpong, p.epilogue_warpgroup
        CLUSTERED = CL > 1 or (SPLIT > 1 and not p.serial_split)
        NBUF = 2 if p.epilogue == "tma_chunked" else 1
        GRID = p.tile_schedule.ctas
        sk = Skeleton.trace(T, p)

        # fmt: off
        @T.prim_func
        def main(A: T.Buffer((PM, K), DT), B: T.Buffer((PN, K), DT), D: T.Buffer((PM, PN), DT)):
            T.device_entry()
            if SWAP:
                XA = T.meta_var(B)
                XB = T.meta_var(A)
            else:
                XA = T.meta_var(A)
                XB = T.meta_var(B)
            if PERSIST:
                bx = T.cta_id([GRID])
                by = T.meta_var(0)
            else:
                bx, by = T.cta_id([GM * SPLIT, GN])
            if CLUSTERED:
                rank, _rank_y = T.cta_id_in_cluster([max(CL, SPLIT), 1])
            else:
                rank = T.meta_var(0)
            wg = T.warpgroup_id([NWG])
            warp = T.warp_id_in_wg([4])
            lane = T.lane_id([32])
            pool = T.SMEMPool()
            full = TMABar(pool, S)
            empty = MBarrier(pool, S)
            if PINGPONG:
                order = MBarrier(pool, 2)
            else:
                order = T.meta_var(None)
            if EWG:
                staged = MBarrier(pool, C * NBUF)
                drained = MBarrier(pool, C * NBUF)
            else:
                staged, drained = T.meta_var((None, None))
            As, Bs, Ds, Dt, Red = T.meta_var(ring_tiles(sk, pool, p))
            f = T.meta_var(HopperFrame(XA, XB, D, As, Bs, Ds, Dt, Red, full, empty, order, staged, drained,
                                       wg, warp, lane, rank, bx // max(CL, 1), bx, by, 0, 0, p.cta_k_tiles))
            use(T, p, sk, f)
        # fmt: on

        return main

    return toolchain.lower_to_cuda(config, problem, template)


def hopper_body(config: Config, problem: Problem, use: Use) -> str:
    """The kernel function of the tiny Hopper kernel: the preamble, then `use`'s statements."""
    return kernel_function(hopper_source(config, problem, use))


def blackwell_body(config: Config, problem: Problem, use: Use) -> str:
    """The kernel function of the tiny Blackwell kernel (lowered for sm_100a)."""

    def template(config: Config, problem: Problem) -> Any:
        from tvm.backend.cuda.lang.pipeline import MBarrier, TCGen05Bar, TMABar
        from tvm.script import tirx as T
        from tvm.tirx.layout import S, TCol, TileLayout, TLane

        from tirtune.space.blackwell.rules import CONSUMER_ROWS, EPILOGUE_CHUNK, TMEM_COLUMNS

        p = blackwell_plan(config, problem)
        M, N, K, DT, BK, ST, C, CG = p.m, p.n, p.k, p.dtype, p.blk_k, p.stages, p.consumers, p.cta_group
        ROWS, BROWS, EPI, NWG, GRID = CONSUMER_ROWS, p.b_rows, EPILOGUE_CHUNK, p.warpgroups, p.ctas
        TMA_EPI = p.epilogue == "tma"
        sk = Skeleton.trace(T, p)

        # fmt: off
        @T.prim_func
        def main(A: T.Buffer((M, K), DT), B: T.Buffer((N, K), DT), D: T.Buffer((M, N), DT)):
            T.device_entry()
            bx = T.cta_id([GRID])
            if CG == 2:
                rank, _unused = T.cta_id_in_cluster([2, 1])
            else:
                rank = T.meta_var(0)
            wg = T.warpgroup_id([NWG])
            warp = T.warp_id_in_wg([4])
            lane = T.lane_id([32])
            pool = T.SMEMPool()
            full = TMABar(pool, ST)
            empty = TCGen05Bar(pool, ST)
            acc_full = TCGen05Bar(pool, C)
            acc_empty = MBarrier(pool, C)
            As, Bs, Ds = T.meta_var(sk.ring_tiles(pool, (ST, C, ROWS, BK), (ST, BROWS, BK),
                                                  (C, ROWS, EPI) if TMA_EPI else None))
            tmem = T.decl_buffer((ROWS, TMEM_COLUMNS), "float32", scope="tmem", allocated_addr=0,
                                 layout=TileLayout(S[(ROWS, TMEM_COLUMNS):(1 @ TLane, 1 @ TCol)]))
            if CG == 2:
                full0 = full.remote_view(0)
                acc_empty0 = acc_empty.remote_view(0)
            else:
                full0, acc_empty0 = T.meta_var((None, None))
            f = T.meta_var(BlackwellFrame(A, B, D, As, Bs, Ds, tmem, full, empty, acc_full, acc_empty, full0,
                                          acc_empty0, wg, warp, lane, rank, bx // CG))
            use(T, p, sk, f)
        # fmt: on

        return main

    return kernel_function(toolchain.lower_to_cuda(config, problem, template, arch="sm_100a"))
