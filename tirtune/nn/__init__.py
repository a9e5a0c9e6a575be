"""Layers that run their GEMMs through `tirtune.gemm`: `Linear`, a drop-in for `torch.nn.Linear`, and
`GateUp`, a gated MLP's up-projection silu(gate_proj(x)) * up_proj(x) in one swiglu GEMM."""

from __future__ import annotations

import torch

from tirtune.dispatch.op import gemm, linear, pack_gate_up, unpack_gate_up

__all__ = ["GateUp", "Linear", "pack_gate_up", "unpack_gate_up"]


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
