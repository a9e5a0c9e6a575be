"""Each concern of the Blackwell kernel alone (tirtune/kernels/blackwell/), as
tests/test_hopper_pieces.py does for Hopper: one bundle's macro in a tiny kernel with only the
real body's preamble (tests/kernel_pieces.py), lowered for sm_100a (TVM only, no nvcc), and what
that piece must emit counted in the kernel function. The whole kernel's bytes are
tests/test_template_fold.py's.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from kernel_pieces import blackwell_body, count

from tirtune.kernels.blackwell import tx_bytes
from tirtune.kernels.blackwell.epilogue import Epilogue
from tirtune.kernels.blackwell.loads import Loads
from tirtune.kernels.blackwell.mma import Mma
from tirtune.kernels.blackwell.roles import Roles
from tirtune.space import Config, Problem
from tirtune.space.blackwell import BLACKWELL, JOURNEY
from tirtune.space.hopper.knobs import config as hopper_config

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

G2S_PAIR = (
    "tvm_builtin_ptx_cp_async_bulk_tensor_g2s_cluster_async_bulk_tensor_2d_shared__cluster_global_"
    "mbarrier__complete_tx__bytes_cta_group__2"
)
MMA_PAIR = "tvm_builtin_ptx_tcgen05_mma_ss_mma_cta_group__2_kind__f16"
COMMIT_PAIR = (
    "tvm_builtin_ptx_tcgen05_commit_multicast_commit_cta_group__2_mbarrier__arrive__one_shared__cluster_"
    "multicast__cluster_b64"
)
TMEM_LOAD = "tvm_builtin_ptx_tcgen05_ld_ld_sync_aligned_32x32b_x64_b32_f32"
S2G = "tvm_builtin_ptx_cp_async_bulk_tensor_s2g_async_bulk_tensor_2d_global_shared__cta_tile_bulk_group"
PAIR = JOURNEY["v9"]  # 256x256x64, two consumers, a CTA pair, TMA epilogue


def valid(config: Config, problem: Problem) -> tuple[Config, Problem]:
    assert BLACKWELL.is_valid(config, problem), BLACKWELL.violations(config, problem)
    return config, problem


def test_a_pair_loads_each_consumers_a_rows_and_half_of_b_onto_cta_0s_barrier() -> None:
    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        assert p.b_rows == 128 and tx_bytes(p) == 2 * (2 * 128 + 128) * 64 * 2
        Loads.trace(T, p, sk, f).produce(0, 0, 0, 0)

    body = blackwell_body(PAIR.config, PAIR.problem, use)
    # One box of A per consumer and one of B (blk_k 64: one swizzle atom); CTA 0 alone arms the
    # pair's `full` barrier, with both CTAs' bytes.
    assert count(G2S_PAIR, body) == 2 + 1
    arm = "tvm_builtin_ptx_mbarrier_arrive_expect_tx_arrive_expect_tx_shared__cluster_b64"
    assert re.search(rf"if \(\(\(int\)tvm_builtin_cluster_ctaid_x\(\)\) == 0\) \{{\s*{arm}\(.*\(uint\)98304\);", body)


def test_the_mma_thread_multiplies_each_k_tile_and_commits_to_both_ctas_of_the_pair() -> None:
    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        Mma.trace(T, p, sk.ring, f, Loads.trace(T, p, sk, f)).issue_mma(0, 0, 0, 0)

    body = blackwell_body(PAIR.config, PAIR.problem, use)
    assert "for (int kt = 0; kt < 64; ++kt)" in body
    # A k-tile (one 64-wide swizzle atom) is four K=16 tcgen05.mma; its stage's release and the
    # tile's accumulator are committed to both CTAs.
    assert count(MMA_PAIR, body) == 64 // 16 and count(COMMIT_PAIR, body) == 2


@pytest.mark.parametrize(
    ("config", "problem", "store8", "tma_stores"),
    [
        (JOURNEY["v6"].config, JOURNEY["v6"].problem, 2 * 8, 0),  # register: 16-byte stores, 8 columns each
        (hopper_config(128, 128, 64, 2, 1, False, persistent=True, raster_group=8), Problem(1000, 1004, 1000), 0, 0),
        (JOURNEY["v7"].config, JOURNEY["v7"].problem, 0, 2),  # tma: a staged store per 64-column chunk
    ],
)
def test_the_writeback_reads_tmem_64_columns_at_a_time_and_stores_each_chunk(
    config: Config, problem: Problem, store8: int, tma_stores: int
) -> None:
    valid(config, problem)

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        Epilogue.trace(T, p, f).writeback(0, 0, 0, 0)

    body = blackwell_body(config, problem, use)
    assert count(TMEM_LOAD, body) == 128 // 64
    assert count("tirtune_store8_half", body) == store8 and count(S2G, body) == tma_stores
    if problem.n % 8:  # element by element
        assert len(re.findall(r"D_ptr\[.*\] = \(\(half\)", body)) == 128


def test_without_warp_specialization_each_tile_is_multiplied_then_written_back_by_every_consumer() -> None:
    config, problem = valid(JOURNEY["v6"].config, JOURNEY["v6"].problem)

    def use(T: Any, p: Any, sk: Any, f: Any) -> None:
        loads = Loads.trace(T, p, sk, f)
        Roles.trace(T, p, sk, f, loads, Mma.trace(T, p, sk.ring, f, loads), Epilogue.trace(T, p, f)).single()

    body = blackwell_body(config, problem, use)
    # The persistent loop over the CTA's tiles; in it one elected thread's k loop, then the writeback.
    assert re.search(r"for \(int it = 0; it < \d+; \+\+it\)", body)
    assert count("tvm_builtin_elect_one_sync_op", body) == 1 and count(TMEM_LOAD, body) == 2
