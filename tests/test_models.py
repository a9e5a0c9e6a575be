"""The linear GEMMs of a decoder layer from a Hugging Face-style config (tirtune.space.models)."""

from __future__ import annotations

import pytest

from tirtune.core import Problem, SpaceError
from tirtune.space.models import (
    DecoderShape,
    layer_biases,
    layer_epilogues,
    layer_gemms,
    model_dtype,
    quantized_epilogues,
)

# Qwen2.5-7B's public config.json (the fields that matter)
QWEN25_7B = {"hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
             "torch_dtype": "bfloat16"}


def test_qwen25_7b_layer() -> None:
    shape = DecoderShape.from_config(QWEN25_7B)
    assert shape == DecoderShape(3584, 18944, 28, 4, 128)  # head_dim = hidden / heads when not given
    gemms = layer_gemms(shape, [16, 8192], model_dtype(QWEN25_7B))
    assert [(g.name, g.problem) for g in gemms[:4]] == [
        ("qkv", Problem(16, 4608, 3584, "bfloat16")),  # (28 + 2 * 4) * 128
        ("o", Problem(16, 3584, 3584, "bfloat16")),
        ("gate_up", Problem(16, 37888, 3584, "bfloat16")),
        ("down", Problem(16, 3584, 18944, "bfloat16")),
    ]
    assert [g.problem.m for g in gemms] == [16] * 4 + [8192] * 4


def test_explicit_head_dim_and_no_kv_heads() -> None:
    shape = DecoderShape.from_config({"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
                                      "head_dim": 96})
    assert shape.weights()["qkv"] == (3 * 32 * 96, 4096) and shape.weights()["o"] == (4096, 32 * 96)
    assert model_dtype({"torch_dtype": "float32"}) == "bfloat16"
    assert model_dtype({"torch_dtype": "float16"}) == "float16"


def test_a_config_without_the_sizes_is_refused() -> None:
    with pytest.raises(SpaceError, match="hidden_size"):
        DecoderShape.from_config({"hidden_size": 4096})


def test_a_fused_layer_carries_each_projections_epilogue() -> None:
    """layer_epilogues: qkv's bias where the model has one (Qwen2 always; attention_bias
    otherwise), the residual after o and down, swiglu into gate_up where the MLP's activation is
    SiLU (its problem named by the output's width); layer_gemms puts each on its problem, and
    without them every problem is plain."""
    qwen = {**QWEN25_7B, "model_type": "qwen2"}
    fused = layer_gemms(DecoderShape.from_config(qwen), [16], "bfloat16", layer_epilogues(qwen))
    assert [(g.name, str(g.problem.epilogue)) for g in fused] == [
        ("qkv", "bias"), ("o", "residual"), ("gate_up", "swiglu"), ("down", "residual")]
    gate_up = fused[2].problem
    assert (gate_up.n, gate_up.gemm_n) == (18944, 2 * 18944)
    gemma = {**QWEN25_7B, "model_type": "gemma2", "hidden_act": "gelu_pytorch_tanh"}
    assert layer_epilogues(gemma)["gate_up"] == "none"
    assert layer_epilogues({**QWEN25_7B, "model_type": "gemma"})["gate_up"] == "none"
    assert layer_epilogues({**QWEN25_7B, "hidden_act": "silu", "intermediate_size": 18945})["gate_up"] == "none"
    assert fused[1].problem == Problem(16, 3584, 3584, "bfloat16", "residual") != Problem(16, 3584, 3584, "bfloat16")
    llama = {**QWEN25_7B, "model_type": "llama", "attention_bias": False}
    assert layer_epilogues(llama)["qkv"] == "none"
    assert layer_epilogues({**llama, "attention_bias": True})["qkv"] == "bias"
    plain = layer_gemms(DecoderShape.from_config(qwen), [16], "bfloat16")
    assert all(g.problem.epilogue.is_none for g in plain)


def test_an_fp8_layer_adds_its_scaling_to_each_projection() -> None:
    """quantized_epilogues: every projection carries the scaling's ops beside its fused ones; SwiGLU,
    which no scaling combines with, is left out (gate_up tuned at its full width, the gate outside);
    a float16 model's projections write D in float16 (out_float16); an unknown scaling is refused."""
    qwen = {**QWEN25_7B, "model_type": "qwen2"}
    shape = DecoderShape.from_config(qwen)
    plain = dict.fromkeys(shape.weights(), "none")
    rowcol = layer_gemms(shape, [16], "float8_e4m3fn", quantized_epilogues(plain, "rowcol", "bfloat16"))
    assert [(g.name, str(g.problem.epilogue)) for g in rowcol] == [
        (name, "scale_row+scale_col") for name in ("qkv", "o", "gate_up", "down")]
    fused = quantized_epilogues(layer_epilogues(qwen), "block", "bfloat16")
    assert fused == {"qkv": "scale_a_block+scale_b_block+bias", "o": "scale_a_block+scale_b_block+residual",
                     "gate_up": "scale_a_block+scale_b_block", "down": "scale_a_block+scale_b_block+residual"}
    gate_up = layer_gemms(shape, [16], "float8_e4m3fn", fused)[2].problem
    assert (gate_up.n, gate_up.gemm_n) == (37888, 37888) and not gate_up.epilogue.gated
    half = quantized_epilogues(plain, "tensor", "float16")
    assert set(half.values()) == {"scale_a+scale_b+out_float16"}
    problem = layer_gemms(shape, [16], "float8_e4m3fn", half)[0].problem
    assert problem.epilogue.out_float16 and problem.epilogue == Problem.parse(
        "16x4608x3584", "float8_e4m3fn", "scale_a+scale_b+out_float16").epilogue
    with pytest.raises(SpaceError, match="unknown scaling"):
        quantized_epilogues(plain, "per-channel", "bfloat16")


@pytest.mark.parametrize("model_type, scaling", [("qwen2", "rowcol"), ("llama", "tensor"), ("qwen2", "block")])
def test_an_unfused_fp8_layer_tunes_the_problems_fp8linear_asks_for(model_type: str, scaling: str) -> None:
    """tune-model --scaling without --fused (layer_biases, then the scaling) names exactly the
    problems tirtune.nn.FP8Linear's layers ask the dispatcher for: qkv with the model's bias fused
    where it has one (Qwen2), every projection with the scaling's ops."""
    import torch

    from tirtune.dispatch import Dispatcher, use
    from tirtune.nn import FP8Linear

    config = {"model_type": model_type, "hidden_size": 256, "intermediate_size": 384, "num_attention_heads": 2,
              "num_key_value_heads": 1, "head_dim": 128}
    shape = DecoderShape.from_config(config)
    biases = layer_biases(config)
    assert (biases["qkv"] == "bias") == (model_type == "qwen2") and set(list(biases.values())[1:]) == {"none"}
    wanted = {g.problem for g in layer_gemms(shape, [8], "float8_e4m3fn", quantized_epilogues(biases, scaling,
                                                                                              "bfloat16"))}

    asked: list[Problem] = []

    class Finder:
        def best(self, problem: Problem, gpu_name: str) -> None:
            asked.append(problem)

    torch.manual_seed(0)
    with use(Dispatcher(Finder(), None, None, device_name=lambda _: "NVIDIA H200")):  # type: ignore[arg-type]
        for name, (n, k) in shape.weights().items():
            layer = torch.nn.Linear(k, n, bias=biases[name] == "bias", dtype=torch.bfloat16)
            FP8Linear.quantize(layer, scaling)(torch.randn(8, k, dtype=torch.bfloat16))
    assert set(asked) == wanted and len(asked) == 4
