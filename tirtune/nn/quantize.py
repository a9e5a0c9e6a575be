"""Activation quantization to e4m3 for `FP8Linear`: one Triton kernel a call on the GPU (two for a
dynamic per-tensor scale), the values of the eager torch ops it replaces, bit for bit.

    x8, scale = quantize(x, mode, input_scale=None)

x is (M, K), fp16, bf16 or fp32. The modes are the scales `tirtune.scaled_gemm` takes for A:
- "static": the checkpoint's `input_scale` (one value): x8 = x / input_scale;
- "tensor": one scale over x, from its largest |x|;
- "token": one scale a row (M,), as "tensor" row by row (the "rowcol" scaling's A side);
- "block": one scale a row and 128-deep block of K, (M, ceil(K/128)), laid out as the kernels
  read it (the transpose of a contiguous (ceil(K/128), M): `scaled_gemm`'s `.T.contiguous()` of it
  is a view, not a copy).
A scale is the largest |x| times the fp32 reciprocal of 448 (the largest e4m3), clamped below at
1e-12 (an all-zero x quantizes to zeros); x / scale is clamped to +-448 before the cast (torch's
cast to e4m3 does not saturate).

Why kernels: the eager form is abs, amax, a cast, a multiplication, a clamp, a second cast, a
division, a clamp and the cast to e4m3, seven to nine launches a GEMM and as many passes over x,
where the GEMM after them is one launch; on an H100 they took a Llama-3-8B layer at 16 tokens from
0.115 to 0.187 ms (docs/perf-notes.md, "Measured on an H100: what a trial's measurement costs, and
activation quantization in one kernel"). Same values: the kernels divide with IEEE
round-to-nearest (`div_rn`, as torch's division of two tensors does, not Triton's default
approximate division), scale by the same multiplication and cast with round-to-nearest-even after
the same clamp, so x8 and the scales equal the eager ones bit for bit
(tests/test_fp8_quantize.py: under Triton's interpreter on the CPU, and on a GPU). The eager form
stays as `quantize_eager`, used where x is not on a GPU or Triton cannot load. Inputs are taken to
be finite.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from tirtune.core.epilogue import BLOCK_K

__all__ = [
    "E4M3_MAX",
    "MIN_SCALE",
    "MODES",
    "block_amax",
    "quantize",
    "quantize_eager",
    "spread_blocks",
    "triton_available",
]

E4M3_MAX = 448.0  # the largest finite float8_e4m3fn
MIN_SCALE = 1e-12
# A scale is its amax times the fp32 reciprocal of 448, not amax / 448: torch on a GPU divides a
# tensor by a Python number as a multiplication by its reciprocal, and on the CPU truly, so the
# division's bytes depend on the device; the multiplication's do not, and the kernels do the same.
_INV_MAX = 1.0 / E4M3_MAX
MODES = ("static", "tensor", "token", "block")
_CHUNK = 1024  # elements a program step of the element-wise kernels loads
_MAX_PARTS = 1024  # programs of a per-tensor reduction at most (each later program reads them all)


def _check(x: torch.Tensor, mode: str, input_scale: torch.Tensor | None) -> None:
    if mode not in MODES:
        raise ValueError(f"quantize: mode is one of {', '.join(MODES)}, got {mode!r}")
    if x.dim() != 2:
        raise ValueError(f"quantize: x must be 2-D (M, K), got shape {tuple(x.shape)}")
    if (mode == "static") != (input_scale is not None):
        raise ValueError("quantize: an input_scale is given with mode 'static' and only then")
    if input_scale is not None and input_scale.numel() != 1:
        raise ValueError(f"quantize: input_scale holds one value, got shape {tuple(input_scale.shape)}")


def block_amax(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The largest |x| of each rows x cols block of a 2-D x (the last blocks of a ragged x partial)."""
    m, k = x.shape
    padded = torch.nn.functional.pad(x.abs(), (0, -k % cols, 0, -m % rows))
    return padded.reshape(-(-m // rows), rows, -(-k // cols), cols).amax(dim=(1, 3))


def spread_blocks(scale: torch.Tensor, shape: torch.Size | tuple[int, ...], rows: int) -> torch.Tensor:
    """A scale of each rows x 128 block spread over every element of a 2-D tensor of `shape`."""
    m, k = shape
    return scale.repeat_interleave(rows, dim=0).repeat_interleave(BLOCK_K, dim=1)[:m, :k]


def quantize_eager(
    x: torch.Tensor, mode: str, input_scale: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The eager torch form of `quantize`: the reference the kernels match."""
    _check(x, mode, input_scale)
    xf = x.float()
    if mode == "block":
        scale = (block_amax(xf, 1, BLOCK_K) * _INV_MAX).clamp_min(MIN_SCALE)
        x8 = (xf / spread_blocks(scale, x.shape, 1)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        # Into a (ceil(K/128), M) buffer of its own, as the kernel writes them: for one row,
        # `scale.T.contiguous()` would return the (K/128, 1) view itself, with other strides.
        laid = torch.empty((scale.shape[1], scale.shape[0]), dtype=torch.float32, device=x.device)
        return x8, laid.copy_(scale.T).T
    if mode == "static":
        assert input_scale is not None
        scale = input_scale.to(torch.float32).reshape(1)
    elif mode == "token":
        scale = (xf.abs().amax(dim=1) * _INV_MAX).clamp_min(MIN_SCALE)
    else:
        scale = (xf.abs().amax() * _INV_MAX).clamp_min(MIN_SCALE).reshape(1)
    x8 = (xf / (scale[:, None] if mode == "token" else scale)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return x8, scale


@functools.cache
def triton_available() -> bool:
    """Whether Triton loads here (it ships with torch's CUDA wheels on Linux)."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure to load means the eager form
        return False
    return True


@functools.cache
def _kernels() -> Any:
    from tirtune.nn import quant_kernels

    return quant_kernels


def _quantize_kernels(
    x: torch.Tensor, mode: str, input_scale: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    k_ = _kernels()
    x = x.contiguous()
    m, k = x.shape
    out = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=x.device)
    q = out.view(torch.uint8)
    if mode == "block":
        kb = -(-k // BLOCK_K)
        scale_t = torch.empty((kb, m), dtype=torch.float32, device=x.device)
        if m and k:
            k_.quant_blocks[(m, kb)](x, q, scale_t, m, k, BLOCK=BLOCK_K, num_warps=1)
        return out, scale_t.T
    if mode == "token":
        scale = torch.empty((m,), dtype=torch.float32, device=x.device)
        if m and k:
            k_.quant_rows[(m,)](x, q, scale, k, CHUNK=_CHUNK)
        else:
            scale.fill_(MIN_SCALE)
        return out, scale
    n = m * k
    chunks = -(-n // _CHUNK)
    parts = max(1, min(_MAX_PARTS, chunks))
    per_part = -(-chunks // parts) * _CHUNK
    parts = max(1, -(-n // per_part))
    if mode == "static":
        assert input_scale is not None
        scale = input_scale.to(device=x.device, dtype=torch.float32).reshape(1).contiguous()
        if n:
            k_.quant_tensor[(parts,)](x, q, scale, scale, n, per_part, parts, STATIC=True, PARTS=1, CHUNK=_CHUNK)
        return out, scale
    scale = torch.empty((1,), dtype=torch.float32, device=x.device)
    if not n:
        return out, scale.fill_(MIN_SCALE)
    amax = torch.empty((parts,), dtype=torch.float32, device=x.device)
    k_.amax_parts[(parts,)](x, amax, n, per_part, CHUNK=_CHUNK)
    k_.quant_tensor[(parts,)](
        x, q, scale, amax, n, per_part, parts, STATIC=False, PARTS=max(16, 1 << (parts - 1).bit_length()), CHUNK=_CHUNK
    )
    return out, scale


def quantize(
    x: torch.Tensor, mode: str, input_scale: torch.Tensor | None = None, *, kernels: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) quantized to e4m3 with A's scales for `mode` (module docstring): (x8, scale).
    `kernels`: the Triton kernels (True), the eager ops (False) or, by default, the kernels where x
    is on a GPU and Triton loads."""
    _check(x, mode, input_scale)
    if kernels is None:
        kernels = x.is_cuda and triton_available()
    if not kernels:
        return quantize_eager(x, mode, input_scale)
    return _quantize_kernels(x, mode, input_scale)
