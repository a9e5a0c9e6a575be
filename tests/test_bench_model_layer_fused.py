"""bench/model_layer_fused.py without a GPU: the three forms of the layer compute the same thing
(tirtune.gemm falls back to torch off the GPU, the same math), and the report renders."""

from __future__ import annotations

import pytest

from bench.model_layer_fused import forms, layer_weights, to_markdown

TINY = {
    "model_type": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
}


@pytest.mark.parametrize("config", [TINY, {**TINY, "model_type": "llama"}])
def test_the_eager_and_tirtune_forms_match_the_float32_layer(config: dict[str, object]) -> None:
    import torch

    w = layer_weights(config, torch.bfloat16, torch.device("cpu"))
    assert ("qkv_bias" in w) == (config["model_type"] == "qwen2")
    f = forms(w)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 64, generator=gen).to(torch.bfloat16)
    attn = torch.randn(5, 64, generator=gen).to(torch.bfloat16)
    ref = f["reference"](x, attn)
    for form in ("eager", "tirtune"):
        out = f[form](x, attn)
        assert [tuple(o.shape) for o in out] == [(5, 128), (5, 64)]
        for o, r in zip(out, ref, strict=True):
            assert float((o.float() - r).norm() / r.norm()) < 8e-3, form
    # A wrong pairing of gate and up would not pass: swapping them moves the output far.
    wrong = forms({**w, "gate": w["up"], "up": w["gate"]})["tirtune"](x, attn)[1]
    assert float((wrong.float() - ref[1]).norm() / ref[1].norm()) > 0.05


def test_the_report_renders_every_case() -> None:
    case = {
        "model": "Qwen2.5-7B",
        "dtype": "bfloat16",
        "tokens": 16,
        "eager_ms": 0.2,
        "compile_ms": None,
        "tirtune_ms": 0.17,
        "speedup_vs_eager": 1.18,
        "speedup_vs_compile": None,
        "max_rel_error": 2e-3,
        "gemms": [
            {"name": "gate_up", "problem": "16x18944x3584", "epilogue": "swiglu", "kernel": "64x16x128 s4 c1 ws swap"}
        ],
    }
    result = {
        "date": "2026-12-03T10:00:00+00:00",
        "gpu": "NVIDIA H200",
        "driver": "580",
        "cuda": "13.0",
        "torch": "2.11",
        "template_version": "hopper-gemm/5",
        "timing": "CUDA events",
        "cases": [case],
    }
    text = to_markdown(result)
    assert "| Qwen2.5-7B | bfloat16 | 16 | 0.2000 | - | 0.1700 | 1.180x | - | 2.0e-03 | - |" in text
    both = {"max-autotune": 0.6, "max-autotune-no-cudagraphs": 0.25}
    compiled = {**case, "compile_ms": 0.25, "compile_mode": "max-autotune-no-cudagraphs", "compile_ms_by_mode": both,
                "speedup_vs_compile": 0.25 / 0.17}
    text = to_markdown({**result, "cases": [compiled]})
    assert ("| 0.2000 | 0.2500 | 0.1700 | 1.180x | 1.471x | 2.0e-03 | max-autotune-no-cudagraphs "
            "(max-autotune 0.6000, max-autotune-no-cudagraphs 0.2500) |") in text, text
    assert "| 16x18944x3584 | swiglu | 64x16x128 s4 c1 ws swap |" in text
