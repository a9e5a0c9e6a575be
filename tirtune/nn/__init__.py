"""Layers that run their GEMMs through `tirtune.gemm`: `Linear`, a drop-in for `torch.nn.Linear`."""

from __future__ import annotations

import torch

from tirtune.dispatch.op import linear

__all__ = ["Linear"]


class Linear(torch.nn.Linear):
    """`torch.nn.Linear` (same parameters, state_dict, initialisation and repr) whose forward is
    y = x W^T (+ bias) by `tirtune.gemm`: the tuned kernel of (tokens, out_features, in_features)
    on this GPU, or torch.mm where nobody tuned it. With a bias, the kernel and an add only where
    its measured lead over cuBLAS pays for the add; else torch.addmm (cuBLAS adds the bias inside
    its GEMM): `tirtune.dispatch.linear`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = input.reshape(-1, self.in_features)
        y = linear(x if x.is_contiguous() else x.contiguous(), self.weight, self.bias)
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
