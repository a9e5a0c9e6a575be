"""The swiglu epilogue off the GPU: the packed weight, the float32 reference, the measuring child's
inputs and baseline, the rules and starts of the Hopper space, and the user's entry points
(`tirtune.gemm(..., activation="swiglu")`, `torch.ops.tirtune.gemm_swiglu` with its fake,
`tirtune.nn.GateUp`), each on CPU tensors. The kernels themselves: tests/test_epilogue_kernels.py."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import tirtune
from tirtune.core import Config, Problem, SpaceError
from tirtune.core.epilogue import EpilogueSpec
from tirtune.dispatch.op import gemm_swiglu_op, gemm_swiglu_out_op
from tirtune.model.features import features
from tirtune.model.search import SearchSettings, rank_space
from tirtune.runner.inputs import baseline, baseline_label, draw_inputs, operand_mismatch
from tirtune.runner.verify import TOLERANCE, reference, verify
from tirtune.space import HOPPER
from tirtune.space.branches import branch
from tirtune.space.hopper.knobs import config as hopper_config

SWIGLU = EpilogueSpec.parse("swiglu")


def _hf_mlp(k: int, n: int) -> torch.nn.Module:
    class MLP(torch.nn.Module):  # the Llama/Qwen MLP's first half: act_fn(gate_proj(x)) * up_proj(x)
        def __init__(self) -> None:
            super().__init__()
            self.gate_proj = torch.nn.Linear(k, n, bias=False)
            self.up_proj = torch.nn.Linear(k, n, bias=False)
            self.act_fn = torch.nn.SiLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act_fn(self.gate_proj(x)) * self.up_proj(x)

    return MLP()


# --- the packed weight --------------------------------------------------------------------------------


def test_packing_interleaves_groups_of_8_rows_and_round_trips() -> None:
    gen = torch.Generator().manual_seed(0)
    gate, up = torch.randn(24, 5, generator=gen), torch.randn(24, 5, generator=gen)
    packed = tirtune.pack_gate_up(gate, up)
    assert packed.shape == (48, 5)
    for j in range(3):
        assert torch.equal(packed[16 * j : 16 * j + 8], gate[8 * j : 8 * j + 8])
        assert torch.equal(packed[16 * j + 8 : 16 * j + 16], up[8 * j : 8 * j + 8])
    back_gate, back_up = tirtune.unpack_gate_up(packed)
    assert torch.equal(back_gate, gate) and torch.equal(back_up, up)
    assert tirtune.nn.pack_gate_up is tirtune.pack_gate_up


def test_packing_refuses_what_it_cannot_pack() -> None:
    with pytest.raises(ValueError, match="N=12 must be a multiple of 8"):
        tirtune.pack_gate_up(torch.randn(12, 4), torch.randn(12, 4))
    with pytest.raises(ValueError, match=r"both be \(N, K\)"):
        tirtune.pack_gate_up(torch.randn(16, 4), torch.randn(8, 4))
    with pytest.raises(ValueError, match="gate is torch.float32"):
        tirtune.pack_gate_up(torch.randn(16, 4), torch.randn(16, 4, dtype=torch.float16))


# --- the reference, the inputs, the baseline --------------------------------------------------------------


def test_the_reference_is_silu_of_the_gate_times_the_up() -> None:
    gen = torch.Generator().manual_seed(1)
    a, gate, up = (
        torch.randn(7, 32, generator=gen),
        torch.randn(40, 32, generator=gen),
        torch.randn(40, 32, generator=gen),
    )
    want = F.silu(a @ gate.T) * (a @ up.T)
    got = reference(a, tirtune.pack_gate_up(gate, up), SWIGLU)
    assert got.shape == (7, 40)
    torch.testing.assert_close(got, want)
    with pytest.raises(SpaceError, match="takes the operands"):
        reference(a, tirtune.pack_gate_up(gate, up), SWIGLU, bias=torch.zeros(40))
    with pytest.raises(SpaceError, match="a multiple of 16 rows"):
        reference(a, torch.randn(24, 32), SWIGLU)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_inputs_and_the_baseline(dtype: str) -> None:
    inputs = draw_inputs(torch, 33, 48, 4096, dtype, SWIGLU, device="cpu", seed=5)
    assert inputs.a.shape == (33, 4096) and inputs.b.shape == (96, 4096) and dict(inputs.operands) == {}
    assert inputs.arguments(torch.empty(33, 48))[:2] == (inputs.a, inputs.b)
    # B over sqrt(K): the gate and up products are about standard normal, D far inside fp16's range.
    ref = reference(inputs.a, inputs.b, SWIGLU)
    assert 0.2 < float((inputs.a.float() @ inputs.b.float().T).std()) < 5 and float(ref.abs().max()) < 100
    # The baseline: cuBLAS on [gate; up], then the eager silu and multiply, within the tolerance.
    d = torch.empty(33, 48, dtype=inputs.a.dtype)
    baseline(torch, inputs, d)()
    assert float(torch.linalg.vector_norm(d.float() - ref) / torch.linalg.vector_norm(ref)) <= TOLERANCE[dtype]
    assert baseline_label(SWIGLU) == "torch.mm([gate; up]) + F.silu(gate) * up"
    # A plain problem draws what it drew before.
    plain = draw_inputs(torch, 33, 48, 64, dtype, EpilogueSpec(), device="cpu", seed=5)
    gen = torch.Generator().manual_seed(5)
    types = {"float16": torch.float16, "bfloat16": torch.bfloat16}
    assert torch.equal(plain.a, torch.randn(33, 64, dtype=types[dtype], generator=gen))
    assert torch.equal(plain.b, torch.randn(48, 64, dtype=types[dtype], generator=gen))


def test_the_check_passes_the_right_pairing_and_fails_a_wrong_one() -> None:
    inputs = draw_inputs(torch, 40, 64, 256, "float16", SWIGLU, device="cpu", seed=2)

    def right(d: torch.Tensor) -> None:
        d.copy_(reference(inputs.a, inputs.b, SWIGLU).half())

    def halves_swapped(d: torch.Tensor) -> None:  # silu(up) * gate
        gate, up = tirtune.unpack_gate_up(inputs.b.float())
        d.copy_((F.silu(inputs.a.float() @ up.T) * (inputs.a.float() @ gate.T)).half())

    def blocked(d: torch.Tensor) -> None:  # B read as [gate; up] instead of interleaved
        h = inputs.a.float() @ inputs.b.float().T
        d.copy_((F.silu(h[:, :64]) * h[:, 64:]).half())

    assert verify(right, inputs.a, inputs.b, "float16", epilogue=SWIGLU).ok
    for wrong in (halves_swapped, blocked):
        verdict = verify(wrong, inputs.a, inputs.b, "float16", epilogue=SWIGLU)
        assert not verdict.ok and verdict.rel_error is not None and verdict.rel_error > 0.3
    # A kernel naming the plain parameters fits; one with an operand does not.
    assert operand_mismatch(("A", "B", "D"), SWIGLU) is None
    assert operand_mismatch(("A", "B", "D", "bias"), SWIGLU) is not None


# --- the Hopper space ------------------------------------------------------------------------------------


DECODE = Problem.parse("16x14336x4096", "bfloat16", "swiglu")
PREFILL = Problem.parse("4096x14336x4096", "float16", "swiglu")


def _rules(config: Config, problem: Problem) -> set[str]:
    return {v.rule for v in HOPPER.violations(config, problem)}


def test_the_rules_refuse_every_path_that_does_not_pair_whole_sums_in_a_thread() -> None:
    base = hopper_config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2)
    assert HOPPER.is_valid(base, PREFILL)
    refused = {
        "swiglu_register_epilogue": [hopper_config(128, 128, 64, 4, 2, True, persistent=True, epilogue="tma"),
                                     hopper_config(128, 128, 64, 4, 2, True, persistent=True, epilogue="tma_chunked")],
        "swiglu_whole_sums": [hopper_config(128, 128, 64, 4, 2, True, split_k=2),
                              hopper_config(128, 128, 64, 4, 2, True, split_k=2, split_k_reduce="serial"),
                              hopper_config(128, 128, 64, 4, 2, True, persistent=True, raster_group=8, stream_k=True)],
        "swiglu_pairs_in_thread": [hopper_config(128, 120, 64, 4, 2, True), hopper_config(128, 136, 64, 4, 2, True)],
    }  # fmt: skip
    for rule, configs in refused.items():
        for config in configs:
            plain = Problem(PREFILL.m, PREFILL.n, PREFILL.k, PREFILL.dtype)
            assert HOPPER.is_valid(config, plain), config.label()
            assert rule in _rules(config, PREFILL), (rule, config.label(), _rules(config, PREFILL))
    # swap_ab: B's rows are the kernel's rows, any blk_n (the problem's M) pairs in a thread.
    swapped = hopper_config(blk_m=64, blk_n=24, blk_k=128, stages=8, consumers=1, swap_ab=True)
    assert HOPPER.is_valid(swapped, Problem.parse("24x4096x4096", "float16", "swiglu"))
    # The kernel's shape is the GEMM's, 2N wide: 128 output columns are 2 tiles of 128 along N.
    clustered = hopper_config(128, 128, 64, 4, 2, True, persistent=True, cluster=2, cluster_dim="n")
    assert "cluster_divides_grid" in _rules(clustered, Problem.parse("256x128x256", "float16"))
    assert HOPPER.is_valid(clustered, Problem.parse("256x128x256", "float16", "swiglu"))


@pytest.mark.parametrize(
    "problem",
    [
        DECODE,
        PREFILL,
        Problem.parse("1x4096x4096", "float16", "swiglu"),
        Problem.parse("300x11008x4096", "bfloat16", "swiglu"),
        Problem.parse("3000x5000x2000", "float16", "swiglu"),
    ],
    ids=str,
)
def test_the_starts_and_the_search_find_valid_configs(problem: Problem) -> None:
    hopper = branch("sm_90a")
    starts = hopper.start_configs(problem)
    assert starts and all(HOPPER.is_valid(c, problem) for c in starts), [c.label() for c in starts]
    assert all(c.epilogue == "register" and c.split_k == 1 and not c.stream_k for c in starts)

    def score(configs: list[Config]) -> np.ndarray:
        return np.array([features(c, problem)[0] + random.random() for c in configs])

    ranked = rank_space(
        HOPPER,
        problem,
        score,
        seeds=starts,
        rng=random.Random(1),
        settings=SearchSettings(population=32, generations=1),
    )
    assert len(ranked) > 50 and all(HOPPER.is_valid(c, problem) for c, _ in ranked)
    assert HOPPER.sample_valid(problem, random.Random(3)) is not None


def test_the_model_and_the_shape_class_see_the_gemms_width() -> None:
    config = hopper_config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2)
    wide = Problem(4096, 28672, 4096, "float16")
    assert features(config, PREFILL) == features(config, wide)


# --- tirtune.gemm, the custom op, tirtune.nn.GateUp ------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_tirtune_gemm_with_swiglu_off_the_gpu(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(24, 64, generator=gen).to(dtype)
    gate, up = (torch.randn(40, 64, generator=gen) / 8).to(dtype), (torch.randn(40, 64, generator=gen) / 8).to(dtype)
    packed = tirtune.pack_gate_up(gate, up)
    want = reference(a, packed, SWIGLU)
    d = tirtune.gemm(a, packed, activation="swiglu")
    assert d.shape == (24, 40) and d.dtype == dtype
    tolerance = 1e-5 if dtype == torch.float32 else TOLERANCE[str(dtype).removeprefix("torch.")]
    assert float(torch.linalg.vector_norm(d.float() - want) / torch.linalg.vector_norm(want)) <= tolerance
    out = torch.empty(24, 40, dtype=dtype)
    assert tirtune.gemm(a, packed, activation="swiglu", out=out) is out and torch.equal(out, d)
    strided = torch.empty(40, 24, dtype=dtype).T  # an out that is a view: the same figures
    assert tirtune.gemm(a, packed, activation="swiglu", out=strided) is strided and torch.equal(strided, d)
    with torch.no_grad():
        torch.testing.assert_close(torch.ops.tirtune.gemm_swiglu(a, packed), d)


def test_tirtune_gemm_refuses_what_swiglu_does_not_take() -> None:
    a, packed = torch.randn(4, 16), torch.randn(32, 16)
    with pytest.raises(ValueError, match="stands alone"):
        tirtune.gemm(a, packed, bias=torch.randn(16), activation="swiglu")
    with pytest.raises(ValueError, match="the one fused activation is 'swiglu'"):
        tirtune.gemm(a, packed, activation="gelu")
    with pytest.raises(RuntimeError, match="a multiple of 16, got 24"):
        tirtune.gemm(a, torch.randn(24, 16), activation="swiglu")
    with pytest.raises(RuntimeError, match=r"out must be torch.float32 of shape \(4, 16\)"):
        tirtune.gemm(a, packed, activation="swiglu", out=torch.empty(4, 32))


def test_the_swiglu_fake_gives_shape_dtype_and_device() -> None:
    mode = FakeTensorMode()
    cuda = torch.device("cuda", 0)
    with mode:
        a = FakeTensor(mode, torch.empty(16, 4096, dtype=torch.bfloat16, device="meta"), cuda)
        b = FakeTensor(mode, torch.empty(28672, 4096, dtype=torch.bfloat16, device="meta"), cuda)
        d = torch.ops.tirtune.gemm_swiglu(a, b)
        assert (tuple(d.shape), d.dtype, d.device) == ((16, 14336), torch.bfloat16, cuda)
        torch.ops.tirtune.gemm_swiglu_out(
            a, b, FakeTensor(mode, torch.empty(16, 14336, dtype=torch.bfloat16, device="meta"), cuda)
        )
        with pytest.raises(RuntimeError, match="a multiple of 16"):
            torch.ops.tirtune.gemm_swiglu(
                a, FakeTensor(mode, torch.empty(28664, 4096, dtype=torch.bfloat16, device="meta"), cuda)
            )


def test_the_swiglu_opcheck() -> None:
    a = torch.randn(16, 64, requires_grad=True)
    b = torch.randn(32, 64, requires_grad=True)
    torch.library.opcheck(gemm_swiglu_op, (a, b))
    torch.library.opcheck(gemm_swiglu_out_op, (a.detach(), b.detach(), torch.empty(16, 16)))


def test_gate_up_equals_the_hf_mlp_traces_and_trains() -> None:
    torch.manual_seed(0)
    mlp = _hf_mlp(96, 48)
    layer = tirtune.nn.GateUp.from_mlp(mlp)
    assert layer.weight.shape == (96, 96) and layer.out_features == 48
    gate, up = layer.gate_up()
    assert torch.equal(gate, mlp.gate_proj.weight) and torch.equal(up, mlp.up_proj.weight)
    assert layer.weight.data_ptr() != mlp.gate_proj.weight.data_ptr()  # a packed copy
    x = torch.randn(3, 5, 96)
    torch.testing.assert_close(layer(x), mlp(x))
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), mlp(x))
    explained = torch._dynamo.explain(layer)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    layer(x1).square().sum().backward()
    mlp(x2).square().sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    grad_gate, grad_up = tirtune.unpack_gate_up(layer.weight.grad)
    torch.testing.assert_close(grad_gate, mlp.gate_proj.weight.grad)
    torch.testing.assert_close(grad_up, mlp.up_proj.weight.grad)


def test_gate_up_refuses_what_it_cannot_fuse() -> None:
    with pytest.raises(ValueError, match="must have no bias"):
        tirtune.nn.GateUp.from_linears(torch.nn.Linear(8, 16), torch.nn.Linear(8, 16))
    with pytest.raises(ValueError, match="a multiple of 8"):
        tirtune.nn.GateUp.from_linears(torch.nn.Linear(8, 12, bias=False), torch.nn.Linear(8, 12, bias=False))
    with pytest.raises(ValueError, match="needs gate_proj and up_proj"):
        tirtune.nn.GateUp.from_mlp(torch.nn.Linear(8, 16))
