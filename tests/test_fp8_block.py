"""FP8 block scales (DeepSeek-V3's 1x128 of A, 128x128 of B; core/epilogue.py): the spec and its
operands, the float32 reference, the rules, the Hopper kernel's k loop read back from its lowered
CUDA (every sum scaled by the scales of the element it is stored as, each k block once), the
kernels built for sm_90a, the Triton baseline under Triton's interpreter, the calls users make,
and the API."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from cuda_index import bracketed, index
from test_api_kernels import client  # noqa: F401 (the API fixture)

from tirtune.builder import device_build, toolchain
from tirtune.core import Problem, SpaceError
from tirtune.core.epilogue import BLOCK_K, EPILOGUE_NONE, EPILOGUE_TEXTS, EpilogueSpec, scaling_of, with_scaling
from tirtune.core.problem import FP8
from tirtune.runner.inputs import BLOCK_TRITON_LABEL, baseline_label, block_scaled_product, draw_inputs
from tirtune.runner.verify import reference, relative_error, tolerance
from tirtune.space.hopper import BRANCH, HOPPER, _block_fitted
from tirtune.space.hopper.knobs import config as hopper_config
from tirtune.space.hopper.rules import fp8_block_buffers
from tirtune.kernels.hopper.plan import plan

BLOCK = EpilogueSpec.parse("scale_a_block+scale_b_block")


def _problem(m: int, n: int, k: int, epilogue: str = "scale_a_block+scale_b_block") -> Problem:
    return Problem(m, n, k, FP8, epilogue)


# --- the spec -------------------------------------------------------------------------------------


def test_the_block_scales_come_together_and_stand_apart_from_the_other_scales() -> None:
    assert BLOCK.block_scaled and scaling_of(BLOCK) == "block" and with_scaling(EPILOGUE_NONE, "block") == BLOCK
    assert str(with_scaling(EpilogueSpec.parse("residual+bias"), "block")) == "scale_a_block+scale_b_block+bias+residual"
    with pytest.raises(SpaceError, match="come together"):
        EpilogueSpec.parse("scale_a_block")
    with pytest.raises(SpaceError, match="do not combine with the per-tensor or per-row scales"):
        EpilogueSpec.parse("scale_a_block+scale_b_block+scale_col")
    with pytest.raises(SpaceError, match="swiglu stands alone"):
        EpilogueSpec.parse("scale_a_block+scale_b_block+swiglu")
    blocks = [t for t in EPILOGUE_TEXTS if "block" in t]
    assert blocks[:4] == ["scale_a_block+scale_b_block", "scale_a_block+scale_b_block+bias",
                          "scale_a_block+scale_b_block+residual", "scale_a_block+scale_b_block+bias+residual"]
    assert blocks[4:] == [f"{t}+out_float16" for t in blocks[:4]]  # and each with an fp16 D


def test_the_block_operands_follow_k_and_n_in_blocks_of_128() -> None:
    ops = {o.name: o for o in _problem(300, 200, 1040).operands}
    assert ops["scale_a_block"].shape == (9, 300) and ops["scale_b_block"].shape == (2, 9)
    assert ops["scale_a_block"].dtype == ops["scale_b_block"].dtype == "float32"
    with pytest.raises(SpaceError, match="follow K"):
        BLOCK.operands(300, 200, "bfloat16")
    # Bytes moved: A and B of one byte, D of two, the scales of four.
    assert _problem(300, 200, 1040).min_bytes == (300 + 200) * 1040 + 300 * 200 * 2 + (9 * 300 + 2 * 9) * 4


def test_only_fp8_problems_take_block_scales() -> None:
    assert "block_scales_fp8" in {v.rule for v in HOPPER.problem_violations(Problem(256, 256, 256, "bf16", str(BLOCK)))}
    assert not HOPPER.problem_violations(_problem(256, 256, 256))


# --- the reference --------------------------------------------------------------------------------


def _drawn(m: int, n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn)
    kb, nb = -(-k // BLOCK_K), -(-n // BLOCK_K)
    return a, b, torch.randn(kb, m, generator=gen), torch.randn(nb, kb, generator=gen)


def _loop_reference(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    """The definition, block by block: sum_kb (A_kb @ B_kb.T) * sa[kb, m] * sb[n // 128, kb]."""
    out = torch.zeros(a.shape[0], b.shape[0], dtype=torch.float64)
    for kb in range(sa.shape[0]):
        ks = slice(kb * BLOCK_K, (kb + 1) * BLOCK_K)
        part = a[:, ks].double() @ b[:, ks].double().T
        out += part * sa[kb].double()[:, None] * sb[torch.arange(b.shape[0]) // BLOCK_K, kb].double()[None, :]
    return out


@pytest.mark.parametrize(("m", "n", "k"), [(40, 200, 300), (129, 130, 1024), (1, 300, 128)])
def test_the_reference_scales_each_k_block_by_its_two_scales(m: int, n: int, k: int) -> None:
    a, b, sa, sb = _drawn(m, n, k)
    exact = _loop_reference(a, b, sa, sb)
    assert relative_error(block_scaled_product(a, b, sa, sb), exact) < 1e-6
    bias = torch.randn(n).to(torch.bfloat16)
    spec = EpilogueSpec.parse("scale_a_block+scale_b_block+bias")
    ref = reference(a, b, spec, scale_a_block=sa, scale_b_block=sb, bias=bias)
    assert relative_error(ref, exact + bias.double()) < 1e-6
    # A scale read at the wrong block moves the product by about its norm.
    assert relative_error(block_scaled_product(a, b, sa.roll(1, 0), sb), exact) > 0.3 or sa.shape[0] == 1


def test_the_inputs_draw_the_block_scales_and_the_baseline_says_what_it_runs() -> None:
    problem = _problem(64, 300, 512, "scale_a_block+scale_b_block+residual")
    inputs = draw_inputs(torch, 64, 300, 512, FP8, problem.epilogue, device="cpu", seed=3)
    assert {n: tuple(t.shape) for n, t in inputs.operands.items()} == {
        "scale_a_block": (4, 64), "scale_b_block": (3, 4), "residual": (64, 300)}
    # Off a GPU torch runs no block-scaled GEMM: the Triton kernel written here is the baseline.
    assert baseline_label(problem.epilogue, FP8, 300) == BLOCK_TRITON_LABEL + " + residual"


TRITON_CHECK = """
import torch
from tirtune.runner.inputs import block_scaled_product
from tirtune.runner.triton_fp8 import CONFIGS, block_scaled_mm
from tirtune.runner.verify import relative_error
m, n, k = 40, 200, 300
gen = torch.Generator().manual_seed(1)
a = torch.randn(m, k, generator=gen).to(torch.float8_e4m3fn)
b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn)
sa, sb = torch.randn(3, m, generator=gen), torch.randn(2, 3, generator=gen)
ref = block_scaled_product(a, b, sa, sb)
for i in (0, len(CONFIGS) - 1):
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    block_scaled_mm(a, b, sa, sb, d, i)
    print(relative_error(d, ref))
"""


def test_the_triton_baseline_computes_the_block_scaled_product() -> None:
    """runner.triton_fp8 under Triton's interpreter (a process of its own: TRITON_INTERPRET is read
    when Triton is imported), two of its tile shapes, against the float32 reference."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", TRITON_CHECK], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(root)}, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    errors = [float(x) for x in done.stdout.split()]
    assert len(errors) == 2 and all(e < tolerance(FP8, 300) for e in errors), errors


# --- the rules ------------------------------------------------------------------------------------


def _broken(config: Any, problem: Problem) -> set[str]:
    return {v.rule for v in HOPPER.violations(config, problem)}


def test_the_rules_refuse_what_the_block_k_loop_does_not_take_by_name() -> None:
    big = _problem(4096, 4096, 4096)
    good = hopper_config(128, 128, 128, 4, 2, True, persistent=True)
    assert _broken(good, big) == set()
    assert "fp8_block_k_tile" in _broken(good.replace(blk_k=256, stages=2), big)
    assert "fp8_block_b_blocks" in _broken(good.replace(blk_n=96), big)
    swapped = hopper_config(64, 96, 128, 4, 1, True, swap_ab=True)  # B's rows are the kernel's: any width
    assert "fp8_block_b_blocks" not in _broken(swapped, _problem(96, 4096, 4096))
    # Twice the accumulators: 128x256 cooperative (128 a thread) and ping-pong 128x128 do not fit.
    assert "fp8_block_registers" in _broken(good.replace(blk_n=256), big)
    assert "fp8_block_registers" in _broken(good.replace(schedule="pingpong"), big)
    # The same configs without block scales break none of these.
    plain = Problem(4096, 4096, 4096, FP8, "scale_a+scale_b")
    assert not {r for r in _broken(good.replace(blk_n=256), plain) if r.startswith("fp8_block")}


@pytest.mark.parametrize("shape", ["16x7168x2048", "512x4096x7168", "4096x7168x2048", "8192x1536x7168"])
def test_a_block_scaled_job_has_valid_configs_and_its_starts_take_128_deep_k_tiles(shape: str) -> None:
    m, n, k = (int(x) for x in shape.split("x"))
    problem = _problem(m, n, k)
    starts = BRANCH.start_configs(problem)
    assert starts and all(c.blk_k == BLOCK_K for c in starts)
    import random

    drawn = [HOPPER.sample_valid(problem, random.Random(i)) for i in range(5)]
    assert all(c is not None and HOPPER.is_valid(c, problem) for c in drawn)
    for start in starts:  # a start the block rules refuse has a valid config near it
        assert HOPPER.is_valid(start, problem) or HOPPER.nearest_valid(start, problem) is not None


@pytest.mark.parametrize("shape", ["4096x4096x4096", "2048x2048x2048", "8192x6144x4096"])
def test_a_large_block_scaled_job_starts_on_tiles_the_block_rules_take_with_two_product_buffers(shape: str) -> None:
    """The large class's 16-bit starts (128x256 tiles, ping-pong 128x128) come out 128 columns
    wide, cooperative and with the register split that holds two product buffers: valid as they
    stand, where the job's repair made 128x64, 128x8 and one-buffer tiles of them."""
    m, n, k = (int(x) for x in shape.split("x"))
    problem = _problem(m, n, k)
    starts = BRANCH.start_configs(problem)
    assert starts and all(HOPPER.is_valid(c, problem) for c in starts), [c.label() for c in starts]
    assert all(c.blk_n == BLOCK_K and c.schedule == "cooperative" and fp8_block_buffers(c) == 2 for c in starts)
    # the per-tensor problem's starts keep their 128x256 and ping-pong tiles
    plain = BRANCH.start_configs(_problem(m, n, k, "scale_a+scale_b"))
    assert any(c.blk_n > BLOCK_K for c in plain) and any(c.schedule == "pingpong" for c in plain)


# --- the kernel: the k loop read back from the lowered CUDA ------------------------------------------

LOOPS = ("kt", "kp")  # the block k loop's variable: a k-tile, or a pair of them (two product buffers)


def _fn(expression: str) -> Callable[..., int]:
    return index(expression, loops=LOOPS)


def _scale_loads(source: str) -> list[tuple[int, str, int, str, str]]:
    """Every load of a block scale into a fragment register, in source order: (position, fragment,
    register, which scale, index expression)."""
    return [(found.start(), found[1], int(found[2]), found[3], bracketed(source, found.end() - 1))
            for found in re.finditer(r"(acc\d)_ptr\[(\d+)\] = (scale_[ab]_block)_ptr\[", source)]


def _k_loop(source: str) -> list[tuple[str, int, dict[str, Callable[..., int]]]]:
    """Every promotion of a product into a sum register, in source order: (fragment, sum register,
    {which scale: the index its factor was last loaded from before it}). A register of scales is
    loaded once a k-tile and read by that k-tile's promotion, the next one after it in the source."""
    loads = _scale_loads(source)
    promotions = []
    pattern = r"(acc\d)_ptr\[(\d+)\] = \(\1_ptr\[\2\] \+ \(\1_ptr\[\d+\] \* \(\1_ptr\[([^\]]+)\] \* \1_ptr\[([^\]]+)\]\)\)\);"
    for found in re.finditer(pattern, source):
        factors = {}
        for register in (_fn(found[3])(), _fn(found[4])()):
            at, _, _, which, expression = max(
                (load for load in loads if load[1] == found[1] and load[2] == register and load[0] < found.start()),
                key=lambda load: load[0],
            )
            factors[which] = _fn(expression)
        promotions.append((found[1], int(found[2]), factors))
    return promotions


def _stores(source: str) -> dict[tuple[str, int], Callable[..., int]]:
    """Sum register -> the index of D it is stored at (the register epilogue, paired or not)."""
    stores = {}
    for found in re.finditer(r"tirtune_store_bf16x2\(\(&\(D_ptr\[", source):
        index = _fn(bracketed(source, found.end() - 1))
        rest = source[found.end():found.end() + 4000]
        regs = re.match(r"[^;]*?\]\)\), (acc\d)_ptr\[(\d+)\], \1_ptr\[(\d+)\]\);", rest)
        assert regs is not None
        stores[regs[1], int(regs[2])] = index
        stores[regs[1], int(regs[3])] = lambda f=index, **v: f(**v) + 1
    for found in re.finditer(r"D_ptr\[", source):
        expression = bracketed(source, found.end() - 1)
        tail = re.match(r"\] = \(\(nv_bfloat16\)(acc\d)_ptr\[(\d+)\]\);", source[found.end() + len(expression):])
        if tail is not None:
            stores[tail[1], int(tail[2])] = _fn(expression)
    return stores


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        # a 128-row consumer: two m64 blocks (acc0, acc1), each with its own scales
        # (N a multiple of the tile's width, so that a column past N cannot pass for the next row's;
        # B's last 128-row block partial at 448 and 320)
        (hopper_config(128, 64, 128, 4, 1, True), _problem(300, 448, 704)),
        # two cooperative consumers of 64 rows, a ragged M
        (hopper_config(128, 128, 128, 3, 2, True), _problem(200, 384, 1024)),
        # swapped (decode): B's rows are the kernel's rows, A's rows its columns
        (hopper_config(64, 16, 128, 4, 1, True, swap_ab=True), _problem(20, 320, 1008)),
    ],
    ids=["two-m64-blocks", "cooperative", "swapped"],
)
def test_every_sum_is_scaled_by_the_scales_of_the_element_it_is_stored_as(config: Any, problem: Problem) -> None:
    """For sampled threads of the consumer warpgroups, CTAs and k blocks: each sum register's two
    factors are the scale loads of A's row and B's 128-row block of the D element the register is
    stored as (rows past the problem read the last ones and are never stored)."""
    source, _ = device_build.lower_device(config, problem)
    promotions = _k_loop(source)
    stores = _stores(source)
    m, n, kb_count = problem.m, problem.n, -(-problem.k // BLOCK_K)
    assert promotions and {(frag, reg) for frag, reg, _ in promotions} <= set(stores), (len(promotions), len(stores))
    threads = [*range(0, config.consumers * 128, 23), config.consumers * 128 - 1]  # the consumer warpgroups
    for bx in range(3):
        for by in range(3):
            for tid in threads:
                for step in (0, 1, kb_count // 2 - 1):  # a k-tile (kt) or a pair of them (kp)
                    for frag, reg, factors in promotions:
                        at = stores[frag, reg](tid=tid, bx=bx, by=by)
                        row, col = divmod(at, n)
                        if not (0 <= row < m and 0 <= col < n):
                            continue  # a guard drops the store
                        a = factors["scale_a_block"](tid=tid, bx=bx, by=by, kt=step, kp=step)
                        b = factors["scale_b_block"](tid=tid, bx=bx, by=by, kt=step, kp=step)
                        # A's scale of the element's row and B's of its column's 128-row block, both
                        # of one k block
                        assert a % m == row and b // kb_count == col // BLOCK_K, (frag, reg, tid, bx, by)
                        assert a // m == b % kb_count < kb_count, (frag, reg, tid, bx, by, step)


def test_a_split_k_block_scaled_tile_scales_every_k_block_once() -> None:
    """Serial split-K over 2 CTAs, swapped, two product buffers: the k blocks A's scales are read at
    (the column of thread 0's first fragment register), over the two ranks' k loops (the loop over
    pairs of k-tiles and an odd last one after it), are 0 .. KB-1, each once (the loads' k-tile
    order, `Loads.k_index`)."""
    problem = _problem(20, 300, 1024)
    config = hopper_config(64, 16, 128, 4, 1, True, swap_ab=True, split_k=2, split_k_reduce="serial")
    assert plan(config, problem).block_buffers == 2
    source, _ = device_build.lower_device(config, problem)
    loop = re.search(r"for \(int kp = 0; kp < (\d+); \+\+kp\)", source)
    assert loop is not None and int(loop[1]) == 2  # 4 k-tiles a CTA: two pairs
    first = min(register for _, _, register, which, _ in _scale_loads(source) if which == "scale_a_block")
    # buffer 1's scales lie one product and one set of scales after buffer 0's
    registers = {first, first + 8 + (16 // 4 + 1)}
    sites = [expression for _, _, register, which, expression in _scale_loads(source)
             if which == "scale_a_block" and register in registers]
    assert len(sites) == 2
    column = _fn(sites[0])(tid=0, bx=0, by=0, kp=0)  # rank 0's first k-tile: k block 0, the CTA's first column
    blocks = sorted((_fn(site)(tid=0, bx=rank, by=0, kp=kp) - column) // problem.m
                    for rank in (0, 1) for kp in range(2) for site in sites)
    assert blocks == list(range(8))


def test_the_block_scales_take_a_second_product_buffer_where_registers_and_the_ring_allow() -> None:
    """rules.fp8_block_buffers: two buffers where a third fragment of accumulators fits the
    consumer's registers and the ring has two stages; a 128x128 tile of two cooperative consumers
    holds them with reg_split 240/24 and not with 232/40, and one stage holds one."""
    problem = _problem(4096, 4096, 4096)
    wide = hopper_config(128, 128, 128, 4, 2, True, persistent=True, raster_group=8)
    assert plan(wide, problem).block_buffers == 1
    assert plan(wide.replace(reg_split="240/24"), problem).block_buffers == 2
    assert fp8_block_buffers(hopper_config(64, 16, 128, 1, 1, True, swap_ab=True)) == 1
    assert fp8_block_buffers(hopper_config(64, 16, 128, 2, 1, True, swap_ab=True)) == 2
    assert plan(wide, _problem(4096, 4096, 4096, "scale_a+scale_b")).block_buffers == 1  # not block-scaled


@pytest.mark.nvcc
@pytest.mark.parametrize(
    ("config", "problem"),
    [
        (hopper_config(128, 128, 128, 4, 2, True, persistent=True, raster_group=8, epilogue="tma_chunked"),
         _problem(4096, 7168, 2048, "scale_a_block+scale_b_block+bias")),
        (hopper_config(64, 16, 128, 8, 1, True, swap_ab=True, split_k=4, split_k_reduce="serial"),
         _problem(16, 7168, 7168)),
        # two product buffers (rules.fp8_block_buffers), a k loop of 16 pairs
        (hopper_config(128, 128, 128, 4, 2, True, persistent=True, raster_group=8, reg_split="240/24"),
         _problem(4096, 4096, 4096)),
        # the same, the consumers' pairs offset by one k-tile (block_stagger)
        (hopper_config(128, 128, 128, 4, 2, True, persistent=True, raster_group=8, reg_split="240/24",
                       epilogue="tma_chunked", block_stagger=True),
         _problem(4096, 4096, 4096)),
    ],
    ids=["persistent-chunked-bias", "swapped-split", "two-buffers", "two-buffers-staggered"],
)
def test_block_scaled_kernels_build_for_sm_90a_with_fp8_wgmma_and_no_spill(config: Any, problem: Problem,
                                                                           tmp_path: Path) -> None:
    assert HOPPER.is_valid(config, problem), HOPPER.violations(config, problem)
    source, _ = device_build.lower_device(config, problem)
    cu = tmp_path / "k.cu"
    cu.write_text(source)
    output = toolchain.nvcc_cubin(cu, tmp_path / "k.cubin")
    resources = toolchain.ptxas_resources(output)
    assert resources is not None and not resources.spills, output[-2000:]
    # ptxas did not serialize the wgmma (C7514: a register of a wgmma in flight read by another
    # instruction), which a product buffer read across the k loop's back edge made it do
    assert "C7514" not in output, output[-2000:]
    sass = toolchain.sass(tmp_path / "k.cubin")
    assert "QGMMA.64x" in sass and ".E4M3.E4M3" in sass
    assert "LDL" not in sass and "STL" not in sass


# --- the calls users make ---------------------------------------------------------------------------


def test_scaled_gemm_takes_block_scales_as_torch_lays_them_out() -> None:
    import tirtune
    from tirtune.dispatch.scaled import scaling_operands

    a, b, sa, sb = _drawn(40, 200, 300, seed=2)
    scale_a = sa.T.contiguous()  # (M, KB), as torch._scaled_mm's 1x128 scales
    scales = scaling_operands(40, 200, scale_a, sb, 300)
    assert set(scales) == {"scale_a_block", "scale_b_block"} and scales["scale_a_block"].shape == (3, 40)
    d = tirtune.scaled_gemm(a, b, scale_a, sb)
    assert d.dtype == torch.bfloat16 and relative_error(d, _loop_reference(a, b, sa, sb)) < tolerance(FP8, 300)
    with pytest.raises(ValueError, match=r"A's are \(M, ceil\(K/128\)\) = \(40, 3\)"):
        scaling_operands(40, 200, torch.ones(40, 2), sb, 300)


def test_fp8_linear_takes_a_block_quantized_checkpoint() -> None:
    from tirtune.nn import FP8Linear

    torch.manual_seed(0)
    layer = torch.nn.Linear(300, 200, bias=True)
    quantized = FP8Linear.quantize(layer, "block")
    assert quantized.scaling == "block" and tuple(quantized.weight_scale.shape) == (2, 3)
    state = {"w.weight": quantized.weight, "w.weight_scale_inv": quantized.weight_scale, "w.bias": quantized.bias}
    loaded = FP8Linear.from_state_dict(state, "w.")
    x = torch.randn(5, 300, dtype=torch.bfloat16)
    y = loaded(x)
    assert y.shape == (5, 200) and relative_error(y, layer(x.float()).detach()) < 0.06  # e4m3's 3 mantissa bits
    with pytest.raises(ValueError, match="dynamic activation scales"):
        FP8Linear(quantized.weight, quantized.weight_scale, input_scale=torch.ones(1))


# --- the API ----------------------------------------------------------------------------------------


def test_tune_takes_a_block_scaled_fp8_problem(client: Any) -> None:  # noqa: F811 (the fixture)
    made = client.post("/tune", json={"m": 512, "n": 4096, "k": 7168, "dtype": "fp8", "scaling": "block"})
    assert made.status_code == 202, made.text
    assert made.json()["problem"]["epilogue"] == "scale_a_block+scale_b_block"
    assert made.json()["problem"]["scaling"] == "block"


@pytest.mark.parametrize(("shape", "width"), [("512x4096x14336", 128), ("256x8192x4096", 128), ("128x4096x4096", 64)])
def test_a_swapped_block_scaled_start_the_rules_refuse_is_unswapped_to_the_tile_of_least_work_a_cta(
    shape: str, width: int
) -> None:
    """A swapped start fitted to M past what the block rules take (64x256 at M = 256 or 512) becomes
    an unswapped 128-row tile, 128 or 64 wide, whichever gives a CTA the least work over its rounds
    (the wider on a tie: 128 tiles of 128x128 fill one round as 256 of 128x64 fill two), with two
    product buffers and the weights' L2 hint kept on the weights; where the tiles of 128x128 leave
    SMs idle (32 tiles at 128x4096), 128x64."""
    m, n, k = (int(x) for x in shape.split("x"))
    problem = _problem(m, n, k)
    swapped = hopper_config(64, 256, 128, 4, 1, True, swap_ab=True, l2_hint="first/none")
    assert not HOPPER.is_valid(swapped, problem)
    fitted = _block_fitted(swapped, problem)
    assert HOPPER.is_valid(fitted, problem)
    assert (fitted.swap_ab, fitted.blk_m, fitted.blk_n, fitted.consumers) == (False, 128, width, 2)
    assert fitted.l2_hint == "none/first" and fp8_block_buffers(fitted) == 2
    if m >= 256:  # the class's swapped start, fitted to M, comes out so among the job's starts
        starts = BRANCH.start_configs(problem)
        assert all(HOPPER.is_valid(c, problem) for c in starts) and fitted.replace(stages=4) in starts


# --- block_stagger: the consumers' pairs of k-tiles offset by one -------------------------------------


def _block_after(source: str, opening: int) -> tuple[int, int]:
    """The span of the braced block whose "{" is at `opening`."""
    depth = 0
    for i in range(opening, len(source)):
        depth += {"{": 1, "}": -1}.get(source[i], 0)
        if depth == 0:
            return opening, i
    raise AssertionError(f"unbalanced at {opening}")


def test_block_stagger_is_refused_where_it_has_no_pairs_to_offset_by_name() -> None:
    big = _problem(4096, 4096, 4096)
    good = hopper_config(128, 128, 128, 4, 2, True, persistent=True, reg_split="240/24", block_stagger=True)
    assert _broken(good, big) == set()
    assert "block_stagger_supported" in _broken(good.replace(reg_split="232/40"), big)  # one product buffer
    assert "block_stagger_supported" in _broken(good, _problem(4096, 4096, 4096, "scale_a+scale_b"))
    assert "block_stagger_supported" in _broken(good, Problem(4096, 4096, 4096, "float16"))
    one = hopper_config(128, 64, 128, 4, 1, True, block_stagger=True)  # one consumer: nothing to offset
    assert "block_stagger_supported" in _broken(one, big)
    assert "block_stagger_supported" not in _broken(good.replace(block_stagger=False, reg_split="232/40"), big)
    assert good.label().endswith(" bstagger") and good.replace(block_stagger=False).digest() != good.digest()


@pytest.mark.parametrize("k", [1024, 1152])  # 8 k-tiles, then 9: each consumer ends on a pair once
def test_staggered_consumers_each_scale_every_k_block_once(k: int) -> None:
    """With block_stagger the even consumer pairs k-tiles from the first, the odd one multiplies
    the first alone and pairs from the second (its own branch of the lowered k loop): the k blocks
    A's scales are read at by thread 0 of each consumer (buffer 0's and buffer 1's first register),
    over its branch, are 0 .. KB-1, each once. The same tile without the knob has one k loop."""
    problem = _problem(256, 256, k)
    config = hopper_config(128, 128, 128, 4, 2, True, reg_split="240/24", block_stagger=True)
    assert HOPPER.is_valid(config, problem) and plan(config, problem).block_buffers == 2
    source, _ = device_build.lower_device(config, problem)
    branch = re.search(r"if \(\(\(warp_id_in_cta & 7\) >> 2\) == 0\) \{", source)
    assert branch is not None, "no branch on the consumer's parity"
    even = _block_after(source, branch.end() - 1)
    other = re.match(r"\s*else \{", source[even[1] + 1:])
    assert other is not None
    odd = _block_after(source, even[1] + 1 + other.end() - 1)
    loads = [load for load in _scale_loads(source) if load[3] == "scale_a_block"]
    first = min(register for _, _, register, _, _ in loads)
    registers = {first, first + 64 + 3}  # buffer 1's scales: one product (64) and one set of scales (3) on
    kb_count = k // BLOCK_K
    for (start, end), tid in ((even, 0), (odd, 128)):
        inside = source[start:end]
        trips = {name: int(count) for name, count in re.findall(r"for \(int (kp\w*) = 0; \1 < (\d+);", inside)}
        blocks = []
        for at, _, register, _, expression in loads:
            if not (start < at < end and register in registers):
                continue
            names = tuple(trips)
            fn = index(expression, loops=names)
            used = [name for name in names if re.search(rf"\b{name}\b", expression)]
            for step in range(trips[used[0]]) if used else [0]:
                blocks.append(fn(tid=tid, bx=0, by=0, **{name: step for name in names}) // problem.m)
        assert sorted(blocks) == list(range(kb_count)), (tid, sorted(blocks))
    twin, _ = device_build.lower_device(config.replace(block_stagger=False), problem)
    assert len(re.findall(r"for \(int kp\w* = 0;", twin)) == 1 and "warp_id_in_cta & 7) >> 2) == 0" not in twin
