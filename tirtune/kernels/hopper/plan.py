"""The Hopper kernel's plan: everything that follows from (config, problem), derived in Python.

`plan(config, problem)` checks the pair against the Hopper space's rules (SpaceError naming the
broken ones) and returns a `KernelPlan`: the skeleton's common part (`GemmPlan`: sizes, tiles,
k-tiles, warpgroups, tile schedule) plus what only this branch reads. The kernel's modules take
their constants from it; nothing in it needs TVM.

* Axes. With swap_ab the kernel computes D^T = B A^T: the plan's m, n, blk_m, blk_n and cluster
  dimension are the kernel's (m is the problem's N, n its M), and `problem_shape` gives D's shape.
  With swiglu the GEMM is 2N wide (`Problem.gemm_n`, B's rows): the kernel's n (m with swap_ab)
  is 2N, `gemm_shape` gives A's and B's rows and `problem_shape` D's (M, N).
* Consumers. "cooperative": consumer warpgroup c owns rows [c*rows, (c+1)*rows) of the tile (rows
  = blk_m/consumers, 64 or 128: one or two m64 wgmma blocks, `m_blocks`, each with its own
  `acc_regs` fp32 registers a thread); "pingpong" (persistent, 2 consumers): each consumer owns
  whole tiles (`rows` = blk_m, `row_base` 0). Four consumers (256-row tiles, 64 rows each) are
  cooperative only.
* Registers. reg_split "C/P": setmaxnreg.inc C for the consumers, .dec P for the producer (and
  the epilogue warpgroup), emitted only where `rebalances_registers` (rules.needs_rebalance: 2 or
  4 consumers holding at least 64 accumulators). ptxas still compiles every instruction within
  the launch's even share (168 registers with 3 warpgroups, 128 with 4, 96 with 5), so one
  m64n256 wgmma (128 accumulators) needs at most 3 warpgroups.
* Launch. `grid` CTA tiles; a cluster of `cluster` CTAs along cluster_dim forms one cluster tile
  (`cluster_grid`), persistent grids are capped by `CLUSTER_CTAS`, and split-K launches split_k
  CTAs a tile (`ctas`). `cta_origin` places a CTA of a cluster tile.
* Stages. `stage_bytes` is what TMA delivers per stage (whole boxes; a one-row operand's box is
  its one row); `atoms` the 128-byte swizzle atoms along K (one box each: 64 elements of f16 or
  bf16, 128 of e4m3).
* Element sizes. A and B hold 2-byte (f16, bf16) or 1-byte (e4m3) elements, D `out_dtype` (bf16
  for e4m3). A wgmma step reads 32 bytes of K whatever the type: k16 for 2-byte elements, k32 for
  e4m3 (`wgmma_k`); the accumulators are fp32 either way.
* Epilogue. The TMA-store epilogues' 64x64 boxes (`store_boxes`, `staging_boxes`), the narrow
  last box of "tma_chunked" (`tail_cols`), and the pieces handed to the epilogue warpgroup
  (`store_chunks`).
* Fused epilogue: the problem's ops (`fused`, core/epilogue.py), applied where D is written; its
  block scales (FP8) to each k-tile's product in the consumers' loop (`block_scaled`).
* Variants derived from the rules: trim (`trim_n`, `trim_k`, `trim_m`: rules.trim_work), peel_k
  (`peel_k`: rules.k_tail_steps), the L2 options of the TMA loads (`load_options`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tirtune.core.config import Config
from tirtune.core.epilogue import BLOCK_K, EPILOGUE_NONE, EpilogueSpec
from tirtune.core.problem import Problem, out_dtype_of
from tirtune.kernels.skeleton import GemmPlan, TileSchedule, plan_fields
from tirtune.space.hopper.rules import (
    CONFIG_RULES,
    PROBLEM_RULES,
    SMS,
    ConfigRule,
    fp8_block_buffers,
    k_tail_steps,
    needs_rebalance,
    refuse_if_broken,
    trim_work,
)

__all__ = [
    "CLUSTER_CTAS",
    "CONSUMER_REGS",
    "PRODUCER_REGS",
    "SMS",
    "STORE_BOX",
    "TEMPLATE_NAME",
    "WGMMA_K",
    "WGMMA_K_BYTES",
    "WGMMA_M",
    "KernelPlan",
    "plan",
]

TEMPLATE_NAME = "hopper_gemm"

WGMMA_M = 64
WGMMA_K = 16  # k of one wgmma step of 2-byte operands (k32 for e4m3: `KernelPlan.wgmma_k`)
WGMMA_K_BYTES = 32  # K bytes one wgmma step reads from each operand row, whatever the type
# Register budgets after setmaxnreg (multiples of 8, within 24..256). With 3 warpgroups the
# launch gives 168 registers a thread (65536 / 384, rounded down to 8); 40 for the producer and
# 232 for two consumers add up to exactly 3 x 128 x 168. With one consumer (256 threads) every
# thread may already hold 255 registers, and ptxas ignores setmaxnreg there ("unable to determine
# register count at entry"), so it is only emitted with two consumers; likewise when they hold
# fewer than 64 accumulators (128x64 tiles: ptxas then allocates 58 registers, not 168).
# reg_split picks the pair (default 232/40; 240/24 also sums to 504 <= 512).
PRODUCER_REGS = 40
CONSUMER_REGS = 232
# SMS: streaming multiprocessors of the H200 (and H100 SXM): the persistent grid's cap, and the wave
# split_k_scope="tail" counts whole waves by (rules.SMS).
# CTAs of a persistent grid in clusters of 1, 2, 4: a cluster must fit inside one GPC, and 4-CTA
# clusters leave SMs idle in GPCs whose SM count is not a multiple of 4; 128 assumes 32 clusters.
# GPCs are floor-swept per die, so the count belongs to the card: the H100 we measured holds 66
# pairs but only 30 clusters of 4 (bench/results/profiles/2026-12-06-cluster-occupancy-h100.json),
# so there a 4-CTA grid of more than 30 clusters runs its last clusters as a second wave.
CLUSTER_CTAS = {1: SMS, 2: SMS, 4: 128}
STORE_BOX = 64  # the TMA-store epilogue's box: 64 rows x 64 columns (one 128-byte swizzle atom wide)
# l2_hint's policy names -> the TMA loads' L2::cache_hint (TVM encodes the createpolicy value).
L2_CACHE_HINTS = {"first": "evict_first", "last": "evict_last"}


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
    # k_rotate (hopper-gemm/5): tile t loads its k-tiles from (t mod k-tiles) on, wrapping (measured in
    # docs/perf-notes.md, "k_rotate").
    k_rotate: bool = False
    # split_k_scope (rules.split_k_tail_supported): "tail" splits only the last, partial wave's tiles.
    split_k_scope: str = "all"
    # stream_k (rules.stream_k_supported): each persistent CTA an equal share of all the tiles'
    # k-tiles (`stream_span`), a tile two CTAs share finished by the one holding its first k-tile.
    stream_k: bool = False
    # stream_k_scope "tail" (rules.stream_k_tail_supported): the whole rounds but the last run
    # data-parallel (`stream_rounds`), only the last whole round and the partial one are shared out.
    stream_k_scope: str = "all"
    # The problem's fused epilogue (core/epilogue.py): ops applied to the fp32 values written to D.
    fused: EpilogueSpec = EPILOGUE_NONE
    # Block scales (rules.fp8_block_buffers): the k-tile products a consumer holds, 2 when the next
    # k-tile's wgmma run while the last one is promoted.
    block_buffers: int = 1
    # block_stagger (rules.block_stagger_supported): odd consumers take their first k-tile alone,
    # so their pairs of k-tiles end half a pair away from the even consumers'.
    block_stagger: bool = False

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
        """128-byte swizzle atoms along K in one stage (`atom_k` elements each): one TMA box each
        per operand."""
        return self.blk_k // self.atom_k

    @property
    def out_dtype(self) -> str:
        """D's dtype: the operands' own, for e4m3 operands bf16, or fp16 where the fused epilogue
        holds out_float16 (core/epilogue.py); bias and residual come in it too."""
        return out_dtype_of(self.dtype, self.fused)

    @property
    def block_scaled(self) -> bool:
        """The fused epilogue's block scales (FP8, core/epilogue.py): each k-tile, one 128-deep k
        block (rules.fp8_block_k_tile), is multiplied into a fragment of its own, then scaled and
        added to the tile's fp32 sum (`mma.py`)."""
        return self.fused.block_scaled

    @property
    def k_blocks(self) -> int:
        """The block scales' k blocks: ceil(K / 128)."""
        return -(-self.k // BLOCK_K)

    @property
    def wgmma_k(self) -> int:
        """K of one wgmma step: 32 bytes of each operand row, k16 for 2-byte elements, k32 for e4m3."""
        return WGMMA_K_BYTES // self.element_bytes

    @property
    def serial_split(self) -> bool:
        """Split-K reduced in turn through a global workspace (not a cluster through DSMEM)."""
        return self.split_k > 1 and self.split_k_reduce == "serial"

    @property
    def split_tail(self) -> bool:
        """Only the last, partial wave's tiles are split (split_k_scope "tail"): a 1-D grid of the
        whole waves' tiles (`dp_tiles` CTAs, one tile each over the whole K) followed by
        `tail_tiles` x split_k CTAs (rank r of tail tile i is CTA dp_tiles + i*split_k + r)."""
        return self.split_k > 1 and self.split_k_scope == "tail"

    @property
    def dp_tiles(self) -> int:
        """Tiles run data-parallel (the whole waves' with split_tail; none split otherwise)."""
        return self.tiles - self.tiles % SMS if self.split_tail else (0 if self.split_k > 1 else self.tiles)

    @property
    def split_tiles(self) -> int:
        """Tiles whose k-tiles are split over split_k CTAs (each with a workspace slot if serial)."""
        return self.tiles - self.dp_tiles if self.split_k > 1 else 0

    @property
    def workspace_slots(self) -> int:
        """fp32 partial tiles the serial helper's static workspace holds: one per split tile (a
        serial split), or one per CTA (stream_k: a CTA hands over at most its first tile's part)."""
        return self.tile_schedule.ctas if self.stream_k else self.split_tiles

    @property
    def stream_rounds(self) -> int:
        """stream_k: the rounds of whole tiles each CTA runs data-parallel before its share (tile
        r * CTAs + cta in round r): none with stream_k_scope "all"; with "tail", every whole round
        but the last, so that the shared tiles number one round or more (and a share is a tile's
        k-tiles or more) while the rounds before keep their CTAs on neighbouring tiles at the same
        k-step, as the persistent kernel does."""
        if self.stream_k_scope != "tail":
            return 0
        return max(self.tiles // self.tile_schedule.ctas - 1, 0)

    @property
    def stream_first_tile(self) -> int:
        """stream_k: the first tile of the shared stream (the data-parallel rounds' come before)."""
        return self.stream_rounds * self.tile_schedule.ctas

    @property
    def stream_iterations(self) -> int:
        """stream_k: the k-tiles of the shared tiles, which the CTAs share out in tile order."""
        return (self.tiles - self.stream_first_tile) * self.k_tiles

    @property
    def stream_share_units(self) -> int:
        """stream_k: the most tiles (whole or in part) one CTA's share touches: its k-tiles
        (at most ceil(I / CTAs)) span that many tiles' worth, plus one where it starts mid-tile."""
        share = -(-self.stream_iterations // self.tile_schedule.ctas)
        return -(-share // self.k_tiles) + 1

    @property
    def stream_units(self) -> int:
        """stream_k: the most pieces one CTA walks: its data-parallel tiles, then its share's."""
        return self.stream_rounds + self.stream_share_units

    def stream_span(self, cta: int) -> tuple[int, int]:
        """stream_k: CTA `cta`'s share [g0, g1) of the stream of k-tiles (k-tile kt of tile t is
        t * k_tiles + kt), as the kernel computes it."""
        ctas = self.tile_schedule.ctas
        return cta * self.stream_iterations // ctas, (cta + 1) * self.stream_iterations // ctas

    def stream_pieces(self, cta: int) -> list[tuple[int, int, int]]:
        """stream_k: (tile, first k-tile, end k-tile) of each tile CTA `cta` multiplies, in order,
        as the kernel's unit loop walks them."""
        g0, g1 = self.stream_span(cta)
        kt, first, ctas = self.k_tiles, self.stream_first_tile, self.tile_schedule.ctas
        pieces = [(r * ctas + cta, 0, kt) for r in range(self.stream_rounds)]
        for u in range(self.stream_share_units):
            t = g0 // kt + u
            if t * kt < g1:
                pieces.append((first + t, max(g0, t * kt) - t * kt, min(g1, t * kt + kt) - t * kt))
        return pieces

    @property
    def gemm_shape(self) -> tuple[int, int]:
        """The GEMM's (M, N) in the problem's axes: A's rows and B's rows (2N with swiglu)."""
        return (self.n, self.m) if self.swap_ab else (self.m, self.n)

    @property
    def problem_shape(self) -> tuple[int, int]:
        """The problem's (M, N): D's shape (with swiglu half the GEMM's width)."""
        m, n = self.gemm_shape
        return (m, n // 2) if self.fused.gated else (m, n)

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
        """CTAs launched: every split tile's split_k CTAs count."""
        if self.split_tail:
            return self.dp_tiles + self.split_tiles * self.split_k
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
        """The last box's width with "tma_chunked" and blk_n off the 64-wide box (its own narrower
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
        return TileSchedule.of(
            self.cluster_grid, self.cluster, self.persistent, CLUSTER_CTAS[self.cluster], self.raster_group
        )

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
        """Rows of the shared operand's tile (B along M, A along N) each CTA of a cluster loads
        where they split evenly (`multicast_slices` otherwise)."""
        return (self.blk_n if self.cluster_dim == "m" else self.blk_m) // self.cluster

    @property
    def multicast_slices(self) -> tuple[tuple[int, int], ...]:
        """Rows [lo, hi) of the shared operand's tile that the CTA of each cluster rank loads and
        multicasts: whole 8-row swizzle atoms, the lower ranks one atom more where the atoms do not
        split evenly (a 136-row B tile over 2 CTAs: 72 and 64 rows; rules.multicast_slice_aligned)."""
        atoms, cl = (self.blk_n if self.cluster_dim == "m" else self.blk_m) // 8, self.cluster
        bounds = [8 * (r * (atoms // cl) + min(r, atoms % cl)) for r in range(cl + 1)]
        return tuple(zip(bounds, bounds[1:], strict=False))

    @property
    def multicast_even(self) -> bool:
        """Every CTA of the cluster loads as many of the shared tile's rows (`multicast_rows`)."""
        return len({hi - lo for lo, hi in self.multicast_slices}) == 1

    def cta_origin(self, tm: Any, tn: Any, rank: Any) -> tuple[Any, Any]:
        """Cluster tile (tm, tn) -> (m0, n0), the first row and column of the tile of the CTA of
        cluster rank `rank` (ints or TIR expressions): a cluster's CTAs take adjacent tiles along M
        (or N), in rank order."""
        if self.cluster == 1:
            return tm * self.blk_m, tn * self.blk_n
        if self.cluster_dim == "m":
            return (tm * self.cluster + rank) * self.blk_m, tn * self.blk_n
        return tm * self.blk_m, (tn * self.cluster + rank) * self.blk_n

    @property
    def stage_bytes(self) -> int:
        """Bytes TMA delivers per stage: whole boxes, out-of-bounds zeros included (a one-row
        operand's box is that one row)."""
        rows_a = 1 if self.one_row_a else self.blk_m
        rows_b = 1 if self.one_row_b else self.blk_n
        return (rows_a + rows_b) * self.blk_k * self.element_bytes

    @property
    def wgmma_name(self) -> str:
        return self.wgmma_of(self.blk_n)

    def wgmma_of(self, n: int) -> str:
        ab = self.ab_type
        return f"wgmma.mma_async.sync.aligned.m64n{n}k{self.wgmma_k}.f32.{ab}.{ab}"

    @property
    def wgmma_transposes(self) -> bool:
        """The wgmma takes the operands' transpose immediates: the 16-bit forms do (both 0 here,
        K-major), the e4m3 form has none (its operands are K-major only)."""
        return self.element_bytes == 2


def plan(config: Config, problem: Problem, config_rules: Sequence[ConfigRule] = CONFIG_RULES) -> KernelPlan:
    """Check (config, problem) against the space's rules (`config_rules`: the Hopper space's
    unless a sweep of unchecked paths names others, bench/fp8_paths.py) and derive the kernel
    constants."""
    refuse_if_broken(TEMPLATE_NAME, config, problem, PROBLEM_RULES, config_rules)
    consumer_regs, producer_regs = (int(v) for v in config.reg_split.split("/"))
    hint_a, hint_b = config.l2_hint.split("/")
    fields = plan_fields(config, problem)
    if config.swap_ab:  # the kernel computes D^T = B A^T: its M is the problem's N
        fields["m"], fields["n"] = problem.gemm_n, problem.m
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
        split_k_scope=config.split_k_scope,
        stream_k=config.stream_k,
        stream_k_scope=config.stream_k_scope,
        fused=problem.epilogue,
        block_buffers=fp8_block_buffers(config) if problem.epilogue.block_scaled else 1,
        block_stagger=config.block_stagger,
    )


def _trims(config: Config, problem: Problem) -> dict[str, Any]:
    if not config.trim:
        return {}
    trim_n, trim_k, trim_m = trim_work(config, problem)
    return {"trim_n": trim_n, "trim_k": trim_k, "trim_m": trim_m}
