"""The correctness check on FP8 problems (e4m3 A and B, a bf16 D), on CPU tensors: the inputs are
e4m3 exact in the float32 reference, D is poisoned and judged as bf16, and the bound grows with K
as the FP8 accumulation's truncations do (runner.verify.tolerance), while a skipped k-tile, a
dropped scale or a stale output stays wrong."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tirtune.core.epilogue import EpilogueSpec
from tirtune.core.problem import FP8
from tirtune.runner.inputs import draw_inputs
from tirtune.runner.verify import FP8_ACCUMULATION_PER_K, TOLERANCE, reference, tolerance, verify

torch = pytest.importorskip("torch")

ROWCOL = EpilogueSpec.parse("scale_row+scale_col")


def _truncated(x: Any, bits: int = 13) -> Any:
    """x (float32) with its mantissa cut to `bits` bits, towards zero: the FP8 accumulator's."""
    as_int = x.contiguous().view(torch.int32)
    return (as_int & ~((1 << (23 - bits)) - 1)).view(torch.float32)


def _fp8_kernel(a: Any, b: Any, d: Any, *, k_step: int = 32, skip: int | None = None, **ops: Any) -> None:
    """What an FP8 kernel computes, as the Hopper tensor cores do it: each k32 step's products
    added into an accumulator truncated to 13 mantissa bits, then the scales, then bf16."""
    acc = torch.zeros(a.shape[0], b.shape[0])
    for k0 in range(0, a.shape[1], k_step):
        if k0 == skip:
            continue
        acc = _truncated(acc + a[:, k0 : k0 + k_step].float() @ b[:, k0 : k0 + k_step].float().T)
    if "scale_row" in ops:
        acc = acc * ops["scale_row"][:, None]
    if "scale_col" in ops:
        acc = acc * ops["scale_col"][None, :]
    d.copy_(acc.to(d.dtype))


def test_fp8_inputs_are_e4m3_with_fp32_scales_and_a_plain_draw_is_unchanged() -> None:
    fp8 = draw_inputs(torch, 40, 24, 256, FP8, ROWCOL, device="cpu", seed=5)
    assert fp8.a.dtype == torch.float8_e4m3fn and fp8.b.dtype == torch.float8_e4m3fn
    assert {k: v.dtype for k, v in fp8.operands.items()} == {"scale_row": torch.float32, "scale_col": torch.float32}
    assert fp8.a.float().std() > 0.5 and fp8.a.float().abs().max() < 448
    bias = draw_inputs(torch, 40, 24, 256, FP8, EpilogueSpec.parse("bias"), device="cpu", seed=5)
    assert bias.operands["bias"].dtype == torch.bfloat16  # D's dtype, not e4m3
    plain = draw_inputs(torch, 40, 24, 256, "float16", EpilogueSpec.parse("none"), device="cpu", seed=5)
    gen = torch.Generator().manual_seed(5)
    assert torch.equal(plain.a, torch.randn(40, 256, dtype=torch.float16, generator=gen))


def test_the_fp8_bound_is_bf16s_plus_the_accumulation_over_k() -> None:
    assert tolerance("float16", 4096) == TOLERANCE["float16"]
    assert tolerance(FP8, 4096) == pytest.approx(TOLERANCE["bfloat16"] + 4096 * FP8_ACCUMULATION_PER_K)
    assert tolerance(FP8, 16384) > tolerance(FP8, 4096) > TOLERANCE["bfloat16"]
    # A skipped 128-deep k-tile (sqrt(128 / K) of D's norm) stays past the bound up to K = 16384.
    for k in (1024, 4096, 16384):
        assert math.sqrt(128 / k) > 2 * tolerance(FP8, k)


@pytest.mark.parametrize("k", [512, 2048])
def test_an_fp8_kernel_with_truncated_accumulation_passes_and_d_is_bf16(k: int) -> None:
    inputs = draw_inputs(torch, 64, 48, k, FP8, ROWCOL, device="cpu", seed=k)
    seen: list[Any] = []

    def run(d: Any) -> None:
        seen.append(d.dtype)
        _fp8_kernel(inputs.a, inputs.b, d, **inputs.operands)

    verdict = verify(run, inputs.a, inputs.b, FP8, epilogue=ROWCOL, operands=inputs.operands)
    assert verdict.ok, verdict.message
    assert seen == [torch.bfloat16, torch.bfloat16]
    assert verdict.rel_error is not None and verdict.rel_error < tolerance(FP8, k) / 2


def test_an_fp8_kernel_that_skips_a_k_tile_or_a_scale_is_wrong() -> None:
    k = 1024
    inputs = draw_inputs(torch, 64, 48, k, FP8, ROWCOL, device="cpu", seed=9)
    ops = inputs.operands
    skipped = verify(
        lambda d: _fp8_kernel(inputs.a, inputs.b, d, skip=512, **ops), inputs.a, inputs.b, FP8, epilogue=ROWCOL, operands=ops
    )
    assert not skipped.ok and "relative error" in skipped.message
    unscaled = verify(
        lambda d: _fp8_kernel(inputs.a, inputs.b, d, scale_row=ops["scale_row"]),
        inputs.a,
        inputs.b,
        FP8,
        epilogue=ROWCOL,
        operands=ops,
    )
    assert not unscaled.ok and unscaled.rel_error is not None and unscaled.rel_error > 0.5


def test_the_fp8_reference_takes_the_e4m3_operands_as_float32() -> None:
    inputs = draw_inputs(torch, 8, 16, 64, FP8, ROWCOL, device="cpu", seed=2)
    ref = reference(inputs.a, inputs.b, ROWCOL, **inputs.operands)
    want = (inputs.a.float() @ inputs.b.float().T) * inputs.operands["scale_row"][:, None] * inputs.operands["scale_col"]
    assert ref.dtype == torch.float32 and torch.allclose(ref, want)


@pytest.mark.parametrize(
    ("epilogue", "n", "label"),
    [
        ("none", 48, "torch._scaled_mm(tensor scale 1)"),
        ("scale_row+scale_col", 48, "torch._scaled_mm(rowwise scales)"),
        ("scale_row+scale_col+bias", 40, "torch._scaled_mm(rowwise scales, bias), N padded to 16, D copied out"),
        ("scale_row+scale_col+residual", 40, "torch._scaled_mm(rowwise scales), N padded to 16, D copied out + residual"),
    ],
)
def test_the_fp8_baseline_is_scaled_mm_with_the_problems_scales_into_d(epilogue: str, n: int, label: str) -> None:
    """torch._scaled_mm with the rowwise scales (a tensor scale of 1 without them), bias in its
    epilogue, a residual after; an N off 16 padded, every element of D written and right."""
    from tirtune.runner.inputs import baseline, baseline_label

    spec = EpilogueSpec.parse(epilogue)
    inputs = draw_inputs(torch, 32, n, 64, FP8, spec, device="cpu", seed=n)
    d = torch.full((32, n), float("nan"), dtype=torch.bfloat16)
    baseline(torch, inputs, d)()
    ref = reference(inputs.a, inputs.b, spec, **inputs.operands)
    assert not torch.isnan(d).any()
    assert float((d.float() - ref).norm() / ref.norm()) < tolerance(FP8, 64)
    assert baseline_label(spec, FP8, n) == label


def test_the_measuring_childs_check_judges_an_fp8_kernel_as_bf16_with_the_k_bound() -> None:
    from tirtune.runner.measure import check

    spec = ROWCOL
    inputs = draw_inputs(torch, 64, 32, 1024, FP8, spec, device="cpu", seed=4)
    good = lambda a, b, d, sr, sc: _fp8_kernel(a, b, d, scale_row=sr, scale_col=sc)  # noqa: E731
    verdict, error = check(good, inputs, FP8)
    assert verdict is None and error is not None and error < tolerance(FP8, 1024)
    stale = lambda a, b, d, sr, sc: _fp8_kernel(a, b, d, skip=0, scale_row=sr, scale_col=sc)  # noqa: E731
    failed, _ = check(stale, inputs, FP8)
    assert failed is not None and failed.outcome == "WRONG_RESULT"
