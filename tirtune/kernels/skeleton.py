"""The GEMM template's shared skeleton: the parts both branches trace (docs/design.md, "One
template, several architectures").

`gemm.build(config, problem, arch)` is the template's one entry: it hands the pair to the
architecture's branch, the package `hopper` (sm_90a) or `blackwell` (sm_100a), and each branch is
this skeleton plus its own part. Written once, here:

* the plan's common part (`GemmPlan`, filled by `plan_fields`): problem and tile sizes, k-tiles,
  warpgroups and threads, and the tile schedule (`TileSchedule`: the grid of cluster tiles, the
  clusters launched, the iterations of the persistent loop);
* the shared-memory pool's tiles (`Skeleton.ring_tiles`): after the branch's barriers, from a
  1024-byte boundary, a ring of `stages` A and B tiles and the optional output staging tile,
  all 128B-swizzled and K-major (`swizzled_layout`);
* the mbarrier ring's bookkeeping (`Ring`): a CTA's k-tile j uses stage j % stages with parity
  (j // stages) & 1, and the producer waits for the parity before it (a fresh barrier passes it);
* barrier publication (`Skeleton.publish_barriers`): the init fence, then a CTA or cluster barrier;
* the tile mapping (`raster`: groups of raster_group tile rows, column-major inside a group) and
  the persistent loop over a cluster's tiles (`Skeleton.for_each_tile`);
* the TMA producer's loop (`Skeleton.produce_tiles`): every k-tile of every tile, in ring order;
* the thread loader's guarded 16-byte copy (`Skeleton.copy_chunk`, zeros past M, N and K, with the
  helper's CUDA from `copy16_helper`), and the type spellings (`PTX_TYPE`, `HALF2`).

Element sizes: A and B are 2-byte (f16, bf16) or 1-byte (e4m3) elements, and D has the problem's
`out_dtype` (bf16 for e4m3 operands). A 128-byte swizzle row holds `GemmPlan.atom_k` elements (64
or 128): the TMA boxes and the k-tile's atoms count in it.

Per architecture, in the branch modules, because they differ in substance: the barriers
themselves (the `empty` barrier is released by consumer threads on Hopper and by tcgen05.commit
on Blackwell, which adds the accumulator barriers and a TMEM slot), the boxes the producer loads
(multicast slices of a cluster's shared operand on Hopper; per-consumer A and half of B in a CTA
pair on Blackwell, whose bytes land on CTA 0's barrier), the warp roles, the MMA issue and the
accumulator's home (wgmma into registers / tcgen05.mma into TMEM), and the epilogue (fragment
stores or stmatrix staging / tcgen05.ld in 64-column chunks).

A branch builds its `Skeleton` inside its trace (TVM is imported there, so the space and its
rules stay importable without TVM) and calls its macros from the kernel body. The branches' own
modules follow the same pattern: a frozen bundle of macros built from the plan (and from the
kernel body's `Frame`, what the body made), which closes over only what it was given. Every piece here
traces to exactly the statements the branches wrote before they shared it: the kernels'
CUDA source is checked byte for byte (tests/test_template_fold.py).
"""

# The @T.inline macros are parsed by TVMScript, which reads parameter annotations as TIR types;
# they stay unannotated.
# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tirtune.core.config import Config
from tirtune.core.problem import Problem, dtype_bytes, out_dtype_of

__all__ = [
    "ATOM_K",
    "HALF2",
    "PTX_TYPE",
    "SWIZZLE_ROW_BYTES",
    "TILE_ALIGN",
    "WARPGROUP",
    "GemmPlan",
    "Ring",
    "Skeleton",
    "TileSchedule",
    "copy16_helper",
    "plan_fields",
    "raster",
    "swizzled_layout",
]

WARPGROUP = 128
ATOM_K = 64  # elements of a 2-byte dtype in one 128-byte swizzle atom row
SWIZZLE_ROW_BYTES = 128  # one row of the 128B swizzle atom: ATOM_K 2-byte or 128 1-byte elements
TILE_ALIGN = 1024  # 128B swizzle repeats every 8 rows of 128 B: tiles start 1024 B aligned
PTX_TYPE = {"float16": "f16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3"}
# CUDA spellings of a 16-bit element, the fp32-pair conversion and the pair type.
HALF2 = {
    "float16": ("half", "__floats2half2_rn", "half2"),
    "bfloat16": ("nv_bfloat16", "__floats2bfloat162_rn", "nv_bfloat162"),
}


@dataclass(frozen=True, slots=True)
class TileSchedule:
    """Which output tiles each cluster computes.

    The output is a grid_m x grid_n grid of cluster tiles (a cluster tile is `cluster` adjacent
    CTA tiles; without a cluster, one CTA tile). `clusters` clusters are launched; cluster c
    computes the tiles c, c + clusters, ... in `raster` order, `iterations` at most.
    """

    grid_m: int
    grid_n: int
    cluster: int
    clusters: int
    raster_group: int

    @property
    def tiles(self) -> int:
        return self.grid_m * self.grid_n

    @property
    def ctas(self) -> int:
        return self.clusters * self.cluster

    @property
    def iterations(self) -> int:
        """Iterations of the persistent loop (the last may be idle on some clusters)."""
        return -(-self.tiles // self.clusters)

    @classmethod
    def of(
        cls, grid: tuple[int, int], cluster: int, persistent: bool, max_ctas: int, raster_group: int
    ) -> TileSchedule:
        """One cluster per cluster tile, or, persistent, at most max_ctas CTAs (whole clusters).
        raster_group 0 (column-major) is one group of every tile row."""
        tiles = grid[0] * grid[1]
        clusters = min(tiles, max_ctas // cluster) if persistent else tiles
        return cls(grid[0], grid[1], cluster, clusters, raster_group or grid[0])


@dataclass(frozen=True, slots=True)
class GemmPlan:
    """The part of a branch's plan both architectures read the same way."""

    m: int
    n: int
    k: int
    dtype: str
    blk_m: int
    blk_n: int
    blk_k: int
    stages: int
    consumers: int
    warp_specialized: bool
    persistent: bool = False
    raster_group: int = 1
    epilogue: str = "register"
    loader: str = "tma"

    @property
    def k_tiles(self) -> int:
        return -(-self.k // self.blk_k)

    @property
    def warpgroups(self) -> int:
        return self.consumers + (1 if self.warp_specialized else 0)

    @property
    def threads(self) -> int:
        return self.warpgroups * WARPGROUP

    @property
    def ab_type(self) -> str:
        """The PTX name of the operands' type (f16, bf16, e4m3)."""
        return PTX_TYPE[self.dtype]

    @property
    def element_bytes(self) -> int:
        """Bytes of one element of A and B (2, or 1 for e4m3)."""
        return dtype_bytes(self.dtype)

    @property
    def out_dtype(self) -> str:
        """D's dtype: the operands' own, bf16 for e4m3 operands (a branch whose plan holds the fused
        epilogue reads out_float16 there: `kernels.hopper.plan`)."""
        return out_dtype_of(self.dtype)

    @property
    def atom_k(self) -> int:
        """Elements of K in one 128-byte swizzle atom row: 64 of 2 bytes, 128 of 1 byte."""
        return SWIZZLE_ROW_BYTES // self.element_bytes

    @property
    def tile_schedule(self) -> TileSchedule:
        """The branch's tile schedule (its cluster tiles and persistent grid cap)."""
        raise NotImplementedError

    @property
    def clusters(self) -> int:
        """Clusters launched (CTAs without a cluster)."""
        return self.tile_schedule.clusters

    @property
    def ctas(self) -> int:
        return self.tile_schedule.ctas


def plan_fields(config: Config, problem: Problem) -> dict[str, Any]:
    """`GemmPlan`'s fields for (config, problem): a branch's plan adds its own."""
    return {
        "m": problem.m,
        "n": problem.gemm_n,  # B's rows: 2N with swiglu
        "k": problem.k,
        "dtype": problem.dtype,
        "blk_m": config.blk_m,
        "blk_n": config.blk_n,
        "blk_k": config.blk_k,
        "stages": config.stages,
        "consumers": config.consumers,
        "warp_specialized": config.warp_specialized,
        "persistent": config.persistent,
        "raster_group": config.raster_group,
        "epilogue": config.epilogue,
        "loader": config.loader,
    }


@dataclass(frozen=True, slots=True)
class Ring:
    """The mbarrier ring's bookkeeping: k-tile j (counted per CTA, across its tiles, so the state
    carries from tile to tile) uses stage j % stages, on its (j // stages)-th round. A stage's
    barrier completes once per round, so a waiter for round r waits for parity r & 1; a fresh
    barrier reports parity 1 complete, so the producer's first round passes."""

    stages: int

    def slot(self, j: Any) -> Any:
        return j % self.stages

    def phase(self, j: Any) -> Any:
        """Parity of the `full` barrier (or of any barrier completed once per round) for k-tile j."""
        return (j // self.stages) & 1

    def free_phase(self, j: Any) -> Any:
        """Parity of the `empty` barrier the producer waits for before it loads k-tile j: the
        release of k-tile j - stages, the previous round of the same stage."""
        return ((j // self.stages) & 1) ^ 1


def raster(T: Any, tile: Any, grid_m: int, grid_n: int, group: int) -> tuple[Any, Any]:
    """Linear tile index -> (tile row, tile column): groups of `group` tile rows, column-major
    inside a group (1 = row-major), so concurrently running CTAs share A and B tiles in L2; the
    last group may have fewer rows."""
    g = tile // (group * grid_n)
    rows_in_group = T.min(grid_m - g * group, group)
    return g * group + (tile % (group * grid_n)) % rows_in_group, (tile % (group * grid_n)) // rows_in_group


def swizzled_layout(dtype: str, shape: tuple[int, ...]) -> Any:
    """The 128B-swizzled K-major shared-memory layout of a tile (or a ring of tiles) of `shape`:
    what TMA writes, wgmma and tcgen05 read through descriptors, and stmatrix/TMA stores use."""
    from tvm.backend.cuda.tile_primitive.tma_utils import SwizzleMode, mma_shared_layout

    return mma_shared_layout(dtype, SwizzleMode.SWIZZLE_128B_ATOM, shape)


def copy16_helper(name: str, flag: str) -> tuple[str, str]:
    """The thread loader's device helper: one 16-byte chunk from global to shared memory, or zeros.

    The two branches named it and its flag differently (tirtune_copy16/in, tirtune_bw_copy16/
    inside) before they shared it; the names stay, being part of the kernels' bytes.
    """
    source = (
        f"__forceinline__ __device__ void {name}(void* dst, const void* src, int {flag}) {{\n"
        "  uint4 v = make_uint4(0u, 0u, 0u, 0u);\n"
        f"  if ({flag}) v = *reinterpret_cast<const uint4*>(src);\n"
        "  *reinterpret_cast<uint4*>(dst) = v;\n}\n"
    )
    return name, source


@dataclass(frozen=True, slots=True)
class Skeleton:
    """The shared pieces of one kernel, built by `Skeleton.trace` inside a branch's trace.

    ring_tiles(pool, a_shape, b_shape, d_shape[, scratch_shape]) -> (As, Bs, Ds[, scratch]): call as
        `As, Bs, Ds = T.meta_var(sk.ring_tiles(...))`; Ds is None when d_shape is; with a
        scratch_shape an fp32 buffer of that shape follows the tiles and is returned fourth.
    The macros (TVMScript, called from the kernel body):
        publish_barriers(): the barriers' init fence, then a cluster barrier (a CTA barrier
            without a cluster): no CTA uses a barrier, its own or a peer's, before it is set up.
        for_each_tile(cid, body, args): for each cluster tile `it` of cluster cid, with its tile
            row and column (tm, tn), body(*args, it, tm, tn).
        produce_tiles(cid, produce): the TMA producer's loop: produce(j, kt, tm, tn) for each
            k-tile kt of each tile, j = it * k_tiles + kt counting the CTA's k-tiles (its ring
            position).
        copy_chunk(helper, dst, G, row, limit, kt, col): the thread loader's 16-byte copy of
            G[row, kt*blk_k + col ...] to the shared-memory pointer dst, zeros unless row < limit
            and the column < K (a chunk is wholly in or out: K is a multiple of 8).
    """

    ring: Ring
    schedule: TileSchedule
    ring_tiles: Any
    publish_barriers: Any
    for_each_tile: Any
    produce_tiles: Any
    copy_chunk: Any

    @classmethod
    def trace(cls, T: Any, p: GemmPlan) -> Skeleton:
        K, BK, KT, DT, OUT, schedule = p.k, p.blk_k, p.k_tiles, p.dtype, p.out_dtype, p.tile_schedule
        ITERS, NCL, TILES = schedule.iterations, schedule.clusters, schedule.tiles
        GM, GN, G = schedule.grid_m, schedule.grid_n, schedule.raster_group
        CL = schedule.cluster

        def ring_tiles(pool, a_shape, b_shape, d_shape, scratch_shape=None, tail_shape=None, tail_swizzled=False):
            # After the barriers (8-byte aligned) the tiles start at 1024 B; every tile size is a
            # multiple of 1024 B, so each stays aligned for the swizzle. An fp32 scratch buffer
            # (plain layout) may follow them: then a fourth value is returned; or a plain buffer
            # of the output dtype (the narrow last store box; swizzled with tail_swizzled), also
            # returned fourth. The staging tiles hold D's dtype, the ring's the operands'.
            pool.move_base_to(TILE_ALIGN)
            As = pool.alloc(a_shape, DT, layout=swizzled_layout(DT, a_shape))
            Bs = pool.alloc(b_shape, DT, layout=swizzled_layout(DT, b_shape))
            Ds = None if d_shape is None else pool.alloc(d_shape, OUT, layout=swizzled_layout(OUT, d_shape))
            if tail_shape is not None:
                # A tail box whose rows are 128 bytes (the swapped last box) is swizzled too.
                layout = {"layout": swizzled_layout(OUT, tail_shape)} if tail_swizzled else {}
                tail = pool.alloc(tail_shape, OUT, **layout)
                pool.commit()
                return As, Bs, Ds, tail
            if scratch_shape is not None:
                scratch = pool.alloc(scratch_shape, "float32")
                pool.commit()
                return As, Bs, Ds, scratch
            pool.commit()
            return As, Bs, Ds

        # fmt: off
        @T.inline
        def publish_barriers():
            T.ptx.fence.mbarrier_init.release.cluster()
            if CL > 1:
                T.cuda.cluster_sync()  # the peers' barriers are initialized before any multicast
            else:
                T.cuda.cta_sync()

        @T.inline
        def for_each_tile(cid, body, args):
            for it in range(ITERS):
                if cid + it * NCL < TILES:
                    tm, tn = T.meta_var(raster(T, cid + it * NCL, GM, GN, G))
                    body(*args, it, tm, tn)

        @T.inline
        def produce_tile(produce, it, tm, tn):
            for kt in range(KT):
                produce(it * KT + kt, kt, tm, tn)

        @T.inline
        def produce_tiles(cid, produce):
            for_each_tile(cid, produce_tile, (produce,))

        @T.inline
        def copy_chunk(helper, dst, G_, row, limit, kt, col):
            T.evaluate(T.cuda.func_call(helper[0], dst, G_.ptr_to([row, kt * BK + col]),
                                        T.Select(row < limit and kt * BK + col < K, 1, 0), source_code=helper[1]))
        # fmt: on

        return cls(Ring(p.stages), schedule, ring_tiles, publish_barriers, for_each_tile, produce_tiles, copy_chunk)
