"""The linear-layer GEMMs of a transformer decoder layer, from a Hugging Face-style config.

    qkv       x W_qkv^T   N = (heads + 2 kv_heads) * head_dim, K = hidden      (q, k, v fused)
    o         attn W_o^T  N = hidden,                          K = heads * head_dim
    gate_up   x W_gu^T    N = 2 * intermediate,                K = hidden      (gate, up fused)
    down      h W_d^T     N = hidden,                          K = intermediate

with M = the tokens of one forward pass. The weights are (N, K) row-major, as torch.nn.Linear
stores them, so each GEMM is tirtune's D = A @ B.T with A the activations and B the weight.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tirtune.core import Problem, SpaceError
from tirtune.core.epilogue import OUT_FLOAT16, EpilogueSpec, with_scaling

__all__ = [
    "DecoderShape",
    "LayerGemm",
    "layer_biases",
    "layer_epilogues",
    "layer_gemms",
    "model_dtype",
    "quantized_epilogues",
]


@dataclass(frozen=True, slots=True)
class DecoderShape:
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> DecoderShape:
        """From a config.json's `hidden_size`, `intermediate_size`, `num_attention_heads`,
        `num_key_value_heads` (default: the heads) and `head_dim` (default: hidden / heads)."""
        try:
            hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
            intermediate = int(config["intermediate_size"])
        except (KeyError, TypeError, ValueError) as e:
            raise SpaceError(f"a model config needs hidden_size, intermediate_size and num_attention_heads: {e}") from e
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or hidden // heads)
        if min(hidden, intermediate, heads, kv_heads, head_dim) < 1:
            raise SpaceError(f"a model config's sizes must be positive: {dict(config)!r:.200}")
        return cls(hidden, intermediate, heads, kv_heads, head_dim)

    def weights(self) -> dict[str, tuple[int, int]]:
        """Each fused projection's weight shape (N, K), in the order a layer runs them."""
        return {
            "qkv": ((self.heads + 2 * self.kv_heads) * self.head_dim, self.hidden),
            "o": (self.hidden, self.heads * self.head_dim),
            "gate_up": (2 * self.intermediate, self.hidden),
            "down": (self.hidden, self.intermediate),
        }


@dataclass(frozen=True, slots=True)
class LayerGemm:
    name: str
    problem: Problem


def model_dtype(config: Mapping[str, Any], default: str = "bfloat16") -> str:
    """The config's `torch_dtype` when it is one tirtune tunes, else `default`."""
    named = str(config.get("torch_dtype") or "")
    return named if named in ("float16", "bfloat16") else default


def layer_epilogues(config: Mapping[str, Any]) -> dict[str, str]:
    """The epilogue each projection can fuse in a pre-norm decoder layer (docs/design.md,
    "Epilogues"): qkv its bias where the model has one (`attention_bias` true, or a Qwen2 model,
    whose q, k and v projections always carry one), o and down the residual stream added after
    them; gate_up "swiglu" where the MLP's activation is SiLU (`hidden_act`, as HF configs name it;
    absent, HF's default "silu", except Gemma's GeGLU) and its width a multiple of 8, else none."""
    model_type = str(config.get("model_type") or "")
    act = config.get("hidden_act") or config.get("hidden_activation")
    act = str(act or ("gelu_pytorch_tanh" if model_type.startswith("gemma") else "silu"))
    width = DecoderShape.from_config(config).intermediate
    gate_up = "swiglu" if act in SILU_NAMES and width % 8 == 0 else "none"
    return {"qkv": layer_biases(config)["qkv"], "o": "residual", "gate_up": gate_up, "down": "residual"}


def layer_biases(config: Mapping[str, Any]) -> dict[str, str]:
    """Each projection's epilogue when only its own bias is fused, as a linear layer with a bias
    asks for it (`tirtune.nn.FP8Linear` passes the bias into its scaled GEMM): "bias" for qkv where
    the model has one (`attention_bias` true, or a Qwen2 model, whose q, k and v projections always
    carry one), else "none"."""
    qkv_bias = bool(config.get("attention_bias")) or str(config.get("model_type") or "") == "qwen2"
    return {"qkv": "bias" if qkv_bias else "none", "o": "none", "gate_up": "none", "down": "none"}


SILU_NAMES = ("silu", "swish")


def quantized_epilogues(epilogues: Mapping[str, str], scaling: str, layer_dtype: str) -> dict[str, str]:
    """Each projection's epilogue for an FP8 layer: `epilogues` (`layer_epilogues`, or "none" each)
    with the scaling's ops added, SwiGLU left out (no scaling combines with it: gate_up is then
    tuned as a scaled GEMM and its SiLU gate stays outside), and `out_float16` where the layer
    computes in float16 (D in the layer's dtype). SpaceError for an unknown scaling."""
    out = {}
    for name, text in epilogues.items():
        spec = EpilogueSpec.parse(text)
        spec = with_scaling(EpilogueSpec(()) if spec.gated else spec, scaling)
        if layer_dtype == "float16":
            spec = EpilogueSpec((*spec.ops, OUT_FLOAT16))
        out[name] = str(spec)
    return out


def layer_gemms(
    shape: DecoderShape, tokens: Sequence[int], dtype: str = "bfloat16", epilogues: Mapping[str, str] | None = None
) -> list[LayerGemm]:
    """Every linear GEMM of one decoder layer at each token count, tokens-major; with
    `epilogues` (`layer_epilogues`, `quantized_epilogues`), each projection's problem carries its
    fused epilogue."""
    specs = {name: EpilogueSpec.parse((epilogues or {}).get(name, "none")) for name in shape.weights()}
    # A gated epilogue's problem is named by its output's width: gate_up's N halves (B keeps both).
    widths = {name: (n // 2 if specs[name].gated else n, k) for name, (n, k) in shape.weights().items()}
    return [LayerGemm(name, Problem(m, n, k, dtype, specs[name])) for m in tokens for name, (n, k) in widths.items()]
