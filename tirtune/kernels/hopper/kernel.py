"""The Hopper (sm_90a) GEMM template, hopper-gemm/5: D = A @ B.T with TMA, an mbarrier ring, wgmma.

A (M,K) and B (N,K) are row-major (K-major) and D (M,N) has the problem's dtype; the product
accumulates in fp32 registers. One CTA computes one blk_m x blk_n tile of D at a time:

* Shared memory holds a ring of `stages` stages, each an A tile (blk_m x blk_k) and a B tile
  (blk_n x blk_k) in the 128B-swizzled K-major layout. blk_k=128 (256) is two (four) 64-element
  swizzle atoms side by side; the TMA copy splits into one box per atom and the k16 steps of
  wgmma walk the descriptor across them.
* The TMA loads' L2 options (hopper-gemm/5, later additions; none at their defaults, so those
  kernels are unchanged): l2_hint gives each kernel operand's loads an L2 eviction priority
  (`.L2::cache_hint` with TVM's createpolicy word for evict_first or evict_last: UTMALDG's
  `desc[URx]` operand in SASS), l2_promotion the load tensor maps' L2 promotion (256 B: a miss
  fetches the neighbouring 128-byte atom too), and prefetch_tensormap has warp 0 prefetch every
  tensor map's descriptor, loads' and stores', when the kernel starts (UTMACCTL.PF).
* Each stage has a `full` barrier (one arrive.expect_tx by the loading thread, completed by the
  TMA bytes) and an `empty` barrier (one arrive per consumer warpgroup of the tile, in every CTA
  of the cluster, once its wgmma reads of the stage have retired). wgmma keeps one commit group
  in flight (wait_group 1): k-tile kt-1's stage is released while kt's MMAs run.
* warp_specialized: an extra producer warpgroup (registers given back with setmaxnreg.dec) has one
  thread issue every load; the consumer warpgroups only wait, multiply and release. Otherwise
  thread 0 of consumer warpgroup 0 issues the load of tile kt+stages-1 right after tile kt-1 is
  released, a classic multistage prefetch pipeline (restarted per tile when persistent). One
  stage without a producer loads, waits and multiplies in turn (wait_group 0).
* loader "threads" (one stage, no producer): every consumer thread copies 16-byte chunks of the
  A and B tiles into the swizzled stage (zeros past M, N, K), fences the async proxy and syncs
  the CTA before the wgmma; no TMA and no barriers (the seed journey's V1-V3).
* schedule "cooperative": consumer warpgroup c owns rows [c*rows, (c+1)*rows) of the tile (rows =
  blk_m/consumers, 64 or 128, i.e. one or two m64 wgmma per k16 step, each with its own
  accumulator array); the consumers share each staged B tile. "pingpong" (persistent, 2
  consumers): each consumer computes whole blk_m x blk_n tiles, consumer c the CTA's tiles c,
  c+2, ...; an `order` barrier pair lets a consumer start its mainloop only after the other has
  waited for every stage of the tile before, so the ring is consumed in order and one consumer's
  epilogue overlaps the other's MMAs.
* reg_split "C/P": setmaxnreg.inc C for the consumers, .dec P for the producer (and the epilogue
  warpgroup), with 2 or 4 consumers holding at least 64 accumulators. ptxas still compiles every
  instruction within the launch's even share (168 registers with 3 warpgroups, 128 with 4, 96
  with 5), so one m64n256 wgmma (128 accumulators) needs at most 3 warpgroups.
* consumers 4 (hopper-gemm/4): 256-row tiles, 64 rows each, cooperative only; named barriers 1-4.
* Epilogue "register": the fp32 fragment goes straight from registers to global memory,
  converted to the output dtype and guarded on M and N. Epilogue "tma": each consumer warpgroup
  packs its fragment to 16-bit pairs and writes it with stmatrix into a shared-memory staging
  tile (64x64 boxes, 128B-swizzled), fences the async proxy, and one thread TMA-stores the boxes
  (TMA clips the out-of-bounds part of a box, so tails stay correct); before the next tile
  overwrites the staging tile, that thread waits for the stores to have read it
  (cp.async.bulk.wait_group.read). "tma_chunked": the same one 64x64 box at a time through two
  staging buffers per consumer: box i is written while box i-1's store is in flight
  (wait_group.read 1; 0 before a tile's first box), so 16 KiB per consumer replace the tile.
* epilogue_warpgroup (hopper-gemm/4): an extra warpgroup whose warp c stores consumer c's staged
  output. Consumer c still packs and writes its fragment with stmatrix (registers cannot move
  between warpgroups), fences, and arrives on `staged` (one barrier per staging buffer); warp c's
  lane 0 waits for it, TMA-stores the buffer, waits until the store has read it, and arrives on
  `drained`, which the consumer waits for before its next write to that buffer (the n-th use of
  a buffer waits for parity n & 1; a fresh barrier passes the first). The consumer never waits
  for a store; the epilogue warp walks the consumer's tiles in the same order.
* persistent: grid = min(tiles, SMS) CTAs; CTA b computes tiles b, b+grid, ... The ring's stage
  and phase come from a per-CTA running k-tile count (it*k_tiles + kt), so they carry across
  tiles, and the consumers also release the last stage of each tile. raster_group maps the
  linear tile index to (tile_m, tile_n): groups of raster_group tile rows, column-major inside a
  group (1 = row-major, 0 = one group of all rows: column-major), so concurrently running CTAs
  share A and B tiles in L2.
* cluster 2 or 4 along M (or N), persistent: the cluster's CTAs compute adjacent tiles along M
  (N) of one cluster tile and share its B (A) tile: each loads 1/cluster of the shared tile's rows
  and multicasts it (cta_mask) into every CTA's stage at the same offset, signalling each CTA's
  `full` barrier, which expects the whole stage; consumers release a stage in every CTA of the
  cluster (remote mbarrier arrives), since every producer writes into it. Barriers are
  initialised before a cluster_sync, and a final cluster_sync keeps every CTA's shared memory
  alive until its peers are done with it. 4-CTA clusters run at most 32 at once (128 CTAs).

* trim (hopper-gemm/5, later): a ragged problem's edge tiles issue no MMA past it: an m64 block
  whose rows all lie past M skips its wgmmas, the last tile column multiplies with a wgmma as wide
  as its valid columns (rounded up to 8; the fragment is a prefix of the full one), the last
  k-tile stops after its last k16 step that starts before K. Uniform branches, per k-tile, each
  around a whole run of wgmmas (`mma_trimmed`); loads, barriers and stores are unchanged.
* peel_k (hopper-gemm/5, stop 28): the consumers' k loop runs one k-tile short and the last
  k-tile follows it as straight-line code issuing only its k16 steps that start before K (1 of 4
  at K = 2000 with blk_k 64): the tail's zero-padded MMAs are skipped with no branch in the loop
  (what `trim` did per k-tile, measured slower). Loads, barriers and stores are unchanged.
* k_rotate (hopper-gemm/5, stop 31): tile t (linear index, M fastest) loads its k-tiles in the
  order (t + kt) mod k-tiles, so CTAs streaming at the same time read different columns of
  their rows instead of all of them the same column block (every row's address differing only
  in its high bits). The consumers multiply stages in ring order as ever: a tile's sum runs in
  its rotated order, the same on every launch. Only the producer's k index changes.
* swap_ab (hopper-gemm/5): the kernel computes D^T = B A^T: its A operand is the problem's B, its
  B the problem's A, so the problem's N runs along wgmma's 64-row M and its M along wgmma's N
  (8..256 in steps of 8: a decode M of 16 is one m64n16 wgmma instead of a 64-row block three
  quarters padding). Everything up to the epilogue is the unswapped kernel on (N, M, K); the
  register epilogue stores the fragment's (row, col) to D[col, row], one 2-byte store each (a
  warp's store covers 8 consecutive elements of 4 rows of D; D of a small M is a few hundred KB).
  The plan's m, n, blk_m, blk_n and cluster_dim are the kernel's axes.
* split_k (hopper-gemm/5): a cluster of split_k consecutive CTAs along x computes one output tile;
  CTA rank r multiplies k-tiles [r*KT, (r+1)*KT) (KT = k_tiles / split_k) through its own ring,
  then parks its fp32 fragment in its own shared memory, register-major (Red[register][thread]:
  a warp's stores and loads are 128 consecutive bytes). A cluster barrier (arrive.release,
  wait.acquire) publishes the fragments; consumer thread t of rank r then sums register pairs
  r, r+split_k, ... of thread t's fragment over the cluster's CTAs in rank order 0..split_k-1
  (mapa.shared::cluster + ld.shared::cluster: the same order on every CTA, so the result is
  bitwise reproducible) and stores them, converted, to D; a second cluster barrier (arriving
  relaxed: no fence for the D stores) keeps every CTA's shared memory alive until its peers have
  read it. Each output element is stored once.
  split_k_reduce "serial": no cluster; the tile's CTAs take turns on a static global fp32
  workspace slot in rank order, handing over through a per-tile semaphore (acquire/release);
  the last rank stores D and resets the semaphore for the next launch.
* One-row operands (hopper-gemm/5): TMA cannot describe a box of rows over a tensor of one row
  (its unit dimension leaves the tensor map), so an operand with M = 1 (N = 1) is loaded as one
  row a stage (a 1-D tensor map; the stage's expected bytes count that row), and its ring is
  zeroed once before the barriers are published, so the other rows multiply as zeros.

Tails: the loop runs ceil(K/blk_k) tiles; TMA zero-fills the out-of-bounds part of a box (and
still counts the whole box in its transaction bytes), so partial tiles along M, N and K add
zeros. The problem size is baked in at compile time (one build per problem).

Shared with the Blackwell branch (`skeleton.py`, DESIGN.md decision 6): the plan's common part
(`GemmPlan`) and the tile schedule (cluster tiles, capped at CLUSTER_CTAS), the swizzled A/B ring
and staging tile in the shared-memory pool, the ring's stage and phase bookkeeping, the barriers'
publication, the raster mapping and the persistent loops over a cluster's tiles (the producer's
included; the ping-pong consumers walk every other tile themselves), and the thread loader's
guarded 16-byte copy. This branch's own: the barriers (`empty` released by consumer threads,
`order` for ping-pong), the boxes a stage loads (`load_tile`: multicast slices in a cluster), the
non-specialized prefetch, wgmma with register accumulators (`mma_steps`, `k_tile`, `mainloop`), setmaxnreg,
and the epilogues (fragment stores, stmatrix staging, TMA stores).
"""

# The @T.inline macros inside _trace are parsed by TVMScript, which reads parameter annotations
# as TIR types; they stay unannotated.
# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tirtune.core.config import Config
from tirtune.core.problem import Problem
from tirtune.kernels.skeleton import (
    ATOM_K,
    HALF2,
    PTX_TYPE,
    WARPGROUP,
    GemmPlan,
    Skeleton,
    TileSchedule,
    copy16_helper,
    plan_fields,
    raster,
)
from tirtune.space.rules import (
    CONFIG_RULES,
    PROBLEM_RULES,
    k_tail_steps,
    needs_rebalance,
    refuse_if_broken,
    trim_work,
)

__all__ = ["TEMPLATE_NAME", "KernelPlan", "build", "plan"]

logger = logging.getLogger(__name__)

TEMPLATE_NAME = "hopper_gemm"

WGMMA_M = 64
WGMMA_K = 16
# Descriptor fields for a K-major 128B-swizzled tile: the stride between 8-row core groups is
# 8 rows x 128 B = 1024 B, in 16 B units; the leading offset is unused with swizzling.
DESC_LBO = 1
DESC_SBO = 64
DESC_SWIZZLE_128B = 3
# Register budgets after setmaxnreg (multiples of 8, within 24..256). With 3 warpgroups the
# launch gives 168 registers a thread (65536 / 384, rounded down to 8); 40 for the producer and
# 232 for two consumers add up to exactly 3 x 128 x 168. With one consumer (256 threads) every
# thread may already hold 255 registers, and ptxas ignores setmaxnreg there ("unable to determine
# register count at entry"), so it is only emitted with two consumers; likewise when they hold
# fewer than 64 accumulators (128x64 tiles: ptxas then allocates 58 registers, not 168).
# reg_split picks the pair (default 232/40; 240/24 also sums to 504 <= 512).
PRODUCER_REGS = 40
CONSUMER_REGS = 232
SMS = 132  # streaming multiprocessors of the H200 (and H100 SXM): the persistent grid's cap
# CTAs that can run at once in clusters of 1, 2, 4: a cluster must fit inside one GPC, and the
# GH100's GPCs hold 16 or 18 usable SMs, so 4-CTA clusters leave 2 SMs idle in some (32 clusters).
# A persistent grid larger than this would run its last clusters as a second wave.
CLUSTER_CTAS = {1: SMS, 2: SMS, 4: 128}
STORE_BOX = 64  # the TMA-store epilogue's box: 64 rows x 64 columns (one 128-byte swizzle atom wide)
# l2_hint's policy names -> the TMA loads' L2::cache_hint (TVM encodes the createpolicy value).
L2_CACHE_HINTS = {"first": "evict_first", "last": "evict_last"}


# split_k "dsmem": the cluster barrier after the reduction only has to keep each CTA's shared
# memory alive until its peers' loads of it have returned (their values are stored before the
# peers arrive), so it arrives relaxed: a releasing arrive waits (MEMBAR.ALL.GPU) for the CTA's
# own D stores to be performed, ~0.5-1 us at the end of a ~10 us decode GEMM.
_CLUSTER_SYNC_RELAXED = (
    "tirtune_cluster_sync_relaxed",
    "__forceinline__ __device__ void tirtune_cluster_sync_relaxed() {\n"
    '  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");\n'
    '  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");\n}\n',
)

# Serial split-K: the operations of tirtune_splitk_serial (constants, folded after inlining).
SK_WAIT, SK_SIGNAL, SK_LOAD, SK_STORE, SK_FENCE, SK_BAR = range(6)
SK_BAR_ID = 5  # a named barrier over the consumer warpgroups (1-4 serve single warpgroups)


def _serial_source(workspace: int, tiles: int) -> tuple[str, str]:
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


def _pack2_source(dtype: str) -> tuple[str, str]:
    """Epilogue helper for stmatrix: two fp32 accumulators -> one 32-bit word of two 16-bit values."""
    _, convert, pair = HALF2[dtype]
    name = f"tirtune_pack_{PTX_TYPE[dtype]}x2"
    source = (
        f"__forceinline__ __device__ unsigned int {name}(float lo, float hi) {{\n"
        f"  {pair} v = {convert}(lo, hi);\n"
        f"  return *reinterpret_cast<unsigned int*>(&v);\n}}\n"
    )
    return name, source


def _store2_source(dtype: str) -> tuple[str, str]:
    """Epilogue helper: two adjacent fp32 accumulators -> one 4-byte store of two 16-bit values. The
    fragment holds column pairs (2*(lane%4), +1), so pairing halves the store instructions."""
    elem, convert, pair = HALF2[dtype]
    name = f"tirtune_store_{PTX_TYPE[dtype]}x2"
    source = (
        f"__forceinline__ __device__ void {name}({elem}* dst, float lo, float hi) {{\n"
        f"  *reinterpret_cast<{pair}*>(dst) = {convert}(lo, hi);\n}}\n"
    )
    return name, source


# loader="threads": one 16-byte chunk from global to (swizzled) shared memory, or zeros.
_COPY16 = copy16_helper("tirtune_copy16", "in")

# split_k (hopper-gemm/5): one fp32 of a peer CTA's shared memory (cluster rank `rank`), at the
# offset `src` has in this CTA's: mapa turns the CTA-local address into the peer's in the
# cluster's shared window, ld.shared::cluster reads it.
_DSMEM_LOAD = (
    "tirtune_dsmem_ld_f32",
    "__forceinline__ __device__ float tirtune_dsmem_ld_f32(const void* src, int rank) {\n"
    "  unsigned int local = static_cast<unsigned int>(__cvta_generic_to_shared(src));\n"
    "  unsigned int remote;\n"
    "  float v;\n"
    '  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));\n'
    '  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");\n'
    "  return v;\n}\n",
)


@dataclass(frozen=True, slots=True)
class KernelPlan(GemmPlan):
    """Everything the kernel needs that follows from (config, problem), computed once in Python:
    the shared part (`GemmPlan`) plus the consumers' schedule, the register split and the cluster."""

    schedule: str = "cooperative"
    consumer_regs: int = CONSUMER_REGS
    producer_regs: int = PRODUCER_REGS
    cluster: int = 1
    cluster_dim: str = "m"
    epilogue_warpgroup: bool = False
    # hopper-gemm/5. With swap_ab the plan's m and n (and every tile quantity) are the kernel's:
    # m is the problem's N and n its M; `problem_shape` gives the problem's (M, N) back.
    swap_ab: bool = False
    split_k: int = 1
    split_k_reduce: str = "dsmem"
    # The TMA loads' L2 options (hopper-gemm/5, later additions): each kernel operand's eviction
    # priority ("none", "first", "last"), the tensor maps' L2 promotion, the descriptor prefetch.
    l2_hint_a: str = "none"
    l2_hint_b: str = "none"
    l2_promotion: str = "128B"
    prefetch_tensormap: bool = False
    # trim (rules.trim_work, in the kernel's axes): the last tile column's narrower wgmma N (0:
    # none), the last k-tile's k16 steps that start before K (0: all), and whether m64 blocks of
    # the last tile row lie wholly past M (their wgmma skipped).
    trim_n: int = 0
    trim_k: int = 0
    trim_m: bool = False
    # peel_k (rules.k_tail_steps): the live k16 steps of the last k-tile, which the consumers run
    # after their k loop (0: not peeled, every k-tile in the loop).
    peel_k: int = 0
    # k_rotate (hopper-gemm/5, stop 31): tile t loads its k-tiles from (t mod k-tiles) on, wrapping.
    k_rotate: bool = False

    def load_options(self, operand: str) -> dict[str, Any]:
        """Extra keyword arguments of the TMA loads of the kernel's operand "a" or "b" (none at the
        defaults, so the default kernel is traced exactly as before these knobs existed)."""
        options: dict[str, Any] = {}
        hint = self.l2_hint_a if operand == "a" else self.l2_hint_b
        if hint != "none":
            options["cache_hint"] = L2_CACHE_HINTS[hint]
        if self.l2_promotion != "128B":
            options["tensormap_l2_promotion"] = f"L2::{self.l2_promotion}"
        if self.prefetch_tensormap:
            options["prefetch_tensormap"] = True
        return options

    def store_options(self) -> dict[str, Any]:
        """Extra keyword arguments of the TMA stores (the descriptor prefetch only)."""
        return {"prefetch_tensormap": True} if self.prefetch_tensormap else {}

    @property
    def atoms(self) -> int:
        """64-element swizzle atoms along K in one stage: one TMA box each per operand."""
        return self.blk_k // ATOM_K

    @property
    def serial_split(self) -> bool:
        """Split-K reduced in turn through a global workspace (not a cluster through DSMEM)."""
        return self.split_k > 1 and self.split_k_reduce == "serial"

    @property
    def problem_shape(self) -> tuple[int, int]:
        """The problem's (M, N): D's shape."""
        return (self.n, self.m) if self.swap_ab else (self.m, self.n)

    @property
    def cta_k_tiles(self) -> int:
        """k-tiles each CTA of a split-K cluster multiplies (all of them without a split)."""
        return self.k_tiles // self.split_k

    @property
    def one_row_a(self) -> bool:
        """The kernel's A operand has a single row (M = 1): TMA loads that one row per stage."""
        return self.m == 1

    @property
    def one_row_b(self) -> bool:
        """The kernel's B operand has a single row (N = 1)."""
        return self.n == 1

    @property
    def reduce_regs(self) -> int:
        """fp32 accumulators a consumer thread parks for the split-K reduction."""
        return self.m_blocks * self.acc_regs

    @property
    def ctas(self) -> int:
        """CTAs launched: every tile's split_k CTAs count."""
        return self.tile_schedule.ctas * self.split_k

    @property
    def warpgroups(self) -> int:
        """Consumers, the producer (warp-specialized) and the epilogue warpgroup."""
        return self.consumers + (1 if self.warp_specialized else 0) + (1 if self.epilogue_warpgroup else 0)

    @property
    def store_chunks(self) -> int:
        """Staged pieces a consumer hands over per tile: one 64x64 box each ("tma_chunked"), or
        its whole rows at once ("tma")."""
        return self.m_blocks * -(-self.blk_n // STORE_BOX) if self.epilogue == "tma_chunked" else 1

    @property
    def tail_cols(self) -> int:
        """"tma_chunked" with blk_n off the 64-wide box: the last box's width (its own narrower
        tensor map, staged unswizzled); 0 when blk_n is a multiple of 64."""
        return self.blk_n % STORE_BOX if self.epilogue == "tma_chunked" else 0

    @property
    def pingpong(self) -> bool:
        return self.schedule == "pingpong"

    @property
    def rows(self) -> int:
        """Rows of a tile each consumer warpgroup computes (64 or 128): its share of blk_m, or
        the whole tile with ping-pong consumers."""
        return self.blk_m if self.pingpong else self.blk_m // self.consumers

    @property
    def row_base(self) -> int:
        """Rows between consecutive consumers' first rows inside one output tile."""
        return 0 if self.pingpong else self.rows

    @property
    def releasers(self) -> int:
        """Arrivals that free a stage: each consumer of the tile, in each CTA of the cluster."""
        return (1 if self.pingpong else self.consumers) * self.cluster

    @property
    def cluster_grid(self) -> tuple[int, int]:
        """Cluster tiles along M and N: cluster adjacent tiles along cluster_dim form one."""
        gm, gn = self.grid
        if self.cluster_dim == "m":
            return (gm // self.cluster, gn)
        return (gm, gn // self.cluster)

    @property
    def m_blocks(self) -> int:
        """m64 wgmma blocks per consumer warpgroup, each with its own accumulator array."""
        return self.rows // WGMMA_M

    @property
    def grid(self) -> tuple[int, int]:
        """CTA tiles along M and N."""
        return (-(-self.m // self.blk_m), -(-self.n // self.blk_n))

    @property
    def tiles(self) -> int:
        """CTA tiles of the output."""
        gm, gn = self.grid
        return gm * gn

    @property
    def tile_schedule(self) -> TileSchedule:
        """Cluster tiles (cluster adjacent CTA tiles along cluster_dim): one cluster each, or at
        most one CTA per SM (whole clusters, as many as fit in the GPCs) when persistent."""
        return TileSchedule.of(self.cluster_grid, self.cluster, self.persistent, CLUSTER_CTAS[self.cluster],
                               self.raster_group)

    @property
    def tiles_per_cta(self) -> int:
        """Iterations of the persistent loop (the last may be idle on some CTAs)."""
        return self.tile_schedule.iterations

    @property
    def store_boxes(self) -> tuple[int, int]:
        """64x64 boxes of the "tma" staging tile along M (all consumers) and N."""
        return (self.consumers * self.rows // STORE_BOX, self.blk_n // STORE_BOX)

    @property
    def staging_boxes(self) -> int:
        """64x64 staging buffers: the whole tile(s) for "tma", two per consumer for "tma_chunked"."""
        if self.epilogue == "tma_chunked":
            return 2 * self.consumers
        box_m, box_n = self.store_boxes
        return box_m * box_n

    @property
    def acc_regs(self) -> int:
        """fp32 accumulator registers of one m64 x blk_n wgmma fragment per thread."""
        return self.blk_n // 2

    @property
    def rebalances_registers(self) -> bool:
        """setmaxnreg moves registers from the producer to the consumers (see rules.rebalances_registers)."""
        return needs_rebalance(self.warp_specialized, self.consumers, self.warpgroups, self.m_blocks * self.acc_regs)

    @property
    def multicast_rows(self) -> int:
        """Rows of the shared operand's tile (B along M, A along N) each CTA of a cluster loads."""
        return (self.blk_n if self.cluster_dim == "m" else self.blk_m) // self.cluster

    @property
    def stage_bytes(self) -> int:
        """Bytes TMA delivers per stage: whole boxes, out-of-bounds zeros included (a one-row
        operand's box is that one row)."""
        rows_a = 1 if self.one_row_a else self.blk_m
        rows_b = 1 if self.one_row_b else self.blk_n
        return (rows_a + rows_b) * self.blk_k * 2

    @property
    def wgmma_name(self) -> str:
        return self.wgmma_of(self.blk_n)

    def wgmma_of(self, n: int) -> str:
        ab = self.ab_type
        return f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab}"


def plan(config: Config, problem: Problem) -> KernelPlan:
    """Check (config, problem) against the space's rules and derive the kernel constants."""
    refuse_if_broken(TEMPLATE_NAME, config, problem, PROBLEM_RULES, CONFIG_RULES)
    consumer_regs, producer_regs = (int(v) for v in config.reg_split.split("/"))
    hint_a, hint_b = config.l2_hint.split("/")
    fields = plan_fields(config, problem)
    if config.swap_ab:  # the kernel computes D^T = B A^T: its M is the problem's N
        fields["m"], fields["n"] = problem.n, problem.m
    return KernelPlan(
        **fields,
        schedule=config.schedule,
        consumer_regs=consumer_regs,
        producer_regs=producer_regs,
        cluster=config.cluster,
        cluster_dim=config.cluster_dim,
        epilogue_warpgroup=config.epilogue_warpgroup,
        swap_ab=config.swap_ab,
        split_k=config.split_k,
        split_k_reduce=config.split_k_reduce,
        l2_hint_a=hint_a,
        l2_hint_b=hint_b,
        l2_promotion=config.l2_promotion,
        prefetch_tensormap=config.prefetch_tensormap,
        **_trims(config, problem),
        peel_k=k_tail_steps(config, problem) if config.peel_k else 0,
        k_rotate=config.k_rotate,
    )


def _trims(config: Config, problem: Problem) -> dict[str, Any]:
    if not config.trim:
        return {}
    trim_n, trim_k, trim_m = trim_work(config, problem)
    return {"trim_n": trim_n, "trim_k": trim_k, "trim_m": trim_m}


def build(config: Config, problem: Problem) -> Any:
    """The TIRx PrimFunc of this (config, problem): call it "main" in the IRModule.

    Raises SpaceError when the pair breaks a validity rule of the Hopper space.
    """
    p = plan(config, problem)
    logger.debug("tracing %s for %s", config.label(), problem)
    return _trace(p)


def _trace(p: KernelPlan) -> Any:
    # TVM is imported here, not at module import: the search space and the rules stay usable
    # (and fast to import) where no TVM is installed.
    from tvm.backend.cuda.lang.pipeline import MBarrier, TMABar
    from tvm.script import tirx as T
    from tvm.script.tirx import tile as Tx

    # M and N are the kernel's (with swap_ab: the problem's N and M); PM x PN is D's shape.
    M, N, K, DT = p.m, p.n, p.k, p.dtype
    PM, PN = p.problem_shape
    BM, BN, BK, S = p.blk_m, p.blk_n, p.blk_k, p.stages
    # KT: the k-tiles one CTA multiplies (1/split_k of them in a split-K cluster).
    C, MB, KT, ROW_BASE = p.consumers, p.m_blocks, p.cta_k_tiles, p.row_base
    WS, NWG, NACC, REBALANCE = p.warp_specialized, p.warpgroups, p.acc_regs, p.rebalances_registers
    GM, GN = p.grid
    TX_BYTES = p.stage_bytes
    # Prefetch depth of the non-specialized pipeline: tiles loaded before the first MMA.
    PRE = min(S - 1, KT)
    PERSIST, PINGPONG = p.persistent, p.pingpong
    # Clusters: CL CTAs compute adjacent tiles along M (sharing B) or N (sharing A); the persistent
    # loop walks cluster tiles (the skeleton's tile schedule: NCL clusters, ITERS tiles at most
    # each). Without a cluster these are CTA tiles and CTAs.
    CL, ALONG_M, MC_ROWS = p.cluster, p.cluster_dim == "m", p.multicast_rows
    sched = p.tile_schedule
    GRID, NCL, ITERS, CTILES = sched.ctas, sched.clusters, sched.iterations, sched.tiles
    TMA_EPI, CHUNKED = p.epilogue == "tma", p.epilogue == "tma_chunked"
    STAGING = (p.staging_boxes, STORE_BOX, STORE_BOX) if TMA_EPI or CHUNKED else None
    THREADS, NTHREADS, CHUNKS_K = p.loader == "threads", p.threads, BK // 8
    BOX_M, BOX_N = p.store_boxes
    # "tma_chunked" with a narrower last box (blk_n off the 64-wide box): TAIL columns after the
    # BOX_N full boxes of each m-block, staged in two plain TAIL-wide buffers a consumer; NBOX
    # boxes an m-block in all (BOX_N when there is no tail).
    TAIL = p.tail_cols
    HAS_TAIL, TAIL_ODD8 = TAIL > 0, TAIL % 16 != 0
    NBOX = BOX_N + (1 if HAS_TAIL else 0)
    TAIL_STAGING = (2 * C, STORE_BOX, TAIL) if HAS_TAIL else None
    # Epilogue warpgroup: consumer c hands its staged pieces (CHUNKS per tile, in NBUF buffers)
    # to warp c of the epilogue warpgroup through staged/drained barriers.
    EWG, CHUNKS = p.epilogue_warpgroup, p.store_chunks
    NBUF = 2 if CHUNKED else 1
    # hopper-gemm/5: swap_ab (the kernel's A is the problem's B: the fragment is stored
    # transposed), split-K over SPLIT CTAs a tile, reduced through a cluster's distributed shared
    # memory (each parks its NREG accumulators a consumer thread in RED, [register][thread]) or
    # SERIALly through a global workspace, and one-row operands (M or N = 1), loaded as one row
    # into stages whose other rows stay zero.
    SWAP, SPLIT, NREG, SERIAL = p.swap_ab, p.split_k, p.reduce_regs, p.serial_split
    ONE_A, ONE_B = p.one_row_a, p.one_row_b
    # The TMA loads' L2 options (eviction priority per operand, promotion, descriptor prefetch) as
    # keyword arguments of their copies (none at the defaults), and the stores' prefetch.
    LOAD_A, LOAD_B, STORE_OPTS, ATOMS = p.load_options("a"), p.load_options("b"), p.store_options(), p.atoms
    RED = (NREG, C * WARPGROUP) if SPLIT > 1 and not SERIAL else None
    dsmem_name, dsmem_source = _DSMEM_LOAD
    serial_name, serial_source = _serial_source(p.tiles * NREG * C * WARPGROUP, p.tiles)
    sk = Skeleton.trace(T, p)
    ring = sk.ring
    # With N even every row starts 4-byte aligned and col (always even) < N implies col+1 < N.
    PAIRED = N % 2 == 0
    store2_name, store2_source = _store2_source(DT)
    pack2_name, pack2_source = _pack2_source(DT)
    wgmma = T.ptx[p.wgmma_name]
    # trim: the last tile column's narrower wgmma (TRIM_N columns), the last k-tile's live k16
    # steps (TRIM_K), the m64 blocks wholly past M skipped (TRIM_M); TRIM: any of them.
    TRIM_N, TRIM_K, TRIM_M = p.trim_n, p.trim_k, p.trim_m
    TRIM = bool(TRIM_N or TRIM_K or TRIM_M)
    # peel_k: the consumers' k loop runs LOOP_KT k-tiles, the last (PEELED) follows it with its
    # PEEL_K live k16 steps.
    PEEL_K = p.peel_k
    # k_rotate: each tile's k-tiles loaded (and multiplied) from its own starting k-tile on.
    K_ROTATE = p.k_rotate
    PEELED = PEEL_K > 0
    LOOP_KT = KT - 1 if PEELED else KT
    wgmma_narrow = T.ptx[p.wgmma_of(TRIM_N)] if TRIM_N else None
    set_regs_dec = T.ptx["setmaxnreg.dec.sync.aligned.u32"]
    set_regs_inc = T.ptx["setmaxnreg.inc.sync.aligned.u32"]
    stmatrix = T.ptx["stmatrix.sync.aligned.m8n8.x4.shared.b16"]
    stmatrix2 = T.ptx["stmatrix.sync.aligned.m8n8.x2.shared.b16"]
    bulk_commit = T.ptx["cp.async.bulk.commit_group"]
    bulk_wait_read = T.ptx["cp.async.bulk.wait_group.read"]

    def cta_origin(tm: Any, tn: Any, rank: Any) -> tuple[Any, Any]:
        # Cluster tile (tm, tn) -> (m0, n0), this CTA's first row and column: a cluster's CTAs
        # take adjacent tiles along M (or N), in rank order.
        if CL == 1:
            return tm * BM, tn * BN
        if ALONG_M:
            return (tm * CL + rank) * BM, tn * BN
        return tm * BM, (tn * CL + rank) * BN

    def chunk_buffer(c: Any, i: Any) -> Any:
        # "tma_chunked": consumer c's staging buffer for its box i (a constant with one consumer).
        return c * 2 + i % 2 if C > 1 else i % 2

    def chunk_use(nt: Any, i: int) -> Any:
        # Epilogue warpgroup: the uses of staging buffer i % NBUF before piece i of a consumer's
        # nt-th tile (each of the buffer's barriers completes once per use).
        return nt * ((CHUNKS + NBUF - 1 - i % NBUF) // NBUF) + i // NBUF

    def serial_op(op: int, index: Any, value: Any, x: Any = 0.0) -> Any:
        # The serial split-K helper (see _serial_source); its float result is the workspace load.
        return T.cuda.func_call(serial_name, op, index, value, T.float32(x) if isinstance(x, float) else x,
                                source_code=serial_source, return_type="float32")

    def cluster_sum(ptr: Any) -> Any:
        # Split-K: the fp32 at this shared-memory offset summed over the cluster's CTAs, in rank
        # order (the same order on every CTA: the result is bitwise reproducible).
        total = None
        for r in range(SPLIT):
            v = T.cuda.func_call(dsmem_name, ptr, r, source_code=dsmem_source, return_type="float32")
            total = v if total is None else total + v
        return total

    def rotated(kt: Any, m0: Any, n0: Any) -> Any:
        # k_rotate: the tile at (m0, n0) loads its kt-th k-tile from its own start on, its linear
        # index modulo KT, so CTAs that stream at the same time read different columns of their
        # rows; without it, kt itself (the kernel traced as before the knob existed).
        return (kt + (m0 // BM + n0 // BN * GM) % KT) % KT if K_ROTATE else kt

    def tile_origin(cid: Any, it: Any, rank: Any) -> tuple[Any, Any]:
        # The it-th tile of cluster cid as the shared schedule orders them (for the ping-pong
        # consumers, which walk every other tile; the other loops are the skeleton's).
        tm, tn = raster(T, cid + it * NCL, sched.grid_m, sched.grid_n, sched.raster_group)
        return cta_origin(tm, tn, rank)

    # fmt: off
    @T.prim_func  # type: ignore[untyped-decorator]
    def main(A: T.Buffer((PM, K), DT), B: T.Buffer((PN, K), DT), D: T.Buffer((PM, PN), DT)):  # type: ignore[valid-type]
        T.device_entry()
        # The kernel's operands: with swap_ab it multiplies B by A (D^T = B A^T).
        if SWAP:
            XA = T.meta_var(B)
            XB = T.meta_var(A)
        else:
            XA = T.meta_var(A)
            XB = T.meta_var(B)
        if SPLIT > 1:
            # SPLIT consecutive CTAs along x (a cluster, unless serial) compute one tile; rank r
            # multiplies k-tiles [r*KT, (r+1)*KT).
            bx, by = T.cta_id([GM * SPLIT, GN])
            if SERIAL:
                rank = T.meta_var(bx % SPLIT)
            else:
                rank, _rank_y = T.cta_id_in_cluster([SPLIT, 1])
        elif PERSIST:
            bx = T.cta_id([GRID])
            if CL > 1:
                rank, _rank_y = T.cta_id_in_cluster([CL, 1])
                cid = T.meta_var(bx // CL)
            else:
                rank = T.meta_var(0)
                cid = T.meta_var(bx)
        else:
            bx, by = T.cta_id([GM, GN])
        wg = T.warpgroup_id([NWG])
        warp = T.warp_id_in_wg([4])
        lane = T.lane_id([32])

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

        pool = T.SMEMPool()
        full = TMABar(pool, S)
        empty = MBarrier(pool, S)
        if PINGPONG:
            # order[c]: consumer c finished waiting for the stages of its latest tile.
            order = MBarrier(pool, 2)
        if EWG:
            # staged[c*NBUF + b]: consumer c wrote its staging buffer b; drained[...]: the epilogue
            # warpgroup's store has read it. Each completes once per use of the buffer.
            staged = MBarrier(pool, C * NBUF)
            drained = MBarrier(pool, C * NBUF)
        if RED is not None:
            As, Bs, Ds, Red = T.meta_var(sk.ring_tiles(pool, (S, BM, BK), (S, BN, BK), STAGING, RED))
        elif HAS_TAIL:
            As, Bs, Ds, Dt = T.meta_var(sk.ring_tiles(pool, (S, BM, BK), (S, BN, BK), STAGING,
                                                      tail_shape=TAIL_STAGING))
        else:
            As, Bs, Ds = T.meta_var(sk.ring_tiles(pool, (S, BM, BK), (S, BN, BK), STAGING))
        full.init(1)
        empty.init(p.releasers)
        if PINGPONG:
            order.init(1)
        if EWG:
            staged.init(1)
            drained.init(1)
        if ONE_A:
            zero_ring(As, BM)
        if ONE_B:
            zero_ring(Bs, BN)
        sk.publish_barriers()

        if SPLIT > 1:
            m0 = T.meta_var(bx // SPLIT * BM)
            n0 = T.meta_var(by * BN)
        elif not PERSIST:
            m0 = T.meta_var(bx * BM)
            n0 = T.meta_var(by * BN)

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
        def load_atom(s, kt, kk, m0, n0):
            if CL == 1:
                load_own(s, kt, kk, m0, n0)
            else:
                # One branch per rank keeps every shared-memory slice offset a constant.
                for r in range(CL):
                    if rank == r:
                        load_shared_slice(s, kt, kk, m0, n0, r)

        @T.inline
        def load_tile(j, kt, m0, n0):
            # j counts k-tiles loaded by this CTA (its ring position); kt is the k-tile of the
            # output tile at (m0, n0). Wait until every consumer released what the stage held
            # (load j-S; in a cluster, the consumers of every CTA the multicast writes to).
            empty.wait(ring.slot(j), ring.free_phase(j))
            # The whole stage lands here: this CTA's loads plus the peers' multicast slices.
            full.arrive(ring.slot(j), TX_BYTES)
            # One box per 64-element swizzle atom along K: a box row may span at most 128 B with
            # 128B swizzle, and this keeps the tensor map 2-D whatever K is.
            if SPLIT > 1:
                # This CTA's k-tiles of the split: rank*KT + kt.
                load_atoms(j, rank * KT + rotated(kt, m0, n0), m0, n0)
            else:
                load_atoms(j, rotated(kt, m0, n0), m0, n0)

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
        def load_tile_at(j, kt, tm, tn):
            # The shared producer loop hands over cluster tiles; this CTA loads its own tile.
            pm0, pn0 = T.meta_var(cta_origin(tm, tn, rank))
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
        def thread_load(c, kt, m0, n0):
            # loader="threads" (one stage, no producer): thread t of the C*128 copies chunks
            # t, t+C*128, ... of 8 elements (16 B) of the A and B tiles; a chunk past M, N or K
            # is zero-filled (K is a multiple of 8, so a chunk is wholly in or out).
            tid = T.meta_var(c * WARPGROUP + warp * 32 + lane)
            copy_rows(As, XA, BM, m0, M, kt, tid)
            copy_rows(Bs, XB, BN, n0, N, kt, tid)

        @T.inline
        def copy_rows(S_, G_, rows, r0, limit, kt, tid):
            # Chunk q of rows x CHUNKS_K; when the threads do not divide the chunks evenly (three
            # consumers), the last round is guarded.
            for i in T.unroll(-(-rows * CHUNKS_K // NTHREADS)):
                q = T.meta_var(i * NTHREADS + tid)
                row = T.meta_var(q // CHUNKS_K)
                col = T.meta_var(q % CHUNKS_K * 8)
                if rows * CHUNKS_K % NTHREADS == 0 or i * NTHREADS + NTHREADS <= rows * CHUNKS_K:
                    sk.copy_chunk(_COPY16, S_.ptr_to([0, row, col]), G_, r0 + row, limit, kt, col)
                else:
                    if q < rows * CHUNKS_K:
                        sk.copy_chunk(_COPY16, S_.ptr_to([0, row, col]), G_, r0 + row, limit, kt, col)

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
        def mma_steps(acc, desc_a, desc_b, s, row, steps, narrow):
            # The first `steps` k16 steps of a stage, with the full wgmma or (narrow, trim) the
            # last tile column's TRIM_N wide one, whose fragment is the first TRIM_N/2 registers
            # of the full one. A trimmed tile takes its branches per k-tile, around a whole run of
            # wgmmas, never between two of them.
            for ki in T.unroll(steps):
                # ptr_to applies the swizzle; at a row that is a multiple of 8 it is the identity,
                # so this is the atom's base plus 32 B per k16 step, what the descriptor wants.
                T.cuda.wgmma.encode_matrix_descriptor(
                    T.address_of(desc_a[0]), As.ptr_to([s, row, ki * WGMMA_K]),
                    DESC_LBO, DESC_SBO, DESC_SWIZZLE_128B)
                T.cuda.wgmma.encode_matrix_descriptor(
                    T.address_of(desc_b[0]), Bs.ptr_to([s, 0, ki * WGMMA_K]),
                    DESC_LBO, DESC_SBO, DESC_SWIZZLE_128B)
                if narrow:
                    wgmma_narrow(*[acc[i] for i in range(TRIM_N // 2)], desc_a[0], desc_b[0], True, 1, 1, 0, 0)  # type: ignore[misc]
                else:
                    wgmma(*[acc[i] for i in range(NACC)], desc_a[0], desc_b[0], True, 1, 1, 0, 0)

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
        def store_block(acc, row0, n0):
            # wgmma m64nN f32 fragment: register r of a thread holds row
            # 16*warp + lane/4 + 8*((r>>1)&1), column 8*(r>>2) + 2*(lane%4) + (r&1).
            if SWAP:
                # The kernel's (row, col) is the problem's (n, m): D[col, row], one 2-byte store
                # each (a warp's store covers 8 consecutive n of 4 rows of D).
                for r in T.unroll(NACC):
                    row = T.meta_var(row0 + 16 * warp + lane // 4 + 8 * ((r >> 1) & 1))
                    col = T.meta_var(n0 + 8 * (r >> 2) + 2 * (lane % 4) + (r & 1))
                    if row < M:
                        if col < N:
                            D[col, row] = T.cast(acc[r], DT)
            elif PAIRED:
                for q in T.unroll(NACC // 2):
                    row = T.meta_var(row0 + 16 * warp + lane // 4 + 8 * (q & 1))
                    col = T.meta_var(n0 + 8 * (q >> 1) + 2 * (lane % 4))
                    if row < M:
                        if col < N:
                            T.evaluate(T.cuda.func_call(store2_name, D.ptr_to([row, col]), acc[2 * q],
                                                        acc[2 * q + 1], source_code=store2_source))
            else:
                for r in T.unroll(NACC):
                    row = T.meta_var(row0 + 16 * warp + lane // 4 + 8 * ((r >> 1) & 1))
                    col = T.meta_var(n0 + 8 * (r >> 2) + 2 * (lane % 4) + (r & 1))
                    if row < M:
                        if col < N:
                            D[row, col] = T.cast(acc[r], DT)

        @T.inline
        def stmatrix16(staging, acc, box, p16, scol0):
            # stmatrix m8n8.x4 writes four 8x8 matrices of 16-bit values: rows 0-7 / 8-15 of the
            # warp's 16 rows times columns 16p..16p+7 / 16p+8..16p+15. In the fragment those are
            # the register pairs (8p, 8p+1), (8p+2, 8p+3), (8p+4, 8p+5), (8p+6, 8p+7); lane l
            # gives the address of row l%8 of matrix l//8. `staging`: the swizzled 64x64 boxes
            # (Ds) or the plain narrow last box (Dt, rows 2*TAIL bytes apart: a multiple of 16
            # that puts a matrix's 8 rows on distinct banks).
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
        def take_buffer(c, b, use):
            # Epilogue warpgroup: before consumer c writes its staging buffer b for the use-th
            # time, the store of use-1 must have read it (a fresh barrier passes use 0).
            if warp == 0:
                if lane == 0:
                    drained.wait(c * NBUF + b, (use & 1) ^ 1)

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
        def store_box(c, buf, m0, n0, mb, nb):
            r0 = T.meta_var(m0 + c * ROW_BASE + mb * STORE_BOX)
            c0 = T.meta_var(n0 + nb * STORE_BOX)
            Tx.copy_async(D[r0:r0 + STORE_BOX, c0:c0 + STORE_BOX], Ds[buf, :, :], dispatch="tma_auto",
                          **STORE_OPTS)
            bulk_commit()

        @T.inline
        def tail_stmatrix8(acc, buf, p8, scol0):
            # stmatrix m8n8.x2: the 8 columns 8*p8.. of the warp's 16 rows, register pairs
            # (4*p8, 4*p8+1) (rows 0-7) and (4*p8+2, 4*p8+3) (rows 8-15); lanes 0-15 give the
            # addresses (row l%8 of matrix l//8), the others' are ignored.
            srow = T.meta_var(16 * warp + 8 * ((lane // 8) & 1) + lane % 8)
            stmatrix2(Dt.ptr_to([buf, srow, scol0]),
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
        def store_tail(c, buf, m0, n0, mb):
            r0 = T.meta_var(m0 + c * ROW_BASE + mb * STORE_BOX)
            c0 = T.meta_var(n0 + BOX_N * STORE_BOX)
            Tx.copy_async(D[r0:r0 + STORE_BOX, c0:c0 + TAIL], Dt[buf, :, :], dispatch="tma_auto", **STORE_OPTS)
            bulk_commit()

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
                if not WS:
                    if S == 1:
                        # No ring to run ahead in: load the tile, then wait for it.
                        if c == 0:
                            if warp == 0:
                                if lane == 0:
                                    load_tile(j0 + kt, kt, m0, n0)
                full.wait(ring.slot(j0 + kt), ring.phase(j0 + kt))
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
            if not WS:
                if S > 1:
                    if c == 0:
                        if warp == 0:
                            if lane == 0:
                                if kt + S - 1 < KT:
                                    load_tile(j0 + kt + S - 1, kt + S - 1, m0, n0)

        @T.inline
        def mainloop(c, acc0, acc1, desc_a, desc_b, j0, m0, n0):
            # j0: k-tiles this CTA consumed before this output tile (0 without a persistent loop).
            for i in T.unroll(NACC):
                acc0[i] = T.float32(0)
                if MB == 2:
                    acc1[i] = T.float32(0)
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
        def park_block(acc, c, mb):
            # Split-K: park the fragment in this CTA's shared memory, register-major
            # (Red[mb*NACC + r, thread]: a warp's 32 stores fill 128 consecutive bytes).
            for r in T.unroll(NACC):
                Red[mb * NACC + r, c * WARPGROUP + warp * 32 + lane] = acc[r]

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
        def reduce_pair(c, t, q, m0, n0):
            # Registers q, q+1 (q even) of fragment block q // NACC: one row, two adjacent columns.
            grow = T.meta_var(m0 + c * ROW_BASE + q // NACC * WGMMA_M + 16 * warp + lane // 4
                              + 8 * ((q % NACC >> 1) & 1))
            gcol = T.meta_var(n0 + 8 * (q % NACC >> 2) + 2 * (lane % 4))
            lo = T.meta_var(cluster_sum(Red.ptr_to([q, t])))
            hi = T.meta_var(cluster_sum(Red.ptr_to([q + 1, t])))
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
        def serial_epilogue(c, acc0, acc1, m0, n0):
            # Serial split-K: the tile's CTAs take turns (rank order) on a global fp32 workspace
            # slot, handing over through the tile's semaphore: rank r waits for turn r, adds the
            # slot (ranks 0..r-1's sum) to its fragment, and either writes the sum back and
            # passes the turn on, or (the last rank) stores D and resets the semaphore to 0 for
            # the next launch. One thread waits and signals; the consumers sync around it.
            tile = T.meta_var(bx // SPLIT * GN + by)
            t = T.meta_var(c * WARPGROUP + warp * 32 + lane)
            if rank > 0:
                if c == 0:
                    if warp == 0:
                        if lane == 0:
                            T.evaluate(serial_op(SK_WAIT, tile, rank))
                T.evaluate(serial_op(SK_BAR, SK_BAR_ID, C * WARPGROUP))
                take_partial(acc0, tile, t, 0)
                if MB == 2:
                    take_partial(acc1, tile, t, 1)
            if rank < SPLIT - 1:
                hand_partial(acc0, tile, t, 0)
                if MB == 2:
                    hand_partial(acc1, tile, t, 1)
                T.evaluate(serial_op(SK_FENCE, 0, 0))
                T.evaluate(serial_op(SK_BAR, SK_BAR_ID, C * WARPGROUP))
                if c == 0:
                    if warp == 0:
                        if lane == 0:
                            T.evaluate(serial_op(SK_SIGNAL, tile, rank + 1))
            else:
                store_block(acc0, m0 + c * ROW_BASE, n0)
                if MB == 2:
                    store_block(acc1, m0 + c * ROW_BASE + WGMMA_M, n0)
                if c == 0:
                    if warp == 0:
                        if lane == 0:
                            T.evaluate(serial_op(SK_SIGNAL, tile, 0))

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
        def epilogue(c, acc0, acc1, m0, n0, nt):
            # nt: the consumer's tiles before this one (the epilogue warpgroup's handover counts).
            if SERIAL:
                serial_epilogue(c, acc0, acc1, m0, n0)
            elif SPLIT > 1:
                park_block(acc0, c, 0)
                if MB == 2:
                    park_block(acc1, c, 1)
            elif TMA_EPI:
                tma_epilogue(c, acc0, acc1, m0, n0, nt)
            elif CHUNKED:
                chunked_epilogue(c, acc0, acc1, m0, n0, nt)
            else:
                store_block(acc0, m0 + c * ROW_BASE, n0)
                if MB == 2:
                    store_block(acc1, m0 + c * ROW_BASE + WGMMA_M, n0)

        @T.inline
        def consume_tile(c, acc0, acc1, desc_a, desc_b, it, tm, tn):
            # One tile of the persistent loop; `it` places its k-tiles in the ring.
            tm0, tn0 = T.meta_var(cta_origin(tm, tn, rank))
            if not WS:
                # The prefetching thread starts each tile's ring (its stages were released by the
                # previous tile's consumers).
                prologue(c, it * KT, tm0, tn0)
            mainloop(c, acc0, acc1, desc_a, desc_b, it * KT, tm0, tn0)
            epilogue(c, acc0, acc1, tm0, tn0, it)

        @T.inline
        def consume(c):
            acc0 = T.alloc_local((NACC,), "float32")
            if MB == 2:  # a 128-row consumer: a second m64 block with its own accumulators
                acc1 = T.alloc_local((NACC,), "float32")
            else:
                acc1 = T.meta_var(acc0)  # never read: the macros use it under MB == 2 only
            desc_a = T.alloc_local((1,), "uint64")
            desc_b = T.alloc_local((1,), "uint64")
            if PINGPONG:
                # Consumer c computes this CTA's tiles c, c+2, ...; its mainloop starts once the
                # other consumer has all the stages of the tile before (so the two never wait on
                # the ring out of order), and its epilogue overlaps the other's mainloop.
                for t in range((ITERS + 1) // 2):
                    if cid + (2 * t + c) * NCL < CTILES:
                        tm0, tn0 = T.meta_var(tile_origin(cid, 2 * t + c, rank))
                        if 2 * t + c > 0:
                            order.wait(1 - c, ((2 * t + c - 1) // 2) & 1)
                        mainloop(c, acc0, acc1, desc_a, desc_b, (2 * t + c) * KT, tm0, tn0)
                        epilogue(c, acc0, acc1, tm0, tn0, t)
            elif PERSIST:
                sk.for_each_tile(cid, consume_tile, (c, acc0, acc1, desc_a, desc_b))
            else:
                mainloop(c, acc0, acc1, desc_a, desc_b, 0, m0, n0)
                epilogue(c, acc0, acc1, m0, n0, 0)
            if (TMA_EPI or CHUNKED) and not EWG:
                # Shared memory must stay valid until the last stores have read it.
                if warp == 0:
                    if lane == 0:
                        bulk_wait_read(0)

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
        def drain_cta_tile(c, it, tm, tn):
            tm0, tn0 = T.meta_var(cta_origin(tm, tn, rank))
            drain_tile(c, it, tm0, tn0)

        @T.inline
        def drain(c):
            # The same tiles in the same order as consumer c.
            if PINGPONG:
                for t in range((ITERS + 1) // 2):
                    if cid + (2 * t + c) * NCL < CTILES:
                        tm0, tn0 = T.meta_var(tile_origin(cid, 2 * t + c, rank))
                        drain_tile(c, t, tm0, tn0)
            elif PERSIST:
                sk.for_each_tile(cid, drain_cta_tile, (c,))
            else:
                drain_tile(c, 0, m0, n0)

        @T.inline
        def consumer_role():
            if REBALANCE:
                set_regs_inc(p.consumer_regs)
            consume(wg)

        if WS:
            if wg == C:
                if REBALANCE:
                    set_regs_dec(p.producer_regs)
                if warp == 0:
                    if lane == 0:
                        if PERSIST:
                            sk.produce_tiles(cid, load_tile_at)
                        else:
                            for j in range(KT):
                                load_tile(j, j, m0, n0)
            else:
                if EWG:
                    if wg == C + 1:
                        # The epilogue warpgroup: warp c serves consumer c.
                        if REBALANCE:
                            set_regs_dec(p.producer_regs)
                        for c in range(C):
                            if warp == c:
                                if lane == 0:
                                    drain(c)
                    else:
                        consumer_role()
                else:
                    consumer_role()
        else:
            if not PERSIST:
                prologue(wg, 0, m0, n0)
            consume(wg)
        if RED is not None:
            # Every CTA of the cluster has parked its fragment (barrier.cluster.arrive releases,
            # .wait acquires): the consumer threads reduce their share; the second barrier keeps
            # each CTA's shared memory alive until its peers have read it.
            T.cuda.cluster_sync()
            if wg < C:
                reduce_tile(wg, m0, n0)
            T.evaluate(T.cuda.func_call(_CLUSTER_SYNC_RELAXED[0], source_code=_CLUSTER_SYNC_RELAXED[1]))
        if CL > 1:
            # No CTA leaves while a peer may still multicast into it or arrive on its barriers.
            T.cuda.cluster_sync()
    # fmt: on
    return main
