"""Rules and epilogues held to the kernels the Hopper template lowers (TVM only, no nvcc).

* The shared-memory rule: `rules.smem_bytes` (behind `smem_fits`) against the dynamic shared memory
  each lowered kernel launches with (`device_build.lower_device` reads it from TVM's host IR), for
  a seeded draw of valid hopper-gemm/5 configs over problems with tails, held to the paths whose
  bytes the rule counts separately (a ragged tile's narrower last store box, whole-tile staging,
  split-K's parked fragments). They agree to the byte, up to a stated constant.
* The swapped split-K reduction: each store of the DSMEM reduction in the generated CUDA is
  evaluated for every thread of a cluster: the sum it stores (the register it reads back from the
  parked fragments) must land at D[col, row] of that register's place in the wgmma fragment, the
  transpose, and every element of the tile exactly once. A store that ignores the swap writes
  D[row, col] and fails, whatever source hash is recorded.

About 30 s on two cores (lowering is 0.3-0.5 s a kernel after TVM's first).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from cuda_index import bracketed as _bracketed
from cuda_index import index as _index

from tirtune.builder import device_build
from tirtune.kernels.skeleton import TILE_ALIGN
from tirtune.space import HOPPER, Config, Problem
from tirtune.space.hopper.knobs import config as hopper_config
from tirtune.space.hopper.rules import (
    RAGGED_BLK_N,
    SMEM_LIMIT_BYTES,
    SMEM_OVERHEAD_BYTES,
    SPLIT_KS,
    consumer_rows,
    smem_bytes,
    split_k_bytes,
    staging_bytes,
)

# --- the shared-memory rule ------------------------------------------------------------------------

SEED = 2026
PROBLEMS = (
    Problem(4096, 4096, 4096, "float16"),
    Problem(3000, 5000, 2000, "float16"),  # tails along M, N (and K with blk_k 128 / 256)
    Problem(1000, 1000, 1000, "float16"),
    Problem(16, 4096, 4096, "bfloat16"),
    Problem(100, 4096, 4008, "bfloat16"),
)
# Knob values held while drawing (the rest drawn from the grid, then the nearest valid config): the
# plain draw, and the paths whose bytes the rule adds on its own.
PATHS: dict[str, dict[str, tuple[object, ...]]] = {
    "any": {},
    "ragged tail box": {"blk_n": RAGGED_BLK_N, "epilogue": ("tma_chunked",)},
    "whole-tile staging": {"epilogue": ("tma",)},
    "split-K parked": {"split_k": SPLIT_KS[1:], "split_k_reduce": ("dsmem",), "persistent": (False,),
                       "cluster": (1,)},
}
PER_PATH = 2
TRIES = 40
# The kernel's barriers sit below its first tile, which starts at TILE_ALIGN; the rule's overhead
# covers that and leaves 1 KiB of slack: the rule is the kernel's bytes plus exactly this.
SLACK = SMEM_OVERHEAD_BYTES - TILE_ALIGN


def _draw(problem: Problem, held: dict[str, tuple[object, ...]], rng: random.Random) -> Iterator[Config]:
    found: list[Config] = []
    for _ in range(TRIES):
        point = {name: rng.choice(values) for name, values in HOPPER.knobs.items()}
        point |= {name: rng.choice(values) for name, values in held.items()}
        config = HOPPER.nearest_valid(hopper_config(**point), problem, exclude=found, rng=rng)  # type: ignore[arg-type]
        if config is not None and all(getattr(config, name) in values for name, values in held.items()):
            found.append(config)
            yield config
            if len(found) == PER_PATH:
                return


def drawn() -> list[tuple[str, Config, Problem]]:
    rng = random.Random(SEED)
    return [(path, config, problem) for problem in PROBLEMS for path, held in PATHS.items()
            for config in _draw(problem, held, rng)]


def test_the_shared_memory_rule_counts_what_the_lowered_kernel_allocates() -> None:
    cases = drawn()
    assert all(HOPPER.is_valid(c, p) for _, c, p in cases)
    tails = [c for _, c, _ in cases if c.epilogue == "tma_chunked" and c.blk_n % 64]
    parked, staged = [c for _, c, _ in cases if split_k_bytes(c)], [c for _, c, _ in cases if c.epilogue == "tma"]
    assert len(tails) >= 6 and len(parked) >= 4 and len(staged) >= 4, "the draw must take every counted path"
    wrong = []
    for path, config, problem in cases:
        _, launch = device_build.lower_device(config, problem)
        if smem_bytes(config) - launch.dyn_smem != SLACK or launch.dyn_smem > SMEM_LIMIT_BYTES:
            wrong.append(f"{path}: {config.label()} @ {problem}: the kernel asks {launch.dyn_smem} B, the rule "
                         f"counts {smem_bytes(config)} B (staging {staging_bytes(config)}, parked "
                         f"{split_k_bytes(config)}), expected {SLACK} B more")
    assert wrong == [], "\n".join(wrong)


# --- the swapped split-K reduction's stores ----------------------------------------------------------

# (config, problem): one consumer, one m64 block; two m64 blocks in an 8-CTA cluster (bf16); two
# consumers, a problem N that is no power of two.
SWAPPED = (
    (hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, split_k=2), Problem(16, 4096, 4096, "float16")),
    (hopper_config(128, 32, 64, 4, 1, True, swap_ab=True, split_k=8), Problem(100, 4096, 4096, "bfloat16")),
    (hopper_config(128, 64, 64, 4, 2, True, swap_ab=True, split_k=4), Problem(64, 1000, 4096, "float16")),
)
WGMMA_M = 64
PARKED = re.compile(r"\(\(float\*\)pool_buf_ptr\)\[(.+)\] = acc(\d+)_ptr\[(\d+)\];")


@dataclass(frozen=True)
class Store:
    """One store of the reduction: where in D, and the parked slots it sums over the cluster, one
    per element (two for a paired store, `tirtune_store_f16x2`: consecutive elements of D)."""

    d: Callable[..., int]
    slots: tuple[Callable[..., int], ...]


def reduction_stores(source: str, threads: int) -> tuple[dict[int, tuple[int, int, int]], list[Store]]:
    """(parked slot -> (consumer thread, m64 block, fragment register)) of one CTA, and the D
    stores of the reduction that follows the cluster barrier."""
    reduction = source.index("tvm_builtin_cuda_cluster_sync();")
    parked: dict[int, tuple[int, int, int]] = {}
    for m in PARKED.finditer(source[:reduction]):
        offset, block, register = _index(m.group(1)), int(m.group(2)), int(m.group(3))
        for tid in range(threads):
            slot = (tid, block, register)
            assert parked.setdefault(offset(tid=tid, bx=0, by=0, rank=0), slot) == slot, "one slot each"
    stores = []
    for m in re.finditer(r"D_ptr\[", source[reduction:]):
        at = reduction + m.start() + len("D_ptr")
        statement = source[at:source.index(";\n", at)]
        loads = dict.fromkeys(_bracketed(statement, load.end() - 1)
                              for load in re.finditer(r"pool_buf_ptr\)\[", statement))
        stores.append(Store(_index(_bracketed(source, at)), tuple(_index(load) for load in loads)))
    return parked, stores


def fragment_place(config: Config, tid: int, block: int, r: int) -> tuple[int, int]:
    """(row, col) in the kernel's tile of register r of m64 block `block` of consumer thread `tid`:
    wgmma's m64nN f32 fragment, register r of a thread of warp w, lane l holding row
    16w + l/4 + 8((r>>1)&1), column 8(r>>2) + 2(l%4) + (r&1); m64 blocks stacked, consumers
    splitting blk_m."""
    consumer, warp, lane = tid // 128, tid % 128 // 32, tid % 32
    row = consumer * consumer_rows(config) + block * WGMMA_M + 16 * warp + lane // 4 + 8 * ((r >> 1) & 1)
    return row, 8 * (r >> 2) + 2 * (lane % 4) + (r & 1)


def stored_places(config: Config, problem: Problem) -> dict[tuple[int, int], list[int]]:
    """For the first tile's cluster (its tile is inside the problem: every guard holds): the kernel
    tile place (row, col) of each sum stored, mapped to the D elements (flat index) it was stored at."""
    source, _ = device_build.lower_device(config, problem)
    threads = 128 * config.consumers
    parked, stores = reduction_stores(source, threads)
    assert stores, "no reduction stores found"
    places: dict[tuple[int, int], list[int]] = {}
    for rank in range(config.split_k):
        for tid in range(threads):
            at = {"tid": tid, "bx": rank, "by": 0, "rank": rank}
            for store in stores:
                for element, slot in enumerate(store.slots):
                    owner, block, r = parked[slot(**at)]
                    assert owner == tid, "a thread sums its own fragment's slots over the cluster"
                    places.setdefault(fragment_place(config, tid, block, r), []).append(store.d(**at) + element)
    return places


@pytest.mark.parametrize(("config", "problem"), SWAPPED, ids=[f"{c.label()}@{p}" for c, p in SWAPPED])
def test_the_swapped_split_k_reduction_stores_each_sum_transposed(config: Config, problem: Problem) -> None:
    """The kernel computes D^T: its (row, col) is the problem's (n, m), stored at D[col, row]."""
    assert HOPPER.is_valid(config, problem)
    places = stored_places(config, problem)
    tile = {(row, col) for row in range(config.blk_m) for col in range(config.blk_n)}
    assert set(places) == tile and all(len(at) == 1 for at in places.values()), "each element once"
    assert {place: at[0] for place, at in places.items()} == {(row, col): col * problem.n + row for row, col in tile}


def test_the_unswapped_split_k_reduction_stores_in_place() -> None:
    """The same reading of an unswapped kernel (D[row, col], paired stores of two columns): the
    evaluation above tells the two apart."""
    config, problem = hopper_config(128, 64, 64, 4, 2, True, split_k=4), Problem(1000, 64, 4096, "float16")
    places = stored_places(config, problem)
    tile = {(row, col) for row in range(config.blk_m) for col in range(config.blk_n)}
    assert {place: at for place, at in places.items()} == {(row, col): [row * problem.n + col] for row, col in tile}
