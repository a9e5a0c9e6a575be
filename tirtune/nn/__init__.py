"""Layers that run their GEMMs through `tirtune.gemm`: `Linear`, a drop-in for `torch.nn.Linear`."""

from __future__ import annotations

import torch

from tirtune.dispatch.op import gemm, linear

__all__ = ["Linear"]


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
