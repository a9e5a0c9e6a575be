"""Layers that run their GEMMs through `tirtune.gemm`: `Linear`, a drop-in for `torch.nn.Linear`,
`GateUp`, a gated MLP's up-projection silu(gate_proj(x)) * up_proj(x) in one swiglu GEMM, and
`FP8Linear`, a linear layer of an e4m3-quantized checkpoint through `tirtune.scaled_gemm`."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from tirtune.core.epilogue import BLOCK_K
from tirtune.dispatch.op import gemm, linear, pack_gate_up, unpack_gate_up
from tirtune.dispatch.scaled import scaled_gemm
from tirtune.nn.quantize import E4M3_MAX, MIN_SCALE, block_amax, quantize, spread_blocks

__all__ = ["FP8Linear", "GateUp", "Linear", "pack_gate_up", "unpack_gate_up"]


class Linear(torch.nn.Linear):
    """`torch.nn.Linear` (same parameters, state_dict, initialisation and repr) whose forward is
    y = x W^T (+ bias) by `tirtune.gemm`: the tuned kernel of (tokens, out_features, in_features)
    on this GPU, or torch.mm where nobody tuned it. With a bias, the kernel and an add only where
    its measured lead over cuBLAS pays for the add; else torch.addmm (cuBLAS adds the bias inside
    its GEMM): `tirtune.dispatch.linear`, or the tuned kernel with the bias fused where there is one.

    `forward(input, residual)` adds `residual` (the output's shape, dtype and device) too:
    y = x W^T (+ bias) + residual, both in the kernel's epilogue where a kernel with them fused was
    tuned, else cuBLAS and the adds in eager torch (`tirtune.gemm`)."""

    def forward(self, input: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        x = input.reshape(-1, self.in_features)
        x = x if x.is_contiguous() else x.contiguous()
        if residual is None:
            y = linear(x, self.weight, self.bias)
        else:
            shape = (*input.shape[:-1], self.out_features)
            if tuple(residual.shape) != shape:
                raise ValueError(
                    f"tirtune.nn.Linear: the residual must have the output's shape {shape}, got {tuple(residual.shape)}"
                )
            r = residual.reshape(-1, self.out_features)
            y = gemm(x, self.weight, bias=self.bias, residual=r if r.is_contiguous() else r.contiguous())
        return y.reshape(*input.shape[:-1], self.out_features)

    @classmethod
    def from_torch(cls, layer: torch.nn.Linear) -> Linear:
        """A tirtune Linear sharing `layer`'s parameters (no copy)."""
        made = cls.__new__(cls)
        torch.nn.Module.__init__(made)
        made.in_features, made.out_features = layer.in_features, layer.out_features
        made.weight = layer.weight
        made.bias = layer.bias
        return made


class GateUp(torch.nn.Module):
    """A gated MLP's up-projection, silu(gate_proj(x)) * up_proj(x) (the act_fn(gate_proj(x)) *
    up_proj(x) of a Hugging Face Llama/Qwen/Mistral MLP with SiLU), as one GEMM with the swiglu
    epilogue: `tirtune.gemm(x, weight, activation="swiglu")`, the tuned kernel of (tokens,
    intermediate_size, hidden_size) epilogue swiglu where there is one, else one cuBLAS GEMM over
    the packed weight and silu, multiply in eager torch (the same math: off the GPU too).

    It holds one weight, `weight` (2N, K): the two (N, K) weights packed (`pack_gate_up`, rows
    interleaved in groups of 8), a copy made by `from_mlp` / `from_linears`; it does not share the
    source layers' parameters, so the model holds the gate and up weights once, in that layout
    (drop the source layers, or keep both copies in memory). `gate_up()` gives (gate, up) back."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        rows, self.in_features = weight.shape
        self.out_features = rows // 2
        if rows % 16:
            raise ValueError(f"GateUp: the packed weight has 2N rows, N a multiple of 8; got {rows}")
        self.weight = torch.nn.Parameter(weight, requires_grad=weight.requires_grad)

    @classmethod
    def from_linears(cls, gate_proj: torch.nn.Linear, up_proj: torch.nn.Linear) -> GateUp:
        """From the two bias-free projections (N outputs each, N a multiple of 8): packed, a copy."""
        if gate_proj.bias is not None or up_proj.bias is not None:
            raise ValueError("GateUp: gate_proj and up_proj must have no bias (the swiglu epilogue adds none)")
        with torch.no_grad():
            packed = pack_gate_up(gate_proj.weight, up_proj.weight)
        return cls(packed.requires_grad_(gate_proj.weight.requires_grad))

    @classmethod
    def from_mlp(cls, mlp: torch.nn.Module) -> GateUp:
        """From a Hugging Face style MLP's `gate_proj` and `up_proj` (whose `act_fn` is SiLU)."""
        gate, up = getattr(mlp, "gate_proj", None), getattr(mlp, "up_proj", None)
        if not isinstance(gate, torch.nn.Linear) or not isinstance(up, torch.nn.Linear):
            raise ValueError("GateUp.from_mlp: the module needs gate_proj and up_proj, both torch.nn.Linear")
        return cls.from_linears(gate, up)

    def gate_up(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The (gate, up) weights, each (N, K), unpacked (copies)."""
        gate, up = unpack_gate_up(self.weight.detach())
        return gate.contiguous(), up.contiguous()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = input.reshape(-1, self.in_features)
        x = x if x.is_contiguous() else x.contiguous()
        y = gemm(x, self.weight, activation="swiglu")
        return y.reshape(*input.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        k, n = self.in_features, self.out_features
        return f"in_features={k}, out_features={n}, weight=({2 * n}, {k}) packed"


class FP8Linear(torch.nn.Module):
    """y = x W^T (+ bias) with W in e4m3 and its scales as a quantized checkpoint stores them (the
    layout vLLM and compressed-tensors FP8 checkpoints share): `weight` (N, K) float8_e4m3fn,
    `weight_scale` fp32, one value (per tensor), N ((N, 1) or (N,): per output channel) or
    (ceil(N/128), ceil(K/128)) (per 128x128 block, DeepSeek-V3's `weight_scale_inv`), `input_scale`
    fp32 one value (static activation scaling) or absent (dynamic), `bias` (N,) or absent; W's
    real values are weight * weight_scale (each block's scale over its block). `out_dtype`, y's
    dtype, is torch.bfloat16 (the default) or torch.float16 (the problem's epilogue then holds
    out_float16: its own tuned entry); the bias is kept in it.

    forward(x) quantizes x ((..., K), any float dtype) to e4m3 (`tirtune.nn.quantize`: one Triton
    kernel on a GPU, two for a dynamic per-tensor scale, the eager ops' values): x / input_scale when
    the checkpoint has one; else, with block weight scales, one scale per token and 128-deep block
    of K (the block's largest |x| over 448), with a per-channel weight scale one scale per token,
    and with a per-tensor one a single scale over x. Then `tirtune.scaled_gemm` multiplies: the tuned
    kernel of (tokens, N, K) with that scaling ("block", "rowcol": a scale per token and per
    channel; "tensor": one each) where one was tuned, else torch's own (`tirtune.scaled_gemm`).
    y is of `out_dtype`."""

    def __init__(
        self,
        weight: torch.Tensor,
        weight_scale: torch.Tensor,
        bias: torch.Tensor | None = None,
        input_scale: torch.Tensor | None = None,
        out_dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        super().__init__()
        if out_dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"FP8Linear: out_dtype must be torch.bfloat16 or torch.float16, got {out_dtype}")
        self.out_dtype = out_dtype
        if weight.dim() != 2 or weight.dtype != torch.float8_e4m3fn:
            raise ValueError(
                f"FP8Linear: weight must be 2-D float8_e4m3fn (N, K), got {weight.dtype} {tuple(weight.shape)}"
            )
        self.out_features, self.in_features = weight.shape
        scale = weight_scale.to(torch.float32)
        blocks = (-(-self.out_features // BLOCK_K), -(-self.in_features // BLOCK_K))
        self.blocked = scale.dim() == 2 and tuple(scale.shape) == blocks and blocks[1] > 1
        if not self.blocked and scale.numel() not in (1, self.out_features):
            raise ValueError(
                f"FP8Linear: weight_scale holds one value, N = {self.out_features} or (ceil(N/128), ceil(K/128)) = "
                f"{blocks} (128x128 blocks), got shape {tuple(scale.shape)}"
            )
        if self.blocked and input_scale is not None:
            raise ValueError("FP8Linear: block weight scales take dynamic activation scales (no input_scale)")
        if input_scale is not None and input_scale.numel() != 1:
            raise ValueError(f"FP8Linear: input_scale holds one value, got shape {tuple(input_scale.shape)}")
        if bias is not None and tuple(bias.shape) != (self.out_features,):
            raise ValueError(f"FP8Linear: bias must have N = {self.out_features} values, got {tuple(bias.shape)}")
        per_channel = scale.numel() > 1
        self.weight: torch.Tensor
        self.weight_scale: torch.Tensor
        self.input_scale: torch.Tensor | None
        self.bias: torch.Tensor | None
        self.register_buffer("weight", weight)
        shape = blocks if self.blocked else (self.out_features if per_channel else 1,)
        self.register_buffer("weight_scale", scale.reshape(shape).contiguous())
        self.register_buffer("input_scale", None if input_scale is None else input_scale.to(torch.float32).reshape(1))
        self.register_buffer("bias", None if bias is None else bias.to(out_dtype).contiguous())

    @property
    def scaling(self) -> str:
        """The tuned problem's scaling this layer asks for: "block" (128x128 weight blocks, 1x128
        activation blocks), "rowcol" (a per-channel weight scale, per-token activations) or "tensor"
        (one scale each)."""
        if self.blocked:
            return "block"
        return "rowcol" if self.weight_scale.numel() > 1 and self.input_scale is None else "tensor"

    @classmethod
    def from_state_dict(
        cls, state: Mapping[str, torch.Tensor], prefix: str = "", out_dtype: torch.dtype = torch.bfloat16
    ) -> FP8Linear:
        """From a checkpoint's tensors `{prefix}weight`, `{prefix}weight_scale` (or, as DeepSeek-V3's
        block-quantized checkpoints name it, `{prefix}weight_scale_inv`) and, where present,
        `{prefix}input_scale` and `{prefix}bias`; y in `out_dtype`."""
        scale_name = next((prefix + k for k in ("weight_scale", "weight_scale_inv") if prefix + k in state), None)
        if prefix + "weight" not in state or scale_name is None:
            missing = [prefix + "weight"] if prefix + "weight" not in state else []
            missing += [prefix + "weight_scale"] if scale_name is None else []
            raise ValueError(f"FP8Linear.from_state_dict: no {', '.join(missing)} in the checkpoint")
        return cls(
            state[f"{prefix}weight"],
            state[scale_name],
            state.get(f"{prefix}bias"),
            state.get(f"{prefix}input_scale"),
            out_dtype,
        )

    @classmethod
    def quantize(cls, layer: torch.nn.Linear, scaling: str = "rowcol") -> FP8Linear:
        """A 16-bit `torch.nn.Linear` quantized to e4m3: one weight scale per output channel
        ("rowcol"), one for the whole weight ("tensor") or one per 128x128 block ("block"), each its
        largest |w| over 448; dynamic activation scales; y in the layer's dtype where it is fp16,
        else bf16."""
        if scaling not in ("rowcol", "tensor", "block"):
            raise ValueError(f"FP8Linear.quantize: scaling is 'rowcol', 'tensor' or 'block', got {scaling!r}")
        with torch.no_grad():
            w = layer.weight.float()
            bias = None if layer.bias is None else layer.bias.detach()
            out_dtype = torch.float16 if layer.weight.dtype == torch.float16 else torch.bfloat16
            if scaling == "block":
                amax = block_amax(w, BLOCK_K, BLOCK_K)
                scale = (amax / E4M3_MAX).clamp_min(MIN_SCALE)
                q = (w / spread_blocks(scale, w.shape, BLOCK_K)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
                return cls(q, scale, bias, out_dtype=out_dtype)
            amax = w.abs().amax(dim=1, keepdim=True) if scaling == "rowcol" else w.abs().amax().reshape(1, 1)
            scale = (amax / E4M3_MAX).clamp_min(MIN_SCALE)
            q = (w / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        return cls(q, scale.reshape(-1), bias, out_dtype=out_dtype)

    @property
    def activation_mode(self) -> str:
        """How forward quantizes x (`tirtune.nn.quantize` modes): "block" (1x128 blocks), "static"
        (the checkpoint's input_scale), "token" (a scale per token) or "tensor" (one scale)."""
        if self.blocked:
            return "block"
        if self.input_scale is not None:
            return "static"
        return "token" if self.weight_scale.numel() > 1 else "tensor"

    # how forward quantizes x: the kernels (True), the eager ops (False), or by default the kernels
    # where x is on a GPU and Triton loads (`tirtune.nn.quantize.quantize`)
    quantize_kernels: bool | None = None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = input.reshape(-1, self.in_features)
        x8, scale_x = quantize(x, self.activation_mode, self.input_scale, kernels=self.quantize_kernels)
        y = scaled_gemm(x8, self.weight, scale_x, self.weight_scale, bias=self.bias, out_dtype=self.out_dtype)
        return y.reshape(*input.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, scaling={self.scaling}, "
            f"out_dtype={self.out_dtype}"
        )
