"""The kernels' plans (tirtune/kernels/hopper/plan.py, tirtune/kernels/blackwell/plan.py): what each
derives from (config, problem) in Python, checked on configs whose numbers are worked out by hand
here. No TVM: a plan is plain arithmetic."""

from __future__ import annotations

import pytest

from tirtune.kernels.blackwell import plan as blackwell_plan
from tirtune.kernels.blackwell import tx_bytes
from tirtune.kernels.hopper import plan
from tirtune.kernels.hopper.plan import CLUSTER_CTAS, SMS
from tirtune.space import Problem, SpaceError
from tirtune.space.blackwell import JOURNEY
from tirtune.space.hopper.knobs import config as hopper_config

P1000 = Problem(1000, 1000, 1000, "float16")
P4096 = Problem(4096, 4096, 4096, "float16")


def test_cooperative_consumers_split_the_tile_rows_into_m64_blocks() -> None:
    p = plan(hopper_config(128, 256, 64, 4, 2, True), P1000)
    assert (p.rows, p.row_base, p.m_blocks, p.acc_regs) == (64, 64, 1, 128)
    assert (p.warpgroups, p.threads, p.releasers) == (3, 384, 2)
    assert p.stage_bytes == (128 + 256) * 64 * 2 and p.atoms == 1
    assert p.wgmma_name == "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16"
    assert p.rebalances_registers and (p.consumer_regs, p.producer_regs) == (232, 40)
    # One CTA a tile: 8 x 4 tiles of 128 x 256 over 1000 x 1000.
    assert (p.grid, p.tiles, p.ctas, p.k_tiles, p.cta_k_tiles) == ((8, 4), 32, 32, 16, 16)

    two_blocks = plan(hopper_config(256, 128, 64, 4, 2, True), P1000)
    assert (two_blocks.rows, two_blocks.m_blocks, two_blocks.reduce_regs) == (128, 2, 128)


def test_pingpong_consumers_own_whole_tiles_on_a_persistent_grid() -> None:
    p = plan(hopper_config(128, 128, 64, 6, 2, True, persistent=True, schedule="pingpong"), P4096)
    assert p.pingpong and (p.rows, p.row_base, p.m_blocks, p.releasers) == (128, 0, 2, 1)
    # 1024 tiles on at most one CTA per SM: 132 CTAs, 8 iterations of the persistent loop.
    assert (p.tiles, p.ctas, p.tiles_per_cta) == (1024, SMS, 8)


def test_a_cluster_shares_one_operand_and_places_its_ctas_in_rank_order() -> None:
    p = plan(hopper_config(128, 64, 64, 4, 2, True, persistent=True, cluster=4, cluster_dim="n"), P4096)
    # 32 x 64 CTA tiles, in cluster tiles of 4 along N; each CTA multicasts a quarter of A.
    assert p.grid == (32, 64) and p.cluster_grid == (32, 16) and p.multicast_rows == 128 // 4
    assert p.releasers == 2 * 4  # every consumer of every CTA the multicast writes into
    assert p.ctas == CLUSTER_CTAS[4] == 128  # 32 clusters: 4-CTA clusters leave 2 SMs of some GPCs idle
    assert p.cta_origin(1, 2, 3) == (128, (2 * 4 + 3) * 64)
    along_m = plan(hopper_config(128, 128, 64, 4, 2, True, persistent=True, cluster=2), P4096)
    assert along_m.cta_origin(1, 2, 1) == ((1 * 2 + 1) * 128, 2 * 128) and along_m.multicast_rows == 64
    assert plan(hopper_config(128, 128, 64, 4, 2, True), P4096).cta_origin(1, 2, None) == (128, 256)


def test_multicast_slices_are_whole_swizzle_atoms_as_even_as_they_go() -> None:
    even = plan(hopper_config(128, 128, 64, 4, 2, True, persistent=True, cluster=2), P4096)
    assert even.multicast_even and even.multicast_slices == ((0, 64), (64, 128))
    # 136 rows are 17 atoms: rank 0 loads 9 of them, rank 1 the other 8.
    pair = plan(hopper_config(256, 136, 64, 3, 2, True, persistent=True, cluster=2), Problem(398, 11008, 4096))
    assert not pair.multicast_even and pair.multicast_slices == ((0, 72), (72, 136))
    # 152 rows over 4 CTAs: 19 atoms, 5 + 5 + 5 + 4.
    quad = plan(hopper_config(128, 152, 64, 5, 2, True, persistent=True, cluster=4), Problem(512, 5120, 4096))
    assert quad.multicast_slices == ((0, 40), (40, 80), (80, 120), (120, 152))
    # Along N the cluster shares A: a 64-row A tile over 4 CTAs, 16 rows each.
    along_n = plan(hopper_config(64, 128, 64, 4, 1, True, persistent=True, cluster=4, cluster_dim="n"), P4096)
    assert along_n.multicast_even and along_n.multicast_slices == ((0, 16), (16, 32), (32, 48), (48, 64))


def test_swap_ab_plans_the_kernel_on_the_transposed_problem() -> None:
    p = plan(hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, split_k=2), Problem(16, 4096, 4096, "float16"))
    assert (p.m, p.n, p.problem_shape) == (4096, 16, (16, 4096))
    assert p.grid == (64, 1) and p.acc_regs == 8 and p.atoms == 2
    # Split-K over a 2-CTA cluster: each CTA multiplies half of the 32 k-tiles and parks its fragment.
    assert (p.ctas, p.k_tiles, p.cta_k_tiles, p.reduce_regs, p.serial_split) == (128, 32, 16, 8, False)
    serial = plan(
        hopper_config(128, 64, 64, 4, 2, False, split_k=2, split_k_reduce="serial"), Problem(100, 200, 4096, "bfloat16")
    )
    assert serial.serial_split and serial.ctas == serial.tiles * 2


def test_one_row_operands_load_one_row_a_stage() -> None:
    p = plan(hopper_config(64, 64, 64, 4, 1, False, split_k=4), Problem(1, 4096, 4096, "float16"))
    assert p.one_row_a and not p.one_row_b and p.stage_bytes == (1 + 64) * 64 * 2


def test_the_staged_epilogues_boxes_and_the_narrow_tail() -> None:
    whole = plan(hopper_config(256, 128, 64, 3, 2, True, epilogue="tma"), P1000)
    assert (whole.store_boxes, whole.staging_boxes, whole.store_chunks, whole.tail_cols) == ((4, 2), 8, 1, 0)
    chunked = plan(hopper_config(128, 200, 64, 3, 2, True, persistent=True, epilogue="tma_chunked"), P1000)
    # 200 columns: three 64-wide boxes and an 8-wide tail a 64-row block, two buffers a consumer.
    assert (chunked.tail_cols, chunked.store_chunks, chunked.staging_boxes) == (8, 4, 4)


def test_the_tma_loads_options_are_none_at_their_defaults() -> None:
    assert plan(hopper_config(128, 128, 64, 4, 2, True), P1000).load_options("a") == {}
    p = plan(
        hopper_config(
            64,
            16,
            128,
            8,
            1,
            True,
            swap_ab=True,
            split_k=2,
            l2_hint="first/last",
            l2_promotion="256B",
            prefetch_tensormap=True,
        ),
        Problem(16, 4096, 4096, "float16"),
    )
    assert p.load_options("a") == {
        "cache_hint": "evict_first",
        "tensormap_l2_promotion": "L2::256B",
        "prefetch_tensormap": True,
    }
    assert p.load_options("b")["cache_hint"] == "evict_last" and p.store_options() == {"prefetch_tensormap": True}


def test_trim_and_peel_come_from_the_rules_in_the_kernels_axes() -> None:
    trimmed = plan(
        hopper_config(128, 192, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked", trim=True),
        Problem(3000, 5000, 2000, "float16"),
    )
    # The last tile column holds 5000 - 26 * 192 = 8 columns; the last k-tile 2000 - 31 * 64 = 16
    # elements, one k16 step; 3000 - 23 * 128 = 56 rows: the tile row's second m64 block is empty.
    assert (trimmed.trim_n, trimmed.trim_k, trimmed.trim_m) == (8, 1, True)
    peeled = plan(hopper_config(128, 128, 64, 4, 2, True, peel_k=True), Problem(1024, 1024, 2000, "float16"))
    assert peeled.peel_k == 1 and (peeled.trim_n, peeled.trim_k) == (0, 0)


def test_a_plan_refuses_what_the_rules_refuse() -> None:
    with pytest.raises(SpaceError, match="hopper_gemm cannot build .* shared memory"):
        plan(hopper_config(128, 256, 64, 5, 2, True), P4096)


def test_a_blackwell_pair_splits_b_and_lands_both_ctas_bytes_on_cta_0() -> None:
    v9 = blackwell_plan(JOURNEY["v9"].config, JOURNEY["v9"].problem)
    assert (v9.cta_group, v9.b_rows, v9.mma_shape, v9.cluster_tile) == (2, 128, (256, 256, 16), (512, 256))
    assert v9.stage_bytes == (2 * 128 + 128) * 64 * 2 and tx_bytes(v9) == 2 * v9.stage_bytes
    assert v9.tmem_columns == 2 * 256 and v9.warpgroups == 3
    # 8 x 16 cluster tiles on at most 148 CTAs: 74 pairs, 2 iterations.
    assert (v9.tiles, v9.tile_schedule.clusters, v9.ctas, v9.tiles_per_cluster) == (128, 74, 148, 2)
    v1 = blackwell_plan(JOURNEY["v1"].config, JOURNEY["v1"].problem)
    assert (v1.cta_group, v1.b_rows, v1.ctas, tx_bytes(v1)) == (1, 128, 1, (128 + 128) * 64 * 2)
