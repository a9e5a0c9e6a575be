"""Each concern of the Hopper kernel alone (tirtune/kernels/hopper/): its bundle built in a tiny
kernel that has only the real body's preamble (tests/kernel_pieces.py), one of its macros
called, the kernel lowered to CUDA (TVM only, no nvcc), and what that piece must emit counted in
the kernel function. The whole kernel's bytes are tests/test_template_fold.py's; these say what
each piece is for, and fail on the piece that broke.

About 10 s on two cores (a tiny kernel lowers in a fraction of a second after TVM's first).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from kernel_pieces import count, hopper_body, hopper_source

from tirtune.kernels.hopper.epilogue import Epilogue
from tirtune.kernels.hopper.loads import Loads
from tirtune.kernels.hopper.mma import Mma
from tirtune.kernels.hopper.roles import Roles
from tirtune.kernels.hopper.splitk import SplitK
from tirtune.kernels.hopper.staging import Staging
from tirtune.kernels.skeleton import WARPGROUP
from tirtune.space import HOPPER, Config, Problem
from tirtune.space.hopper.knobs import config as hopper_config

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

P1000 = Problem(1000, 1000, 1000, "float16")
G2S = (
    "tvm_builtin_ptx_cp_async_bulk_tensor_g2s_cluster_async_bulk_tensor_2d_shared__cluster_global_mbarrier__"
    "complete_tx__bytes"
)
S2G = "tvm_builtin_ptx_cp_async_bulk_tensor_s2g_async_bulk_tensor_2d_global_shared__cta_tile_bulk_group"
EXPECT_TX = "tvm_builtin_ptx_mbarrier_arrive_expect_tx_arrive_expect_tx_shared_b64"
WAIT = "tvm_builtin_cuda_mbarrier_wait"
ARRIVE = "tvm_builtin_ptx_mbarrier_arrive_arrive_shared_b64"
STMATRIX_X4 = "tvm_builtin_ptx_stmatrix_sync_aligned_m8n8_x4_shared_b16"
STMATRIX_X2 = "tvm_builtin_ptx_stmatrix_sync_aligned_m8n8_x2_shared_b16"


def wgmma(n: int) -> str:
    return f"tvm_builtin_ptx_wgmma_f16_ss_mma_async_sync_aligned_m64n{n}k16_f32_f16_f16_1_1_0_0"


def valid(config: Config, problem: Problem) -> tuple[Config, Problem]:
    assert HOPPER.is_valid(config, problem), HOPPER.violations(config, problem)
    return config, problem


def fragments(T: Any, p: Any) -> tuple[Any, Any, Any, Any]:
    """A consumer's fragments and descriptor registers, as the consumer role allocates them."""
    acc0 = T.alloc_local((p.acc_regs,), "float32")
    acc1 = T.alloc_local((p.acc_regs,), "float32") if p.m_blocks == 2 else acc0
    return acc0, acc1, T.alloc_local((1,), "uint64"), T.alloc_local((1,), "uint64")


# --- loads ----------------------------------------------------------------------------------------


def test_a_stage_is_one_tma_box_per_swizzle_atom_and_operand_armed_with_the_stage_bytes() -> None:
    config, problem = valid(hopper_config(128, 128, 128, 3, 2, True), P1000)

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        assert p.atoms == 2 and p.stage_bytes == (128 + 128) * 128 * 2
        Loads.trace(T, p, sk, f).load_tile(0, 0, 0, 0)

    body = hopper_body(config, problem, use)
    assert count(G2S, body) == 2 * 2  # two atoms of A and of B
    assert re.search(rf"{EXPECT_TX}\(.*\(uint\)65536\)", body)
    # The first round of a stage passes a fresh `empty` barrier: parity 1.
    assert re.search(rf"{WAIT}\(.*, 1\);", body)


def test_a_cluster_multicasts_its_slice_of_the_shared_operand_from_each_rank() -> None:
    config, problem = valid(hopper_config(128, 128, 64, 4, 2, True, persistent=True, cluster=2), P1000)

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        assert p.multicast_rows == 64
        Loads.trace(T, p, sk, f).load_tile_at(0, 0, 0, 0)

    body = hopper_body(config, problem, use)
    multicast = G2S.replace("mbarrier__complete_tx__bytes", "mbarrier__complete_tx__bytes_multicast__cluster")
    # A loop over the ranks whose branch for this CTA loads its own A tile locally and its 64-row
    # slice of B (rows r * 64 on) into both CTAs (cta_mask 0b11).
    assert count(multicast, body) == 1 and count(G2S, body) == 1
    assert re.search(rf"{multicast}\(.*, \(r \* 64\), .*\(ushort\)3\);", body)


def test_a_one_row_operand_is_loaded_as_one_row_into_a_ring_zeroed_first() -> None:
    config, problem = valid(hopper_config(64, 64, 64, 4, 1, False, split_k=4), Problem(1, 4096, 4096, "float16"))

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        assert p.one_row_a and p.stage_bytes == (1 + 64) * 64 * 2
        loads = Loads.trace(T, p, sk, f)
        loads.zero_ring(f.As, p.blk_m)
        loads.load_tile(0, 0, 0, 0)

    body = hopper_body(config, problem, use)
    assert re.search(rf"{EXPECT_TX}\(.*\(uint\)8320\)", body)
    assert count(G2S.replace("_2d_", "_1d_"), body) == 1 and count(G2S, body) == 1  # A's row: a 1-D map
    assert "for (int i = 0; i < 128; ++i)" in body  # 4 stages x 64 rows x 64 / 128 threads, zeroed


@pytest.mark.parametrize("rotate", [False, True])
def test_k_rotate_starts_each_tile_at_its_own_k_tile(rotate: bool) -> None:
    config, problem = valid(hopper_config(64, 128, 64, 4, 1, True, k_rotate=rotate), Problem(64, 4096, 4096, "float16"))

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        # k-tile 1 of the tile at column 128 (the second tile: one tile row).
        Loads.trace(T, p, sk, f).load_tile(0, 1, 0, 128)

    body = hopper_body(config, problem, use)
    [a_load] = [line for line in body.splitlines() if count(G2S, line) and "A_tensormap" in line]
    k0 = 2 * 64 if rotate else 64  # (1 + tile 1) mod 64 k-tiles, or k-tile 1 itself
    assert f"(&(A_tensormap)))), {k0}, 0," in a_load


def test_the_thread_loader_copies_guarded_16_byte_chunks_and_no_tma() -> None:
    config, problem = valid(hopper_config(192, 128, 64, 1, 3, False, loader="threads"), P1000)

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        Loads.trace(T, p, sk, f).thread_load(0, 0, 0, 0)

    body = hopper_body(config, problem, use)
    # 192 x 8 chunks of A over 384 threads: 4 rounds; 128 x 8 of B: 3 rounds, the last guarded.
    assert count("tirtune_copy16", body) == 4 + 3 and count(G2S, body) == 0


# --- mma ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "problem", "per_k_tile", "after_loop"),
    [
        (hopper_config(256, 128, 64, 4, 2, True), P1000, 4 * 2, 0),  # 4 k16 steps, 2 m64 blocks a consumer
        (hopper_config(128, 128, 64, 4, 2, True, peel_k=True), Problem(1024, 1024, 2000, "float16"), 4, 1),
    ],
)
def test_the_mainloop_issues_blk_k_over_16_wgmma_per_m_block_and_peels_the_live_tail(
    config: Config, problem: Problem, per_k_tile: int, after_loop: int
) -> None:
    valid(config, problem)

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        acc0, acc1, desc_a, desc_b = fragments(T, p)
        mma = Mma.trace(T, p, sk.ring, f, Loads.trace(T, p, sk, f))
        mma.mainloop(0, acc0, acc1, desc_a, desc_b, 0, 0, 0)

    body = hopper_body(config, problem, use)
    assert count(wgmma(128), body) == per_k_tile + after_loop
    assert count("tvm_builtin_ptx_wgmma_wait_group_wait_group_sync_aligned_1", body) == 1 + (after_loop > 0)


def test_trim_multiplies_the_last_tile_column_with_a_narrower_wgmma() -> None:
    config, problem = valid(
        hopper_config(128, 192, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked", trim=True),
        Problem(3000, 5000, 2000, "float16"),
    )

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        assert p.trim_n == 5000 % 192 and p.trim_k == 1  # 2000 = 31 * 64 + 16
        acc0, acc1, desc_a, desc_b = fragments(T, p)
        mma = Mma.trace(T, p, sk.ring, f, Loads.trace(T, p, sk, f))
        mma.mainloop(0, acc0, acc1, desc_a, desc_b, 0, 0, 0)  # an inner tile
        mma.mainloop(0, acc0, acc1, desc_a, desc_b, 0, 0, 26 * 192)  # a tile of the last column

    body = hopper_body(config, problem, use)
    # Each tile: 4 steps a k-tile, the last k-tile only its one live step; the last tile column
    # multiplies only its 8 valid columns.
    assert count(wgmma(192), body) == 4 + 1 and count(wgmma(8), body) == 4 + 1


# --- the register epilogue ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "problem", "pairs", "scalars"),
    [
        (hopper_config(128, 128, 64, 4, 2, True), P1000, 32, 0),  # N even: column pairs, one 4-byte store each
        (hopper_config(128, 128, 64, 4, 2, True), Problem(1000, 999, 1000, "float16"), 0, 64),
        (hopper_config(64, 16, 128, 8, 1, True, swap_ab=True), Problem(16, 4096, 4096, "float16"), 0, 8),
    ],
)
def test_the_register_epilogue_stores_a_fragment_paired_or_element_by_element(
    config: Config, problem: Problem, pairs: int, scalars: int
) -> None:
    valid(config, problem)

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        acc0, _, _, _ = fragments(T, p)
        Epilogue.trace(T, p, f).store_block(acc0, 0, 0)

    body = hopper_body(config, problem, use)
    assert count("tirtune_store_f16x2", body) == pairs
    assert len(re.findall(r"D_ptr\[.*\] = \(\(half\)", body)) == scalars


def test_the_swapped_epilogue_stores_the_fragment_transposed() -> None:
    config, problem = valid(hopper_config(64, 16, 128, 8, 1, True, swap_ab=True), Problem(16, 4096, 4096, "float16"))

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        assert (p.m, p.n) == (4096, 16) and p.problem_shape == (16, 4096)
        acc0, _, _, _ = fragments(T, p)
        Epilogue.trace(T, p, f).store_block(acc0, 0, 0)

    body = hopper_body(config, problem, use)
    # A thread's column pair 2 * (lane % 4) is the problem's rows: D's row stride, 4096, apart
    # (unswapped they are adjacent elements, 2 * (lane % 4)).
    stores = re.findall(r"D_ptr\[(.*)\] = \(\(half\)", body)
    assert len(stores) == 8 and all("& 3) * 8192)" in index for index in stores)


# --- the staged epilogues -------------------------------------------------------------------------


def test_the_tma_epilogue_stages_with_stmatrix_and_stores_64x64_boxes() -> None:
    config, problem = valid(hopper_config(128, 128, 64, 4, 2, True, epilogue="tma"), P1000)

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        acc0, acc1, _, _ = fragments(T, p)
        Staging.trace(T, p, f).tma_epilogue(0, acc0, acc1, 0, 0, 0)

    body = hopper_body(config, problem, use)
    # 64 accumulators = 8 stmatrix x4 (16 columns each); one 64-row block of 2 boxes along N.
    assert count(STMATRIX_X4, body) == 8 and count(S2G, body) == 2
    assert count("tvm_builtin_ptx_cp_async_bulk_commit_group_async_bulk_commit_group", body) == 1


def test_the_chunked_epilogue_stores_box_by_box_and_a_narrow_tail_through_its_own_map() -> None:
    config, problem = valid(hopper_config(128, 200, 64, 3, 2, True, persistent=True, epilogue="tma_chunked"), P1000)

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        assert p.tail_cols == 8 and f.Dt is not None
        acc0, acc1, _, _ = fragments(T, p)
        Staging.trace(T, p, f).chunked_epilogue(0, acc0, acc1, 0, 0, 0)

    source = hopper_source(config, problem, use)
    body = source[source.index('extern "C" __global__ void') :]
    # Three 64-wide boxes (4 stmatrix x4 each) and the 8-wide tail (one stmatrix x2), 4 stores.
    assert count(STMATRIX_X4, body) == 12 and count(STMATRIX_X2, body) == 1 and count(S2G, body) == 4
    assert "D_tensormap_1" in body  # the tail's own, narrower tensor map


def test_the_epilogue_warpgroup_stores_each_staged_piece_and_hands_its_buffer_back() -> None:
    config, problem = valid(
        hopper_config(256, 64, 64, 4, 4, True, epilogue="tma_chunked", epilogue_warpgroup=True),
        Problem(300, 200, 136, "bfloat16"),
    )

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        assert p.store_chunks == 1 and f.staged is not None
        Staging.trace(T, p, f).drain_tile(0, 0, 0, 0)

    body = hopper_body(config, problem, use)
    assert count(WAIT, body) == 1 and count(S2G, body) == 1 and count(ARRIVE, body) == 1


# --- split-K --------------------------------------------------------------------------------------


def test_the_dsmem_reduction_sums_every_parked_pair_over_the_cluster_in_rank_order() -> None:
    config, problem = valid(hopper_config(128, 128, 64, 4, 2, True, split_k=2), Problem(1000, 1000, 1024, "float16"))

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        assert p.reduce_regs == 64 and f.Red is not None
        SplitK.trace(T, p, f, Epilogue.trace(T, p, f)).reduce_cluster()

    body = hopper_body(config, problem, use)
    # 64 registers = 32 pairs a thread, 16 of them this rank's; each value read from both CTAs.
    assert count("tirtune_dsmem_ld_f32", body) == 16 * 2 * 2
    assert count("tirtune_cluster_sync_relaxed", body) == 1


def test_the_serial_reduction_takes_turns_on_a_workspace_sized_for_every_tile() -> None:
    config, problem = valid(
        hopper_config(128, 64, 64, 4, 2, False, split_k=2, split_k_reduce="serial"), Problem(100, 200, 4096, "bfloat16")
    )

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        acc0, acc1, _, _ = fragments(T, p)
        SplitK.trace(T, p, f, Epilogue.trace(T, p, f)).serial_epilogue(0, acc0, acc1, 0, 0)

    source = hopper_source(config, problem, use)
    tiles, regs = 1 * 4, 32  # 100 / 128 x 200 / 64 tiles; 64 columns / 2 registers a thread
    assert f"static float ws[{tiles * regs * 2 * WARPGROUP}];" in source and f"static int sem[{tiles}];" in source
    assert "tirtune_splitk_serial(" in source


# --- roles ----------------------------------------------------------------------------------------


def _roles(T: Any, p: Any, sk: Any, f: Any) -> Roles:
    loads = Loads.trace(T, p, sk, f)
    epilogue = Epilogue.trace(T, p, f)
    return Roles.trace(
        T,
        p,
        sk,
        f,
        loads,
        Mma.trace(T, p, sk.ring, f, loads),
        epilogue,
        Staging.trace(T, p, f),
        SplitK.trace(T, p, f, epilogue),
    )


def test_the_producer_and_consumers_move_registers_where_the_plan_rebalances() -> None:
    config, problem = valid(hopper_config(128, 256, 64, 4, 2, True), P1000)

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        assert p.rebalances_registers
        roles = _roles(T, p, sk, f)
        roles.producer()
        roles.consumer()

    body = hopper_body(config, problem, use)
    assert count("tvm_builtin_ptx_setmaxnreg_dec_sync_aligned_u32_40", body) == 1
    assert count("tvm_builtin_ptx_setmaxnreg_inc_sync_aligned_u32_232", body) == 1


def test_pingpong_consumers_take_turns_on_the_ring_through_the_order_barriers() -> None:
    config, problem = valid(
        hopper_config(128, 128, 64, 6, 2, True, persistent=True, schedule="pingpong"), Problem(4096, 4096, 4096, "float16")
    )

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        assert f.order is not None and p.rows == 128 and p.tiles_per_cta == 8
        _roles(T, p, sk, f).consume(0)

    body = hopper_body(config, problem, use)
    # The barriers: full 0-5, empty 6-11, order 12-13. Consumer 0 walks every other tile of its
    # CTA; each but its first waits until consumer 1 has had the ring (order[1]), and each tile's
    # mainloop ends by handing it over (order[0]).
    assert "for (int t = 0; t < 4; ++t)" in body
    assert re.search(rf"{WAIT}\(\(&\(\(\(uint64_t\*\)pool_buf_ptr\)\[13\]\)\)", body)
    assert re.search(rf"{ARRIVE}\(.*pool_buf_ptr\)\[12\]\)", body)
