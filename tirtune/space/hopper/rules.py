"""Validity rules of the Hopper (sm_90a) spaces: named predicates returning None (valid) or the
reason it is not, and the limits they check.

What the knobs mean and which values they take: the knob table (`tirtune.space.hopper.knobs`).
The rule machinery (rule types, `reads`, `Violation`) is the space package's
(`tirtune.space.validity`), re-exported here; the Blackwell branch takes the rules that mean the
same thing there (TMA strides, the swizzle atom, raster groups, the loader) from this module.
"""

from __future__ import annotations

from tirtune.core.config import Config
from tirtune.core.epilogue import BLOCK_K
from tirtune.core.problem import Problem, block_scales_fp8, out_float16_fp8, swiglu_n_aligned
from tirtune.space.hopper.knobs import (
    CLUSTER_DIMS,
    CLUSTER_SIZES,
    EPILOGUES,
    L2_PROMOTIONS,
    RAGGED_BLK_N,
    REG_SPLITS,
    SCHEDULES,
    SPLIT_K_REDUCES,
    SPLIT_K_SCOPES,
    SPLIT_KS,
)
from tirtune.space.shapes import SMS
from tirtune.space.tma_rules import (
    SWIZZLE_ELEMENTS,
    TMA_EPILOGUES,
    TMA_ROW_BYTES,
    blk_k_matches_swizzle,
    loader_supported,
    raster_group_valid,
    tma_row_stride_aligned,
    tma_store_row_stride_aligned,
)
from tirtune.space.validity import (
    ConfigRule,
    ProblemRule,
    Violation,
    knobs_off_default,
    knobs_read,
    reads,
    refuse_if_broken,
)

__all__ = [
    "refuse_if_broken",
    "CONFIG_RULES",
    "V2_CONFIG_RULES",
    "PROBLEM_RULES",
    "SMEM_LIMIT_BYTES",
    "MAX_STAGES",
    "ConfigRule",
    "K_MULTIPLE",
    "ProblemRule",
    "Violation",
    "accumulator_fits_registers",
    "accumulators",
    "blk_k_matches_swizzle",
    "blk_k_boxes_supported",
    "cluster_divides_grid",
    "cluster_supported",
    "consumer_rows",
    "epilogue_warpgroup_supported",
    "launch_registers",
    "launch_share",
    "needs_rebalance",
    "consumers_split_m",
    "epilogue_supported",
    "loader_supported",
    "multicast_slice_aligned",
    "persistent_needs_producer",
    "pipeline_depth_in_range",
    "smem_bytes",
    "smem_fits",
    "raster_group_valid",
    "register_budget",
    "registers_fit",
    "rebalances_registers",
    "reg_split_valid",
    "rounds",
    "ctas_per_sm",
    "schedule_supported",
    "store_box_divides_tile",
    "tma_load_options_supported",
    "tma_row_stride_aligned",
    "tma_store_row_stride_aligned",
    "V3_CONFIG_RULES",
    "RAGGED_BLK_N",
    "TAIL_BOX_MIN_BLK_N",
    "V4_BLK_N",
    "V4_CONFIG_RULES",
    "k_rotate_supported",
    "k_tail_steps",
    "kernel_shape",
    "kernel_tiles",
    "knobs_off_default",
    "knobs_read",
    "reads",
    "one_row_operand_supported",
    "peel_k_supported",
    "SMS",
    "split_k_bytes",
    "split_k_tail_supported",
    "split_tail_tiles",
    "stream_k_supported",
    "stream_k_tail_supported",
    "split_k_divides_k_tiles",
    "split_k_supported",
    "split_k_workspace_fits",
    "swap_ab_pingpong_unclustered",
    "swap_ab_pingpong_wide",
    "swap_ab_supported",
    "SWIGLU_KNOBS",
    "FP8_KNOBS",
    "FP8_SWIZZLE_ELEMENTS",
    "fp8_blk_k_fills_swizzle",
    "fp8_block_b_blocks",
    "fp8_block_buffers",
    "fp8_block_k_tile",
    "fp8_block_registers",
    "fp8_block_scale_regs",
    "block_stagger_supported",
    "fp8_epilogue_supported",
    "fp8_no_stream_k",
    "fp8_one_row_operand",
    "fp8_tma_loader",
    "fp8_whole_k_tiles",
    "swiglu_n_aligned",
    "swiglu_pairs_in_thread",
    "swiglu_register_epilogue",
    "swiglu_whole_sums",
    "trim_supported",
    "trim_work",
    "v3_values",
    "v4_accumulator_limit",
    "v4_values",
    "warpgroups",
    "wgmma_fits_launch_registers",
    "wgmma_n_supported",
]

# With 2-byte elements (fp16, bf16) K is a multiple of K_MULTIPLE (TMA's row strides).
K_MULTIPLE = TMA_ROW_BYTES // 2

# Dynamic shared memory one CTA may opt into on sm_90 (227 KiB).
SMEM_LIMIT_BYTES = 232_448
# Barriers, the 1024 B alignment of the 128B-swizzled tiles, and slack.
SMEM_OVERHEAD_BYTES = 2_048
# The deepest ring the template builds (its barriers are arrays of `stages`; smem_fits bounds the
# bytes): 20 stages of a 64x16x64 decode tile fill 200 KB. Built and correct to 20 (kit decode-deep,
# bench/results/kits/2026-12-01-decode-deep.md); the search's grid stops at 8, since deeper decode
# rings measured slower.
MAX_STAGES = 20
# fp32 accumulator registers a consumer thread may hold: the rest of the 255-register cap (240
# after setmaxnreg) is addressing, descriptors and loop state (registers_fit asks ~40 of them).
# hopper-gemm/5 takes 192 (/1-4 keep 128): cuBLAS's own kernel at 3000x5000x2000 on the H200 is a
# cooperative 256x152 tile (nvjet_sm90_hsh_152x256_64x4_1x2,
# bench/results/profiles/2026-12-01-gemm-ragged.md), 152 accumulators a
# consumer thread; 256x152 and 256x192 with the chunked TMA store compile without a spill
# (ptxas -v, nvcc 13.0, sm_90a; tests/test_template_build.py).
MAX_ACCUMULATOR_REGS = 192
V4_MAX_ACCUMULATOR_REGS = 128  # hopper-gemm/1-4's limit (their spaces replay recorded data)
# setmaxnreg budgets "consumer/others": each consumer warpgroup gets the first, the producer (and
# the epilogue warpgroup) the second, each a multiple of 8 in 24..256. setmaxnreg.inc waits until
# the CTA's own registers, allocated at launch (warpgroups x the launch share), are free: so
# consumers x C + others x P <= warpgroups x launch share, or the consumers wait forever (seen:
# 120/24 with four consumers + producer, 504 > 5 x 96, hung on the H200). hopper-gemm/3 had the
# first two (2 consumers + producer: 504 = 3 x 168); 232/24 fits 2 consumers + producer +
# epilogue warpgroup (512 = 4 x 128), 112/24 four consumers + producer (472 <= 480).
# (REG_SPLITS, the knob's values: knobs.py)
V3_REG_SPLITS = REG_SPLITS[:2]
# Consumer counts whose kernel moves registers with setmaxnreg: 3 consumers (4 warpgroups, 128
# registers each at launch) run without it, as in hopper-gemm/3.
REBALANCING_CONSUMERS = (2, 4)
REBALANCE_MIN_ACCUMULATORS = 64
REGISTER_FILE = 65_536  # 32-bit registers of one SM, all a CTA's when it runs alone there
REGISTER_OVERHEAD = 40  # addresses, descriptors, barrier phases, loop state of a consumer thread
# Registers one wgmma instruction needs besides its accumulators (descriptors, predicates): ptxas
# asked for 154 to compile an m64n256 wgmma (128 accumulators) in a kernel launched with 128.
WGMMA_OPERAND_REGS = 26
STORE_BOX = 64  # TMA-store epilogue boxes are 64x64
# "tma_chunked" tiles wider than this may end in a narrower box (their own tensor map): the widths
# hopper-gemm/5 added for ragged problems (136..248); narrower tiles keep whole boxes, as before.
TAIL_BOX_MIN_BLK_N = 128
# hopper-gemm/5: the split_k CTAs of one tile reducing through distributed shared memory are a
# cluster, at most 8 CTAs (the portable cluster size); the serial reduction (in turn through a
# global fp32 workspace, ordered by a per-tile semaphore) has no cluster and takes deeper splits.
SPLIT_K_CLUSTER = 8
V4_BLK_N = (64, 128, 192, 256)  # hopper-gemm/1-4's tile widths (narrower ones came with /5)
# The serial reduction's workspace is a static device array (a partial fp32 tile per output tile),
# allocated when the module loads: at most 256 MiB (8192 x 8192 outputs).
SERIAL_WORKSPACE_LIMIT_BYTES = 256 << 20
# The TMA loads' L2 eviction priority per operand ("<A>/<B>": none = no hint, first = evict_first,
# last = evict_last; hopper-gemm/5, later additions).
L2_HINT_POLICIES = ("none", "first", "last")
# A stage's K extent is loaded one 64-element (128-byte) swizzle atom per box: up to four.
MAX_BLK_K = 256
WGMMA_M = 64  # rows of one wgmma (an m64 block)
WGMMA_K = 16  # k of one wgmma step (16-bit operands)
V4_MAX_BLK_K = 128  # hopper-gemm/1-4 loaded one or two atoms a stage


def consumer_rows(config: Config) -> int:
    """Rows of the output tile one consumer warpgroup owns: cooperative consumers split blk_m,
    ping-pong consumers each compute a whole tile."""
    if config.schedule == "pingpong":
        return int(config.blk_m)
    return int(config.blk_m // max(config.consumers, 1))


def accumulators(config: Config) -> int:
    """fp32 accumulators one consumer thread holds: its rows x blk_n over the warpgroup's 128 threads."""
    return int(consumer_rows(config) * config.blk_n // 128)


def staging_bytes(config: Config) -> int:
    """Shared memory of the TMA-store epilogue (2-byte elements): "tma" stages each consumer's
    whole output rows (the tile, or two tiles with ping-pong consumers); "tma_chunked" two 64x64
    boxes per consumer."""
    if config.epilogue == "tma":
        return int(max(config.consumers, 1) * consumer_rows(config) * config.blk_n * 2)
    if config.epilogue == "tma_chunked":
        tail = config.blk_n % STORE_BOX  # the narrower last box's own two buffers
        return int(max(config.consumers, 1) * 2 * STORE_BOX * (STORE_BOX + tail) * 2)
    return 0


def split_k_bytes(config: Config) -> int:
    """Shared memory where a split-K CTA parks its fp32 fragments for the cluster's reduction:
    every consumer's accumulators (the tile, blk_m x blk_n x 4 B, for cooperative consumers);
    none for the serial reduction (its workspace is in global memory)."""
    if config.split_k <= 1 or config.split_k_reduce == "serial":
        return 0
    return int(max(config.consumers, 1) * consumer_rows(config) * config.blk_n * 4)


def smem_bytes(config: Config, element_bytes: int = 2) -> int:
    """Shared memory of a kernel: the ring's stages (A and B tiles of `element_bytes` elements: 2
    for f16 and bf16, 1 for e4m3), the output staging, split-K's parked fragments and overhead."""
    stage = (config.blk_m + config.blk_n) * config.blk_k * element_bytes
    return int(config.stages * stage + staging_bytes(config) + split_k_bytes(config) + SMEM_OVERHEAD_BYTES)


@reads("blk_m", "blk_n", "blk_k", "stages", "consumers", "schedule", "epilogue", "split_k", "split_k_reduce")
def smem_fits(config: Config, problem: Problem) -> str | None:
    need = smem_bytes(config, problem.element_bytes)
    if need > SMEM_LIMIT_BYTES:
        tiles = f"({config.blk_m}+{config.blk_n})x{config.blk_k}"
        staging = f" + {staging_bytes(config)} B of {config.epilogue} output staging" if staging_bytes(config) else ""
        parked = f" + {split_k_bytes(config)} B of split-K fragments" if split_k_bytes(config) else ""
        return (
            f"{config.stages} stages of {tiles}{staging}{parked} need {need} B of shared memory > {SMEM_LIMIT_BYTES} B"
        )
    return None


@reads("persistent", "warp_specialized")
def persistent_needs_producer(config: Config, problem: Problem) -> str | None:
    """hopper-gemm/1 and /2: a persistent CTA loads the next tile's stages while consuming this
    one's, which only the producer did there."""
    if config.persistent and not config.warp_specialized:
        return (
            "a persistent kernel needs warp_specialized: only a producer warpgroup runs the loads "
            "ahead across tile boundaries (the prefetching consumer thread stays within one tile)"
        )
    return None


@reads("epilogue")
def epilogue_supported(config: Config, problem: Problem) -> str | None:
    if config.epilogue not in EPILOGUES:
        return f"epilogue={config.epilogue!r}: known epilogues are {', '.join(EPILOGUES)}"
    return None


@reads("blk_m", "blk_n", "consumers", "schedule", "epilogue", "swap_ab")
def store_box_divides_tile(config: Config, problem: Problem) -> str | None:
    """The TMA-store epilogues move 64x64 boxes: a consumer's rows and blk_n must be multiples of
    64; "tma_chunked" also stores a tile wider than 128 whose width is off the box (the ragged
    widths, TAIL_BOX_MIN_BLK_N and up) with a narrower last box. Swapped, that last box is the
    last rows of D's tile (any multiple of 8 past the 64-row boxes), so every blk_n of 64 or more
    takes it."""
    # The narrowest tile that may end in a narrower box.
    tail_from = STORE_BOX if config.swap_ab else TAIL_BOX_MIN_BLK_N + 1
    tail_ok = config.epilogue == "tma_chunked" and config.blk_n >= tail_from
    if config.epilogue in TMA_EPILOGUES and (
        (config.blk_n % STORE_BOX and not tail_ok) or consumer_rows(config) % STORE_BOX
    ):
        return (
            f"epilogue={config.epilogue} stores {STORE_BOX}x{STORE_BOX} boxes; blk_n={config.blk_n} and "
            f"{consumer_rows(config)} rows per consumer must be multiples of {STORE_BOX}"
            + (
                f" (tma_chunked: or blk_n of {tail_from} or more, a narrower last box)"
                if config.epilogue == "tma_chunked"
                else ""
            )
        )
    return None


@reads("schedule", "persistent", "warp_specialized", "consumers")
def schedule_supported(config: Config, problem: Problem) -> str | None:
    """Ping-pong consumers take turns on the tiles of a persistent CTA, fed by one producer."""
    if config.schedule not in SCHEDULES:
        return f"schedule={config.schedule!r}: known schedules are {', '.join(SCHEDULES)}"
    if config.schedule == "pingpong" and not (config.persistent and config.warp_specialized and config.consumers == 2):
        return (
            "schedule=pingpong needs persistent, warp_specialized and consumers=2: two consumer "
            "warpgroups alternate over the tiles of a persistent CTA while a producer fills the ring"
        )
    return None


def warpgroups(config: Config) -> int:
    """Warpgroups of the CTA: the consumers, the producer, the epilogue warpgroup."""
    return int(
        max(config.consumers, 1) + (1 if config.warp_specialized else 0) + (1 if config.epilogue_warpgroup else 0)
    )


def launch_share(warpgroups: int) -> int:
    """Registers each thread of a CTA of `warpgroups` warpgroups has at launch: the register file
    split evenly over its threads (multiples of 8, at most 255)."""
    return min(255, REGISTER_FILE // (warpgroups * 128) // 8 * 8)


def launch_registers(config: Config) -> int:
    """`launch_share` of this config's CTA."""
    return launch_share(warpgroups(config))


def needs_rebalance(warp_specialized: bool, consumers: int, warpgroups: int, accumulators: int) -> bool:
    """Whether the kernel moves registers with setmaxnreg: with a producer and 2 or 4 consumers
    holding at least REBALANCE_MIN_ACCUMULATORS accumulators a thread, and, beyond 3 warpgroups,
    only when the consumers need more than the launch's share. With one consumer every thread may
    hold 255 registers already; where ptxas allocates below the launch's share it ignores
    setmaxnreg ("unable to determine register count at entry"): seen with 64 accumulators and 4
    warpgroups (90 of 128 registers), not with 3 (168)."""
    return (
        warp_specialized
        and consumers in REBALANCING_CONSUMERS
        and accumulators >= REBALANCE_MIN_ACCUMULATORS
        and (warpgroups <= 3 or accumulators + REGISTER_OVERHEAD > launch_share(warpgroups))
    )


def rebalances_registers(config: Config) -> bool:
    """setmaxnreg runs in this config's kernel (see `needs_rebalance`)."""
    return needs_rebalance(config.warp_specialized, config.consumers, warpgroups(config), accumulators(config))


def _split(config: Config) -> tuple[int, int] | None:
    try:
        consumer, other = (int(v) for v in config.reg_split.split("/"))
    except ValueError:
        return None
    return consumer, other


@reads("reg_split", "blk_m", "blk_n", "consumers", "schedule", "warp_specialized", "epilogue_warpgroup")
def reg_split_valid(config: Config, problem: Problem) -> str | None:
    """Where setmaxnreg runs, the split must fit the register file and move registers from the
    other warpgroups to the consumers; elsewhere the knob would name the default's kernel."""
    split = _split(config)
    if config.reg_split not in REG_SPLITS or split is None:
        return f"reg_split={config.reg_split!r}: known splits (consumer/others) are {', '.join(REG_SPLITS)}"
    if not rebalances_registers(config):
        if config.reg_split != REG_SPLITS[0]:
            return (
                f"reg_split={config.reg_split} needs warp_specialized with 2 or 4 consumers holding at least "
                f"{REBALANCE_MIN_ACCUMULATORS} accumulators a thread: only then does the kernel move registers "
                "with setmaxnreg"
            )
        return None
    consumer, other = split
    consumers = config.consumers
    others = warpgroups(config) - consumers
    launch = launch_registers(config)
    if consumers * consumer + others * other > warpgroups(config) * launch:
        return (
            f"reg_split={config.reg_split}: {consumers} consumer warpgroups x {consumer} + {others} other(s) x {other} "
            f"registers exceed the {warpgroups(config)} x {launch} the CTA holds from its launch; setmaxnreg.inc "
            "would wait forever for the difference"
        )
    if not other <= launch <= consumer:
        return (
            f"reg_split={config.reg_split}: setmaxnreg can only raise the consumers and lower the others from "
            f"the {launch} registers each thread of {warpgroups(config)} warpgroups gets at launch"
        )
    return None


@reads("cluster", "cluster_dim", "persistent", "warp_specialized")
def cluster_supported(config: Config, problem: Problem) -> str | None:
    if config.cluster not in CLUSTER_SIZES:
        return f"cluster={config.cluster}: clusters of {', '.join(map(str, CLUSTER_SIZES))} CTAs are supported"
    if config.cluster_dim not in CLUSTER_DIMS:
        return f"cluster_dim={config.cluster_dim!r}: a cluster lies along 'm' or 'n'"
    if config.cluster > 1 and not (config.persistent and config.warp_specialized):
        return (
            f"cluster={config.cluster} needs persistent (with its producer): the clustered CTAs walk the "
            "same sequence of cluster tiles so their multicast stages stay in step"
        )
    return None


def kernel_shape(config: Config, problem: Problem) -> tuple[int, int]:
    """The (M, N) the kernel computes: the problem's, or (N, M) with swap_ab (D^T = B A^T), its N
    B's rows (2N with swiglu: `Problem.gemm_n`). The tile knobs (blk_m, blk_n, cluster_dim) name
    these axes."""
    return (problem.gemm_n, problem.m) if config.swap_ab else (problem.m, problem.gemm_n)


def kernel_tiles(config: Config, problem: Problem) -> int:
    """Output tiles of the kernel's grid: blk_m x blk_n tiles over its (M, N) (`kernel_shape`)."""
    m, n = kernel_shape(config, problem)
    return int(-(-m // max(config.blk_m, 1)) * -(-n // max(config.blk_n, 1)))


THREADS_PER_SM = 2048


def ctas_per_sm(config: Config, problem: Problem) -> int:
    """CTAs one SM runs at once: a persistent grid's one; else as many as its shared memory (of
    the problem's element size) and threads allow, at most two (the template's CTAs ask for most of
    an SM's registers)."""
    if config.persistent:
        return 1
    by_smem = max(1, SMEM_LIMIT_BYTES // max(smem_bytes(config, problem.element_bytes), 1))
    by_threads = max(1, THREADS_PER_SM // (warpgroups(config) * 128))
    return min(by_smem, by_threads, 2)


def rounds(config: Config, problem: Problem) -> int:
    """How many times the SMs are filled over the kernel: its CTAs (tiles x split_k, every tile
    split: split_k_scope "all") over SMS x `ctas_per_sm`, or a persistent grid's tiles over its
    at most SMS CTAs."""
    tiles = kernel_tiles(config, problem)
    if config.persistent:
        return int(-(-tiles // SMS))
    return int(-(-(tiles * max(config.split_k, 1)) // (SMS * ctas_per_sm(config, problem))))


@reads("cluster", "cluster_dim", "blk_m", "blk_n", "swap_ab")
def cluster_divides_grid(config: Config, problem: Problem) -> str | None:
    """The CTAs of a cluster compute adjacent tiles along cluster_dim: that tile count must divide."""
    if config.cluster not in CLUSTER_SIZES[1:] or config.cluster_dim not in CLUSTER_DIMS:
        return None  # no cluster, or one cluster_supported refuses
    along_m = config.cluster_dim == "m"
    m, n = kernel_shape(config, problem)
    tiles = -(-m // config.blk_m) if along_m else -(-n // config.blk_n)
    if tiles % config.cluster:
        return (
            f"{tiles} tiles along {config.cluster_dim.upper()} do not split into clusters of "
            f"{config.cluster} (blk_{config.cluster_dim}={config.blk_m if along_m else config.blk_n})"
        )
    return None


@reads("cluster", "cluster_dim", "blk_m", "blk_n")
def multicast_slice_aligned(config: Config, problem: Problem) -> str | None:
    """Each CTA of a cluster loads a slice of the shared operand's rows and multicasts it; a slice
    is whole 128B-swizzle atoms (8 rows), as even as the atoms allow (plan.multicast_slices: a
    136-row tile over 2 CTAs is 72 + 64 rows), so the tile needs an atom for every CTA."""
    if config.cluster not in CLUSTER_SIZES[1:] or config.cluster_dim not in CLUSTER_DIMS:
        return None  # no cluster, or one cluster_supported refuses
    shared = config.blk_n if config.cluster_dim == "m" else config.blk_m
    if shared % 8 or shared // 8 < config.cluster:
        return (
            f"the shared {'B' if config.cluster_dim == 'm' else 'A'} tile has {shared} rows: it does not "
            f"split into {config.cluster} slices of whole 8-row swizzle atoms"
        )
    return None


@reads("blk_m", "consumers", "schedule")
def consumers_split_m(config: Config, problem: Problem) -> str | None:
    if config.consumers < 1 or (config.schedule != "pingpong" and config.blk_m % config.consumers):
        return f"blk_m={config.blk_m} does not split evenly over {config.consumers} consumer warpgroups"
    rows = consumer_rows(config)
    if rows not in (64, 128):
        return f"each consumer would own {rows} rows; wgmma m64 tiles allow 64 or 128"
    return None


@reads("blk_m", "blk_n", "consumers", "schedule")
def v4_accumulator_limit(config: Config, problem: Problem) -> str | None:
    """hopper-gemm/1-4 held at most 128 fp32 accumulators a consumer thread; /5 takes up to 192."""
    regs = accumulators(config)
    if regs > V4_MAX_ACCUMULATOR_REGS:
        return f"hopper-gemm/1-4 hold at most {V4_MAX_ACCUMULATOR_REGS} accumulators a consumer thread; got {regs}"
    return None


@reads("blk_m", "blk_n", "consumers", "schedule")
def accumulator_fits_registers(config: Config, problem: Problem) -> str | None:
    regs = accumulators(config)
    if regs > MAX_ACCUMULATOR_REGS:
        return f"a consumer thread would hold {regs} fp32 accumulators; at most {MAX_ACCUMULATOR_REGS} fit in registers"
    return None


def register_budget(config: Config) -> int:
    """Registers a consumer thread may use: its setmaxnreg share, or the launch's even split of
    the 64K-register file over all warpgroups (multiples of 8, at most 255)."""
    split = _split(config)
    if rebalances_registers(config) and split is not None:
        return split[0]
    return launch_registers(config)


@reads("blk_m", "blk_n", "consumers", "schedule", "warp_specialized", "epilogue_warpgroup", "reg_split")
def registers_fit(config: Config, problem: Problem) -> str | None:
    """The accumulators plus ~40 registers of addresses and loop state must fit a consumer thread's
    budget: this is what limits 3 consumer warpgroups (4 with the producer: 128 registers each)."""
    held = accumulators(config)
    budget = register_budget(config)
    if held > MAX_ACCUMULATOR_REGS:
        return None  # accumulator_fits_registers refuses it
    if held + REGISTER_OVERHEAD > budget:
        return (
            f"a consumer thread holds {held} accumulators + ~{REGISTER_OVERHEAD} other registers, more "
            f"than the {budget} it gets with {config.consumers} consumer warpgroups"
            + (" and a producer" if config.warp_specialized else "")
            + (" and an epilogue warpgroup" if config.epilogue_warpgroup else "")
        )
    return None


@reads("epilogue_warpgroup", "epilogue", "warp_specialized")
def epilogue_warpgroup_supported(config: Config, problem: Problem) -> str | None:
    """The epilogue warpgroup stores what the consumers staged: it needs a TMA-store epilogue and
    the producer's warp-specialized layout (its registers are lowered with the producer's)."""
    if not config.epilogue_warpgroup:
        return None
    if config.epilogue not in TMA_EPILOGUES or not config.warp_specialized:
        return (
            "epilogue_warpgroup needs warp_specialized and a TMA-store epilogue (tma or tma_chunked): it issues "
            "the TMA stores of the tiles the consumers staged in shared memory"
        )
    return None


@reads("consumers", "reg_split", "raster_group")
def v3_values(config: Config, problem: Problem) -> str | None:
    """hopper-gemm/3 (whose space replays recorded data) had 1-3 consumers, two register splits
    and grouped or row-major rasterization only."""
    if config.consumers > 3 or config.reg_split not in V3_REG_SPLITS or config.raster_group == 0:
        return (
            f"hopper-gemm/3 has 1-3 consumers, reg_split {' or '.join(V3_REG_SPLITS)} and no column-major "
            f"raster; got consumers={config.consumers}, reg_split={config.reg_split}, "
            f"raster_group={config.raster_group}"
        )
    return None


@reads("blk_n", "blk_k")
def v4_values(config: Config, problem: Problem) -> str | None:
    """hopper-gemm/1-4 built tiles 64, 128, 192 or 256 wide (blk_n) and loaded one or two swizzle
    atoms a stage (blk_k <= 128); narrower tiles and deeper stages came with /5."""
    if config.blk_n not in V4_BLK_N:
        return f"hopper-gemm/1-4 have blk_n {', '.join(map(str, V4_BLK_N))}; got blk_n={config.blk_n}"
    if config.blk_k > V4_MAX_BLK_K:
        return f"hopper-gemm/1-4 have blk_k up to {V4_MAX_BLK_K}; got blk_k={config.blk_k}"
    return None


@reads("swap_ab", "epilogue")
def swap_ab_supported(config: Config, problem: Problem) -> str | None:
    """swap_ab computes D^T: its fragment is D's transpose. The register epilogue stores it one
    2-byte value at a time; "tma_chunked" stages each 64x64 box transposed (stmatrix .trans) and
    TMA-stores it at D's (row, col) = the kernel's (col, row), with or without the epilogue
    warpgroup. "tma" (a consumer's whole rows staged at once) is not built for it."""
    if config.swap_ab and config.epilogue not in ("register", "tma_chunked"):
        return (
            f"swap_ab needs epilogue=register or tma_chunked (got {config.epilogue}): only those store the "
            "transposed fragment"
        )
    return None


@reads("swap_ab", "schedule", "cluster")
def swap_ab_pingpong_unclustered(config: Config, problem: Problem) -> str | None:
    """swap_ab with ping-pong consumers in a multicast cluster computes wrong results on the H200:
    64x128x64 s8 c2 persistent ping-pong cl2m swap at 1024^3 fp16 (relative error 0.13, found by a
    suite job's check), and 17 of its one-knob neighbours
    (bench/results/sweeps/2026-11-30-wrong-kernel-neighbours.md): with
    clusters of 2 along M or N, at 4 and 8 stages, at 512x1024x1024 and 2048^3 too; without swap or
    without a cluster the same kernels are right. The cause is not found, so the whole combination
    is refused, not only the stage counts and cluster sizes that failed (docs/perf-notes.md)."""
    if config.swap_ab and config.schedule == "pingpong" and config.cluster > 1:
        return (
            f"swap_ab with schedule=pingpong needs cluster=1 (got cluster={config.cluster}): the combination "
            "computed wrong results on the H200 (bench/results/sweeps/2026-11-30-wrong-kernel-neighbours.md)"
        )
    return None


# swap_ab_pingpong_wide: the widest swapped ping-pong tile of 64 rows that no run found wrong.
SWAP_PINGPONG_MAX_BLK_N = 120


@reads("swap_ab", "schedule", "blk_m", "blk_n")
def swap_ab_pingpong_wide(config: Config, problem: Problem) -> str | None:
    """swap_ab with ping-pong consumers on 64-row tiles 128 or more wide computes wrong results on
    the H200 without a cluster too: 64x256x64 s4 r240/24 and 64x224x64 s4 at 1748x1024x1536 bf16
    (relative error 0.11), 64x144x64 s5 at 285x17920x5120 fp16 (0.063), 64x256x64 s5 at
    5861x13824x5120 fp16, each caught by a job's check (the WRONG_RESULT rows of
    bench/results/generalize/2026-12-02-2580492372-trials.csv, tuner-quality-2026-12-02-trials.csv
    and tuner-quality-2026-12-03-trials.csv). Every wrong swapped ping-pong kernel measured so far,
    these four and the 18 clustered ones of bench/results/sweeps/2026-11-30-wrong-kernel-neighbours.md
    (64x128 to 64x160), has 64 rows and 128 or more columns; the same kernels pass at other stage
    counts, raster groups and shapes, so the fault depends on timing, and the cause is not found.
    Narrower swapped ping-pong tiles (the decode and small-M bests: 64x24 to 64x64) and 128-row
    ones passed every check; the whole wide 64-row region is refused, not only the points that
    failed (docs/perf-notes.md, "Wrong swapped ping-pong kernels without a cluster")."""
    if (
        config.swap_ab
        and config.schedule == "pingpong"
        and config.blk_m == WGMMA_M
        and config.blk_n > SWAP_PINGPONG_MAX_BLK_N
    ):
        return (
            f"swap_ab with schedule=pingpong and blk_m={WGMMA_M} needs blk_n <= {SWAP_PINGPONG_MAX_BLK_N} "
            f"(got blk_n={config.blk_n}): wider ones computed wrong results on the H200 "
            "(bench/results/generalize/tuner-quality-2026-12-03-trials.csv, WRONG_RESULT rows)"
        )
    return None


def trim_work(config: Config, problem: Problem) -> tuple[int, int, bool]:
    """What `trim` takes off a ragged problem's edge tiles, in the kernel's axes: the narrower
    wgmma N of the last tile column (its valid columns rounded up to 8; 0: none), the k16 steps
    of the last k-tile that start before K (0: all of them), and whether the last tile row has
    m64 blocks wholly past M."""
    m, n = kernel_shape(config, problem)
    if config.blk_m <= 0 or config.blk_n <= 0 or config.blk_k < WGMMA_K:
        return 0, 0, False
    cols = n - (-(-n // config.blk_n) - 1) * config.blk_n
    narrow = -(-cols // 8) * 8
    rows = m - (-(-m // config.blk_m) - 1) * config.blk_m
    return narrow if narrow < config.blk_n else 0, k_tail_steps(config, problem), rows <= config.blk_m - WGMMA_M


def k_tail_steps(config: Config, problem: Problem) -> int:
    """The k16 steps of the last k-tile that start before K, when that is fewer than a k-tile
    has (K = 2000 in 64-deep tiles: the last holds 16 live columns, 1 step of 4); 0 when every
    step of the last k-tile has live columns."""
    if config.blk_k < WGMMA_K:
        return 0
    depth = problem.k - (-(-problem.k // config.blk_k) - 1) * config.blk_k
    steps = -(-depth // WGMMA_K)
    return steps if steps < config.blk_k // WGMMA_K else 0


@reads("trim", "split_k", "blk_m", "blk_n", "blk_k", "swap_ab")
def trim_supported(config: Config, problem: Problem) -> str | None:
    """trim skips the MMAs past a ragged problem's edges (`trim_work`): it needs the whole K in
    one CTA (split_k=1: the last k-tile is then the CTA's last), and an edge with something to
    skip (on any other problem it would build the untrimmed kernel under another name)."""
    if not config.trim:
        return None
    if config.split_k > 1:
        return f"trim needs split_k=1 (got {config.split_k}): it trims the last k-tile of the whole K"
    if trim_work(config, problem) == (0, 0, False):
        return (
            f"trim has nothing to skip on {problem.m}x{problem.n}x{problem.k} in {config.blk_m}x{config.blk_n}x"
            f"{config.blk_k} tiles: every edge tile's MMAs are all inside the problem"
        )
    return None


@reads("peel_k", "trim", "split_k", "blk_k")
def peel_k_supported(config: Config, problem: Problem) -> str | None:
    """peel_k runs the last k-tile after the consumers' k loop with only its k16 steps that start
    before K (`k_tail_steps`): it needs the whole K in one CTA (split_k=1: the last k-tile is then
    the CTA's last), a last k-tile with steps to skip (elsewhere it would build the unpeeled
    kernel under another name), and not trim, which cuts the same steps its own way."""
    if not config.peel_k:
        return None
    if config.trim:
        return "peel_k and trim both cut the last k-tile's padding: pick one (trim=true already does)"
    if config.split_k > 1:
        return f"peel_k needs split_k=1 (got {config.split_k}): it peels the last k-tile of the whole K"
    if k_tail_steps(config, problem) == 0:
        return (
            f"peel_k has nothing to skip at K={problem.k} in {config.blk_k}-deep k-tiles: every k16 step of the "
            "last k-tile has live columns"
        )
    return None


@reads("k_rotate", "loader", "cluster", "peel_k", "trim", "blk_m", "blk_n", "swap_ab")
def k_rotate_supported(config: Config, problem: Problem) -> str | None:
    """k_rotate starts each tile's k loop at its own k-tile (the tile's index modulo the k-tiles):
    it is a TMA-ring order (loader "tma"), each CTA's own (no cluster: a multicast writes every
    CTA's stage with the same k-tile at once), with the last k-tile not special (neither peel_k
    nor trim, which treat the last k-tile apart), and only where one operand is streamed once (one
    tile along the kernel's M or N): elsewhere the tiles that share an operand tile read it at the
    same time from L2, and a rotation would spread those reads over the whole K."""
    if not config.k_rotate:
        return None
    if config.loader != "tma":
        return f"k_rotate orders a TMA ring's loads; loader={config.loader!r} has none"
    if config.cluster != 1:
        return (
            f"k_rotate needs cluster=1 (got {config.cluster}): a cluster's multicast loads one k-tile into all its CTAs"
        )
    if config.peel_k or config.trim:
        return "k_rotate moves the last k-tile into the loop: not with peel_k or trim, which treat it apart"
    m, n = kernel_shape(config, problem)
    if -(-m // config.blk_m) > 1 and -(-n // config.blk_n) > 1:
        return (
            f"k_rotate pays only where one operand is streamed once (one tile along M or N); {m}x{n} in "
            f"{config.blk_m}x{config.blk_n} tiles shares both operands between tiles"
        )
    return None


@reads("split_k", "split_k_reduce", "persistent", "cluster", "epilogue", "loader")
def split_k_supported(config: Config, problem: Problem) -> str | None:
    """The split_k CTAs of one output tile (a cluster for the DSMEM reduction) come from the 2-D
    grid, one tile each (persistent CTAs would have to walk tiles in step and reduce each one);
    no multicast cluster besides; the reduced tile is stored from registers; TMA loads."""
    if config.split_k not in SPLIT_KS:
        return f"split_k={config.split_k}: the k-tiles split over {', '.join(map(str, SPLIT_KS))} CTAs"
    if config.split_k_reduce not in SPLIT_K_REDUCES:
        return f"split_k_reduce={config.split_k_reduce!r}: known reductions are {', '.join(SPLIT_K_REDUCES)}"
    if config.split_k > SPLIT_K_CLUSTER and config.split_k_reduce == "dsmem":
        return (
            f"split_k={config.split_k} through distributed shared memory needs a cluster of {config.split_k} CTAs; "
            f"a portable cluster holds at most {SPLIT_K_CLUSTER} (split_k_reduce=serial takes deeper splits)"
        )
    if config.split_k > 1 and (
        config.persistent or config.cluster != 1 or config.epilogue != "register" or config.loader != "tma"
    ):
        return (
            f"split_k={config.split_k} needs one tile per cluster (not persistent), cluster=1 (the split is the "
            "cluster), epilogue=register (the reduced tile is stored from registers) and loader=tma"
        )
    return None


@reads("split_k", "split_k_reduce", "blk_m", "blk_n", "swap_ab", "split_k_scope")
def split_k_workspace_fits(config: Config, problem: Problem) -> str | None:
    """The serial reduction's static workspace holds one fp32 tile per output tile."""
    if config.split_k <= 1 or config.split_k_reduce != "serial" or config.blk_m <= 0 or config.blk_n <= 0:
        return None
    tiles = kernel_tiles(config, problem)
    if config.split_k_scope == "tail":
        tiles = tiles % SMS  # only the last wave's tiles are split
    need = tiles * config.blk_m * config.blk_n * 4
    if need > SERIAL_WORKSPACE_LIMIT_BYTES:
        return (
            f"split_k_reduce=serial keeps an fp32 tile per output tile in a static workspace: {need} B "
            f"> {SERIAL_WORKSPACE_LIMIT_BYTES} B"
        )
    return None


def split_tail_tiles(config: Config, problem: Problem) -> tuple[int, int]:
    """(data-parallel tiles, tail tiles) of split_k_scope="tail": the whole waves' tiles (a multiple
    of SMS, one CTA each over the whole K) and the last, partial wave's (split_k CTAs each)."""
    tiles = kernel_tiles(config, problem)
    return tiles - tiles % SMS, tiles % SMS


@reads("split_k_scope", "split_k", "split_k_reduce", "warp_specialized", "k_rotate", "blk_m", "blk_n", "swap_ab")
def split_k_tail_supported(config: Config, problem: Problem) -> str | None:
    """split_k_scope="tail" splits only the last, partial wave's tiles (tiles mod SMS), split_k CTAs
    each, reduced in turn through the workspace (split_k_reduce="serial"); the whole waves' tiles
    run one CTA each over the whole K. Its CTAs multiply k-tile counts that differ, so the loads
    are a producer's (warp_specialized) in plain order (no k_rotate). It needs a partial wave after
    at least one whole one (otherwise every tile is in the last wave: split_k_scope="all"), and the
    tail's CTAs must fit in one wave (more would run a wave of their own)."""
    if config.split_k_scope not in SPLIT_K_SCOPES:
        return f"split_k_scope={config.split_k_scope!r}: the scopes are {', '.join(SPLIT_K_SCOPES)}"
    if config.split_k_scope != "tail":
        return None
    if config.split_k <= 1 or config.split_k_reduce != "serial":
        return (
            f"split_k_scope=tail splits the last wave's tiles through the serial workspace: it needs split_k > 1 "
            f"and split_k_reduce=serial (got {config.split_k}, {config.split_k_reduce!r})"
        )
    if not config.warp_specialized or config.k_rotate:
        return (
            "split_k_scope=tail needs warp_specialized (a producer loads each CTA's own k-tile count) and no k_rotate"
        )
    if config.blk_m <= 0 or config.blk_n <= 0:
        return None
    whole, tail = split_tail_tiles(config, problem)
    if whole == 0 or tail == 0:
        return (
            f"split_k_scope=tail needs a partial wave after a whole one: {whole + tail} tiles on {SMS} SMs "
            "(split_k_scope=all splits them all)"
        )
    if tail * config.split_k > SMS:
        return (
            f"split_k_scope=tail: the last wave's {tail} tiles x split_k={config.split_k} = "
            f"{tail * config.split_k} CTAs do not fit one wave of {SMS}"
        )
    return None


@reads(
    "stream_k",
    "persistent",
    "warp_specialized",
    "cluster",
    "split_k",
    "schedule",
    "epilogue_warpgroup",
    "trim",
    "peel_k",
    "k_rotate",
    "loader",
    "blk_m",
    "blk_n",
    "swap_ab",
)
def stream_k_supported(config: Config, problem: Problem) -> str | None:
    """stream_k: one persistent CTA an SM, each over an equal share of all the tiles' k-tiles
    (CTA c: [c*I // SMS, (c+1)*I // SMS) of I = tiles x k-tiles, in tile order). Built for the
    plain persistent kernel: a producer (each CTA's k-tile counts differ per tile), cooperative
    consumers, no cluster, no split_k (stream-K is its own split), the k loop in order (no trim,
    peel_k or k_rotate), TMA loads, the consumers storing their own tiles (no epilogue
    warpgroup). At least one round of tiles: then every CTA's share is a tile's k-tiles or more,
    so at most two CTAs share a tile, and the one holding its first k-tile finishes it with the
    other's partial tile (one workspace slot a CTA, the serial split's helper)."""
    if not config.stream_k:
        return None
    plain = {
        "persistent": config.persistent,
        "warp_specialized": config.warp_specialized,
        "cluster=1": config.cluster == 1,
        "split_k=1": config.split_k == 1,
        "schedule=cooperative": config.schedule == "cooperative",
        "no epilogue_warpgroup": not config.epilogue_warpgroup,
        "no trim": not config.trim,
        "no peel_k": not config.peel_k,
        "no k_rotate": not config.k_rotate,
        "loader=tma": config.loader == "tma",
    }
    missing = [name for name, ok in plain.items() if not ok]
    if missing:
        return f"stream_k is built for the plain persistent kernel; it needs {', '.join(missing)}"
    if config.blk_m <= 0 or config.blk_n <= 0:
        return None
    tiles = kernel_tiles(config, problem)
    if tiles < SMS:
        return (
            f"stream_k needs at least one round of tiles ({tiles} tiles on {SMS} SMs): with fewer, a CTA's share "
            "would be less than a tile and three CTAs could share one (split_k spreads a small problem)"
        )
    need = SMS * config.blk_m * config.blk_n * 4
    if need > SERIAL_WORKSPACE_LIMIT_BYTES:
        return f"stream_k keeps an fp32 tile per CTA in a static workspace: {need} B > {SERIAL_WORKSPACE_LIMIT_BYTES} B"
    stream = tiles * -(-problem.k // max(config.blk_k, 1))
    if stream * SMS >= 1 << 31:
        return (
            f"stream_k computes each CTA's share as cta x {stream} k-tiles / {SMS} in 32-bit integers: "
            "the product would overflow"
        )
    return None


@reads("stream_k_scope", "stream_k")
def stream_k_tail_supported(config: Config, problem: Problem) -> str | None:  # noqa: ARG001 (a rule's signature)
    """stream_k_scope "tail": every whole round of tiles but the last runs data-parallel (one
    whole tile a CTA a round, in the persistent kernel's order) and only the rest is shared out,
    so a scope needs stream_k (what it scopes); stream_k_supported's round of tiles leaves the
    shared stream one round or more."""
    if config.stream_k_scope != "all" and not config.stream_k:
        return f'stream_k_scope "{config.stream_k_scope}" scopes stream_k, which is off'
    return None


@reads("split_k", "blk_k", "split_k_scope")
def split_k_divides_k_tiles(config: Config, problem: Problem) -> str | None:
    """Each CTA of a split-K cluster multiplies the same number of k-tiles (a compile-time count).
    A tail split's CTAs count theirs at run time: rank r of split_k takes k-tiles
    [r*KT // split_k, (r+1)*KT // split_k), uneven where split_k does not divide KT, at least one."""
    if config.split_k <= 1 or config.blk_k <= 0:
        return None
    k_tiles = -(-problem.k // config.blk_k)
    if config.split_k_scope == "tail":
        if k_tiles < config.split_k:
            return (
                f"K={problem.k} is {k_tiles} k-tiles of {config.blk_k}: fewer than the split_k={config.split_k} "
                "CTAs of a tail tile"
            )
        return None
    if k_tiles % config.split_k:
        return (
            f"K={problem.k} is {k_tiles} k-tiles of {config.blk_k}: they do not split evenly over "
            f"split_k={config.split_k} CTAs"
        )
    return None


@reads("cluster", "epilogue")
def one_row_operand_supported(config: Config, problem: Problem) -> str | None:
    """M = 1 (or N = 1): TMA cannot describe a box of rows over a one-row tensor (its unit
    dimension disappears from the tensor map), so the kernel loads such an operand one row per
    stage. No cluster then (a multicast slice is 8 rows or more), and with M = 1 no TMA store of
    D (the same one-row tensor map)."""
    if problem.m != 1 and problem.n != 1:
        return None
    if config.cluster > 1:
        return f"a one-row operand (M={problem.m}, N={problem.n}) is loaded one row a stage: no multicast cluster"
    if problem.m == 1 and config.epilogue in TMA_EPILOGUES:
        return "M=1: a TMA store cannot address D's single row (register epilogue only)"
    return None


@reads("blk_n", "consumers", "warp_specialized", "epilogue_warpgroup")
def wgmma_fits_launch_registers(config: Config, problem: Problem) -> str | None:
    """ptxas compiles every instruction within the registers a thread has at launch: setmaxnreg
    moves registers only at run time. One m64 x blk_n wgmma holds blk_n/2 accumulators plus its
    operands, so 64x256 fragments need 3 warpgroups at most (168 registers), not 4 (128)."""
    need = config.blk_n // 2 + WGMMA_OPERAND_REGS
    launch = launch_registers(config)
    if need > launch:
        return (
            f"one m64n{config.blk_n} wgmma needs {need} registers (its {config.blk_n // 2} accumulators and "
            f"operands), more than the {launch} each thread of {warpgroups(config)} warpgroups gets at launch"
        )
    return None


@reads("blk_n")
def wgmma_n_supported(config: Config, problem: Problem) -> str | None:
    if config.blk_n % 8 or not 8 <= config.blk_n <= 256:
        return f"blk_n={config.blk_n}: wgmma needs N a multiple of 8 in 8..256"
    return None


@reads("blk_k")
def blk_k_boxes_supported(config: Config, problem: Problem) -> str | None:
    """The loader issues one TMA box per 64-element swizzle atom of a stage's K extent, at most
    four (blk_k 256: each row of an operand tile arrives 512 contiguous bytes at a time)."""
    if config.blk_k > MAX_BLK_K:
        atoms = MAX_BLK_K // SWIZZLE_ELEMENTS
        return f"blk_k={config.blk_k}: a stage loads at most {atoms} swizzle atoms, one TMA box each (<= {MAX_BLK_K})"
    return None


@reads("l2_hint", "l2_promotion", "prefetch_tensormap", "loader")
def tma_load_options_supported(config: Config, problem: Problem) -> str | None:
    """The L2 options of the TMA loads: an eviction priority per operand ("<A>/<B>", each none,
    first or last), the tensor maps' L2 promotion (128B or 256B) and the descriptor prefetch;
    the thread loader has no TMA load to carry them."""
    policies = config.l2_hint.split("/")
    if len(policies) != 2 or any(p not in L2_HINT_POLICIES for p in policies):
        return (
            f"l2_hint={config.l2_hint!r}: '<A>/<B>' with each of {', '.join(L2_HINT_POLICIES)} "
            "(the kernel's operands' L2 eviction priority)"
        )
    if config.l2_promotion not in L2_PROMOTIONS:
        return f"l2_promotion={config.l2_promotion!r}: known promotions are {', '.join(L2_PROMOTIONS)}"
    tuned = config.l2_hint != "none/none" or config.l2_promotion != L2_PROMOTIONS[0] or config.prefetch_tensormap
    if tuned and config.loader != "tma":
        return (
            f"l2_hint, l2_promotion and prefetch_tensormap tune the TMA loads; loader={config.loader} "
            "has none (leave them at none/none, 128B, false)"
        )
    return None


@reads("stages", "warp_specialized")
def pipeline_depth_in_range(config: Config, problem: Problem) -> str | None:
    if not 1 <= config.stages <= MAX_STAGES:
        return f"stages={config.stages}: the barrier ring supports 1..{MAX_STAGES} stages"
    if config.warp_specialized and config.stages < 2:
        return "a warp-specialized pipeline needs at least 2 stages to overlap"
    return None


# --- swiglu (core/epilogue.py) ----------------------------------------------------------------------
# The kernel's GEMM is 2N wide, B's rows alternating between 8 gate and 8 up rows, and the store
# pairs each gate value with its up value inside one thread: a wgmma m64nN f32 fragment gives a
# thread columns 8*(r>>2) + 2*(lane%4) + (r&1) of register r, so in a tile starting on a multiple of
# 16 columns the gate chunk (r>>2 even) and the up chunk (r>>2 odd) of the same output columns are
# registers r and r+4 of one thread (with swap_ab, B's rows are the fragment's rows, 16*warp +
# lane/4 + 8*((r>>1)&1): registers r and r+2). Every path that does not store the whole sum from
# those registers is refused below; kernels/hopper/epilogue.py, `store_block`, writes the pairs.
SWIGLU_TILE_ALIGN = 16  # a gate group and its up group: 2 x core.epilogue.GATE_GROUP rows of B
# The knob values the rules below leave swiglu (register stores, whole sums): laid over a start or
# a drawn point to make its swiglu twin.
SWIGLU_KNOBS: dict[str, object] = {
    "epilogue": "register",
    "epilogue_warpgroup": False,
    "split_k": 1,
    "split_k_reduce": "dsmem",
    "split_k_scope": "all",
    "stream_k": False,
    "stream_k_scope": "all",
}


@reads("epilogue")
def swiglu_register_epilogue(config: Config, problem: Problem) -> str | None:
    """swiglu pairs a gate value with its up value in the thread's registers as D is stored; the
    staged epilogues ("tma", "tma_chunked", and the epilogue warpgroup that needs one) copy the
    whole 2N-wide fragment through shared memory to a TMA store of D's layout, which has no place
    for the pairing (it would need another staging layout and D's own half-width boxes), so
    swiglu takes the register epilogue only."""
    if problem.epilogue.gated and config.epilogue != "register":
        return (
            f"epilogue swiglu needs epilogue=register (got {config.epilogue}): the gate and up values are paired "
            "in the thread's registers as D is stored, the staged TMA stores write the unpaired tile"
        )
    return None


@reads("split_k", "stream_k")
def swiglu_whole_sums(config: Config, problem: Problem) -> str | None:
    """silu(g) * u is not linear: it must see the whole sums over K. split_k's DSMEM reduction
    stores from a layout where a thread sums other threads' register pairs (its gate and up
    values are not one thread's registers r and r+4), and the serial reduction's last rank and
    stream-K's finishing CTA, which do store whole sums through the register epilogue, are not
    built or checked with the pairing yet; so swiglu runs with split_k=1 and no stream_k."""
    if problem.epilogue.gated and (config.split_k > 1 or config.stream_k):
        return (
            f"epilogue swiglu needs split_k=1 and no stream_k (got split_k={config.split_k}, "
            f"stream_k={config.stream_k}): silu(gate) * up is applied to whole sums, in the registers of one CTA"
        )
    return None


@reads("blk_m", "blk_n", "swap_ab")
def swiglu_pairs_in_thread(config: Config, problem: Problem) -> str | None:
    """The gate group and its up group (16 consecutive rows of B) must sit in one tile, in one
    thread: without swap_ab B's rows are the kernel's columns, so blk_n must be a multiple of 16
    (each tile starts on a gate group, and register r's partner r+4 is in the same fragment); with
    swap_ab they are the kernel's rows, and blk_m (64 to 256, each consumer's m64 blocks starting on
    a multiple of 16 rows) always is, so only the unswapped tile width is checked."""
    if not problem.epilogue.gated:
        return None
    if not config.swap_ab and config.blk_n % SWIGLU_TILE_ALIGN:
        return (
            f"epilogue swiglu needs blk_n a multiple of {SWIGLU_TILE_ALIGN} (got {config.blk_n}): a tile must hold "
            "whole pairs of 8 gate and 8 up columns, in one thread's registers"
        )
    if config.swap_ab and config.blk_m % SWIGLU_TILE_ALIGN:
        return f"epilogue swiglu with swap_ab needs blk_m a multiple of {SWIGLU_TILE_ALIGN} (got {config.blk_m})"
    return None


# --- FP8 (e4m3 operands, bf16 D: core/problem.py) ---------------------------------------------------
# The FP8 kernels are TMA-fed and sum whole tiles or split K; D leaves from registers or staged
# through shared memory. What the rules below refuse is built around 2-byte elements and is not
# checked with 1-byte ones yet. Each passes on every other problem. Split-K (both reductions, the
# tail split) and the staged epilogues (with the epilogue warpgroup too) were refused until their
# sweep ran on the H200: 200 of 200 correct (bench/results/sweeps/2026-12-06-fp8-paths-fuzz.md).
# A 128-byte swizzle row holds this many e4m3 elements: the least k-tile of an FP8 stage.
FP8_SWIZZLE_ELEMENTS = 2 * SWIZZLE_ELEMENTS  # SWIZZLE_ELEMENTS counts 2-byte elements
# The knob values the FP8 rules leave (laid over a start to make its FP8 twin).
FP8_KNOBS: dict[str, object] = {
    "loader": "tma",
    "stream_k": False,
    "stream_k_scope": "all",
    "trim": False,
    "peel_k": False,
}


def fp8_epilogue_supported(problem: Problem) -> str | None:
    """swiglu pairs gate and up values of a 16-bit problem's D; with e4m3 operands and a bf16 D it
    is not built or checked yet (the scaling ops, bias and residual are: applied in fp32 before the
    bf16 store)."""
    if problem.is_fp8 and problem.epilogue.gated:
        return (
            f"dtype={problem.dtype}: epilogue swiglu is not built for FP8 operands yet "
            "(scale_row, scale_col, bias and residual are)"
        )
    return None


def fp8_one_row_operand(problem: Problem) -> str | None:
    """A one-row operand (M = 1 or N = 1) is zeroed in shared memory element by element and loaded
    one row a stage, written and checked for 2-byte elements only."""
    if problem.is_fp8 and (problem.m == 1 or problem.n == 1):
        return f"dtype={problem.dtype}: M={problem.m}, N={problem.n}: one-row operands are not built for FP8 yet"
    return None


@reads("blk_k")
def fp8_blk_k_fills_swizzle(config: Config, problem: Problem) -> str | None:
    """The 128-byte swizzle row holds 128 e4m3 elements, so an FP8 k-tile is one or more whole
    rows: blk_k a multiple of 128 (128: one TMA box an operand, 256: two; 64 would fill half a
    swizzled row, which the 128B-swizzled layout and its descriptors do not describe). A wgmma
    step is then k32, four of them a 128-wide atom. Four boxes (512) would be blk_k's next value,
    which the knob does not take yet (blk_k_boxes_supported: at most 256)."""
    if problem.is_fp8 and config.blk_k % FP8_SWIZZLE_ELEMENTS:
        return (
            f"dtype={problem.dtype}: blk_k={config.blk_k}: a 128-byte swizzle row holds {FP8_SWIZZLE_ELEMENTS} "
            f"e4m3 elements, so an FP8 k-tile needs a multiple of {FP8_SWIZZLE_ELEMENTS}"
        )
    return None


@reads("loader")
def fp8_tma_loader(config: Config, problem: Problem) -> str | None:
    """The thread loader copies 16-byte chunks of 8 elements, its guard on K counting 2-byte
    elements; FP8 operands arrive by TMA only."""
    if problem.is_fp8 and config.loader != "tma":
        return f"dtype={problem.dtype}: loader={config.loader!r}: FP8 operands are loaded by TMA only (loader=tma)"
    return None


@reads("stream_k")
def fp8_no_stream_k(config: Config, problem: Problem) -> str | None:
    """Stream-K's hand-over of a shared tile has not run with FP8 operands (the search does not
    draw it for any problem: the knob table), so an FP8 tile is summed by one CTA or split K."""
    if problem.is_fp8 and config.stream_k:
        return f"dtype={problem.dtype}: stream_k: not built for FP8 operands yet (split_k is)"
    return None


@reads("trim", "peel_k")
def fp8_whole_k_tiles(config: Config, problem: Problem) -> str | None:
    """trim and peel_k cut the last k-tile at its k16 steps (`k_tail_steps` counts 16-element
    steps); an FP8 step is k32, so they are not built for FP8 yet."""
    if problem.is_fp8 and (config.trim or config.peel_k):
        return (
            f"dtype={problem.dtype}: trim={config.trim}, peel_k={config.peel_k}: the last k-tile's cut counts "
            "k16 steps; FP8 steps are k32 (trim and peel_k off)"
        )
    return None


@reads("blk_k")
def fp8_block_k_tile(config: Config, problem: Problem) -> str | None:
    """The block scales change every 128 of K (core/epilogue.py BLOCK_K), and the consumers scale a
    k-tile's product as a whole (`mma.py`): one k block a k-tile, blk_k 128."""
    if problem.epilogue.block_scaled and config.blk_k != BLOCK_K:
        return (
            f"blk_k={config.blk_k}: the block scales change every {BLOCK_K} of K, so a k-tile is one block "
            f"(blk_k={BLOCK_K})"
        )
    return None


@reads("blk_n", "swap_ab")
def fp8_block_b_blocks(config: Config, problem: Problem) -> str | None:
    """B's block scales cover 128 of its rows: without swap_ab they are the tile's columns, which
    must lie in one such block (blk_n dividing 128) or in whole ones (a multiple of 128), so a
    thread reads one scale a 128 columns; with swap_ab B's rows are the kernel's, whose 64-row
    wgmma blocks always lie in one."""
    if problem.epilogue.block_scaled and not config.swap_ab and BLOCK_K % config.blk_n and config.blk_n % BLOCK_K:
        return (
            f"blk_n={config.blk_n}: B's block scales cover {BLOCK_K} columns of D, so a tile's width divides "
            f"{BLOCK_K} or is a multiple of it"
        )
    return None


@reads("blk_m", "blk_n", "consumers", "schedule", "warp_specialized", "epilogue_warpgroup", "reg_split")
def fp8_block_registers(config: Config, problem: Problem) -> str | None:
    """With block scales a consumer thread holds each k-tile's product beside the sums: twice the
    accumulators, plus the scales it reads, within the same limits (`accumulator_fits_registers`,
    `registers_fit`)."""
    if not problem.epilogue.block_scaled:
        return None
    held = 2 * accumulators(config)
    if held > MAX_ACCUMULATOR_REGS or held + REGISTER_OVERHEAD > register_budget(config):
        return (
            f"the block scales hold each k-tile's product beside the sums: {held} fp32 registers a consumer "
            f"thread, more than {min(MAX_ACCUMULATOR_REGS, register_budget(config) - REGISTER_OVERHEAD)} fit"
        )
    return None


def fp8_block_scale_regs(blk_n: int, swap_ab: bool) -> int:
    """The block scales a block-scaled consumer thread reads for one m64 block of its fragment
    (`kernels/hopper/mma.py` lays them out so): without swap_ab A's of its two rows and B's one a
    128 columns of the tile; with it B's one and A's one a column of the fragment (blk_n / 4)."""
    if swap_ab:
        return blk_n // 4 + 1
    return 2 + max(1, blk_n // BLOCK_K)


def fp8_block_buffers(config: Config) -> int:
    """The k-tile products a block-scaled consumer thread holds (`kernels/hopper/mma.py`): two
    where a third fragment of accumulators and a second set of scales fit its registers
    (`fp8_block_registers`' limits) and the ring has two stages to hold, so that the next k-tile's
    wgmma run while the last one's product is scaled and added; else one, and the tensor cores
    wait for each promotion. Derived, not a knob: reg_split chooses it where it is close (a
    128x128 tile of two cooperative consumers holds two with 240/24, one with 232/40)."""
    acc = accumulators(config)
    held = 3 * acc + 2 * (consumer_rows(config) // 64) * fp8_block_scale_regs(config.blk_n, config.swap_ab)
    if config.stages >= 2 and 3 * acc <= MAX_ACCUMULATOR_REGS and held + REGISTER_OVERHEAD <= register_budget(config):
        return 2
    return 1


@reads(
    "block_stagger",
    "blk_m",
    "blk_n",
    "stages",
    "consumers",
    "schedule",
    "warp_specialized",
    "epilogue_warpgroup",
    "reg_split",
    "swap_ab",
)
def block_stagger_supported(config: Config, problem: Problem) -> str | None:
    """block_stagger offsets the block scales' pairs of k-tiles (`kernels/hopper/mma.py`) between
    the cooperative consumers of one tile: it needs block scales, two product buffers
    (`fp8_block_buffers`), two or more consumers on the same tile, and a producer, since without
    one consumer 0 loads the ring and would wait there for the consumer behind it."""
    if not config.block_stagger:
        return None
    if not problem.epilogue.block_scaled:
        return "block_stagger offsets the block scales' pairs of k-tiles: only with block scaling"
    if config.schedule != "cooperative" or config.consumers < 2:
        return (
            f"block_stagger offsets two consumers of one tile: needs schedule=cooperative and consumers >= 2 "
            f"(got {config.schedule}, {config.consumers})"
        )
    if not config.warp_specialized:
        return "block_stagger needs warp_specialized: without a producer, consumer 0 loads the ring"
    if fp8_block_buffers(config) != 2:
        return (
            "block_stagger offsets pairs of k-tiles: needs two product buffers (fp8_block_buffers: a third "
            "fragment and a second set of scales in the consumer's registers, two stages)"
        )
    return None


PROBLEM_RULES: tuple[ProblemRule, ...] = (
    tma_row_stride_aligned,
    swiglu_n_aligned,
    fp8_epilogue_supported,
    fp8_one_row_operand,
    block_scales_fp8,
    out_float16_fp8,
)
# hopper-gemm/3: the prefetching consumer thread restarts the ring per tile, so persistent CTAs
# no longer need a producer.
CONFIG_RULES: tuple[ConfigRule, ...] = (
    wgmma_n_supported,
    blk_k_matches_swizzle,
    consumers_split_m,
    accumulator_fits_registers,
    pipeline_depth_in_range,
    smem_fits,
    raster_group_valid,
    epilogue_supported,
    tma_store_row_stride_aligned,
    store_box_divides_tile,
    schedule_supported,
    reg_split_valid,
    cluster_supported,
    cluster_divides_grid,
    multicast_slice_aligned,
    loader_supported,
    registers_fit,
    epilogue_warpgroup_supported,
    wgmma_fits_launch_registers,
    # hopper-gemm/5
    swap_ab_supported,
    swap_ab_pingpong_unclustered,
    swap_ab_pingpong_wide,
    trim_supported,
    peel_k_supported,
    k_rotate_supported,
    split_k_supported,
    split_k_divides_k_tiles,
    split_k_workspace_fits,
    split_k_tail_supported,
    stream_k_supported,
    stream_k_tail_supported,
    one_row_operand_supported,
    blk_k_boxes_supported,
    tma_load_options_supported,
    # swiglu (core/epilogue.py): pass on every other problem
    swiglu_register_epilogue,
    swiglu_whole_sums,
    swiglu_pairs_in_thread,
    # FP8 (core/problem.py): pass on every other problem
    fp8_blk_k_fills_swizzle,
    fp8_tma_loader,
    fp8_no_stream_k,
    fp8_whole_k_tiles,
    fp8_block_k_tile,
    fp8_block_b_blocks,
    fp8_block_registers,
    block_stagger_supported,
)

# hopper-gemm/4: the same rules, limited to its tile widths (its other knob values are the
# space's own: the knobs /5 added are refused by the space, as knobs it does not have).
V4_CONFIG_RULES: tuple[ConfigRule, ...] = (*CONFIG_RULES, v4_values, v4_accumulator_limit)

# hopper-gemm/3 (its space replays the recorded datasets): the same rules, limited to its values.
V3_CONFIG_RULES: tuple[ConfigRule, ...] = (*V4_CONFIG_RULES, v3_values)

# hopper-gemm/1 and /2 (their spaces replay recorded data): the same rules (the newer ones pass at
# the older spaces' defaults), plus: a persistent CTA needed a producer.
V2_CONFIG_RULES: tuple[ConfigRule, ...] = (
    *CONFIG_RULES[:6],
    persistent_needs_producer,
    *CONFIG_RULES[6:],
    v4_values,
    v4_accumulator_limit,
    v3_values,
)
