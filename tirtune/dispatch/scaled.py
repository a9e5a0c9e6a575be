"""`tirtune.scaled_gemm` and `torch.ops.tirtune.scaled_gemm`: an FP8 (e4m3) GEMM with the scales
that dequantize it, as a model quantized to e4m3 runs its linear layers.

    scaled_gemm(a, b, scale_a, scale_b, bias?, out_dtype) -> d
        D = (A @ B.T) * scale_a * scale_b (+ bias), A (M, K) and B (N, K) e4m3, fp32 scales, D bf16
        or fp16 (with block scales, each 128-deep k block's product scaled by its own)

The scales' shapes name the scaling (`scaling_operands`), as torch._scaled_mm reads them: one value
(a 0-d or one-element tensor) is a per-tensor scale, M values for A ((M,) or (M, 1)) a per-token
one, N values for B ((N,) or (1, N) or (N, 1)) a per-channel one, and A's (M, ceil(K/128)) with B's
(ceil(N/128), ceil(K/128)) DeepSeek-V3's block scales (1x128 of A, 128x128 of B; where K <= 128
they are the per-token and per-tensor ones). Each is an epilogue op of the problem
(core/epilogue.py: scale_a, scale_b, scale_row, scale_col, scale_a_block, scale_b_block), so a
problem tuned with `tirtune tune --dtype fp8 --scaling tensor` (scale_a+scale_b) serves a call with
two one-value scales, `--scaling rowcol` (scale_row+scale_col) one with a scale per row and per
column, and `--scaling block` one with block scales.
Where no tuned kernel serves, torch._scaled_mm runs it (`runner.inputs.baseline`: the figure a
tuned kernel's ratio was measured against; with block scales torch._scaled_mm where this torch
takes them, else the Triton kernel of `runner.triton_fp8`). D is bf16 unless `out_dtype` is
torch.float16: the problem's epilogue then holds out_float16 (core/epilogue.py), its own tuned
entry, which starts from the bf16 one's measurements (`tuner.start`). The bias is N values of D's
dtype. There is no autograd: FP8 here is for inference.
"""

from __future__ import annotations

import torch

from tirtune.core.epilogue import BLOCK_K
from tirtune.dispatch import default

__all__ = ["OUT_DTYPES", "scaled_gemm", "scaled_gemm_op", "scaling_operands"]

_E4M3 = torch.float8_e4m3fn
# D's dtypes: bf16 (the default) or fp16 (the epilogue op out_float16).
OUT_DTYPES = (torch.bfloat16, torch.float16)


def scaling_operands(
    m: int, n: int, scale_a: torch.Tensor, scale_b: torch.Tensor, k: int | None = None
) -> dict[str, torch.Tensor]:
    """The epilogue operands by op name of A's and B's scales: one value each is scale_a / scale_b
    (shape (1,)), M values for A scale_row (M,), N values for B scale_col (N,), and with K given,
    A's (M, KB) and B's (NB, KB) block scales (KB = ceil(K/128) > 1, NB = ceil(N/128))
    scale_a_block (KB, M) and scale_b_block (NB, KB), the layouts core/epilogue.py gives them; fp32,
    contiguous. ValueError for any other shape or dtype."""
    out: dict[str, torch.Tensor] = {}
    if k is not None:
        kb, nb = -(-k // BLOCK_K), -(-n // BLOCK_K)
        if kb > 1 and scale_a.dim() == 2 and scale_b.dim() == 2 and tuple(scale_b.shape) == (nb, kb):
            for which, scale in (("A", scale_a), ("B", scale_b)):
                if scale.dtype != torch.float32:
                    raise ValueError(f"tirtune.scaled_gemm: {which}'s scale must be float32, got {scale.dtype}")
            if tuple(scale_a.shape) != (m, kb):
                raise ValueError(
                    f"tirtune.scaled_gemm: with B's block scales {tuple(scale_b.shape)}, A's are (M, ceil(K/128)) = "
                    f"{(m, kb)}, got {tuple(scale_a.shape)}"
                )
            return {"scale_a_block": scale_a.T.contiguous(), "scale_b_block": scale_b.contiguous()}
    sides = (("A", scale_a, m, "scale_a", "scale_row"), ("B", scale_b, n, "scale_b", "scale_col"))
    for which, scale, extent, one, many in sides:
        if scale.dtype != torch.float32:
            raise ValueError(f"tirtune.scaled_gemm: {which}'s scale must be float32, got {scale.dtype}")
        if scale.dim() <= 2 and scale.numel() == 1:
            out[one] = scale.reshape(1).contiguous()
        elif scale.dim() <= 2 and scale.numel() == extent and max(scale.shape) == extent:
            out[many] = scale.reshape(extent).contiguous()
        else:
            want = "M" if which == "A" else "N"
            raise ValueError(
                f"tirtune.scaled_gemm: {which}'s scale must hold one value (per tensor) or {want} = {extent} "
                f"(per {'token' if which == 'A' else 'channel'}), got shape {tuple(scale.shape)}"
            )
    return out


def _check(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype) -> None:
    torch._check(
        a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[1],
        lambda: f"tirtune.scaled_gemm: A (M, K) and B (N, K) with one K, got {tuple(a.shape)} and {tuple(b.shape)}",
    )
    torch._check(
        a.dtype == _E4M3 and b.dtype == _E4M3,
        lambda: f"tirtune.scaled_gemm: A and B must be float8_e4m3fn, got {a.dtype} and {b.dtype}",
    )
    torch._check(a.device == b.device, lambda: f"tirtune.scaled_gemm: A is on {a.device}, B on {b.device}")
    torch._check(
        out_dtype in OUT_DTYPES,
        lambda: (
            f"tirtune.scaled_gemm: out_dtype must be torch.bfloat16 or torch.float16 (the kernels' D), got {out_dtype}"
        ),
    )
    if bias is not None:
        torch._check(
            bias.dim() == 1 and bias.shape[0] == b.shape[0] and bias.dtype == out_dtype,
            lambda: (
                f"tirtune.scaled_gemm: the bias must be {out_dtype} (D's dtype) of N = {b.shape[0]} values, got "
                f"{bias.dtype} {tuple(bias.shape)}"
            ),
        )


@torch.library.custom_op("tirtune::scaled_gemm", mutates_args=())
def scaled_gemm_op(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    _check(a, b, bias, out_dtype)
    scales = scaling_operands(a.shape[0], b.shape[0], scale_a, scale_b, a.shape[1])
    return default.current().scaled_gemm(a, b, scales, bias, out_dtype=out_dtype)  # type: ignore[no-any-return]


@scaled_gemm_op.register_fake
def _(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    _check(a, b, bias, out_dtype)
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


def scaled_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """D = (A @ B.T) * scale_a * scale_b (+ bias) in `out_dtype`, bf16 or fp16 (module docstring),
    by the tuned kernel of the problem with these scalings, else torch._scaled_mm. Eagerly on plain
    tensors it goes to the dispatcher straight (a custom op's dispatch costs about 100 us of host
    time); under torch.compile or a fake-tensor trace, through `torch.ops.tirtune.scaled_gemm`."""
    if torch.compiler.is_compiling() or any(
        type(t) is not torch.Tensor for t in (a, b, scale_a, scale_b) + ((bias,) if bias is not None else ())
    ):  # the op checks its arguments, in its fake too
        return torch.ops.tirtune.scaled_gemm(a, b, scale_a, scale_b, bias, out_dtype)  # type: ignore[no-any-return]
    _check(a, b, bias, out_dtype)
    scales = scaling_operands(a.shape[0], b.shape[0], scale_a, scale_b, a.shape[1])
    return default.current().scaled_gemm(a, b, scales, bias, out_dtype=out_dtype)  # type: ignore[no-any-return]
