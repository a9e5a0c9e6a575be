"""Activation quantization to e4m3 (tirtune.nn.quantize): the Triton kernels against the eager ops
they replace, bit for bit, under Triton's interpreter on the CPU (a process of its own:
TRITON_INTERPRET is read when Triton is imported) and, where a Hopper GPU is present, on it; the
cast worked in integers against torch's own over every e4m3 value, the midpoints between them and
their neighbours; and the checks on what a caller passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tirtune.nn.quantize import MODES, quantize, quantize_eager

ROOT = Path(__file__).resolve().parents[1]

# Runs under the interpreter: every mode over ragged and aligned shapes in three dtypes, with the
# values that test a cast (zeros, a negative zero, numbers past +-448 after scaling, ties), and the
# cast alone over every e4m3 value, the midpoints between neighbours and one fp32 ulp either side.
CHECK = r"""
import json, torch
from tirtune.nn.quantize import quantize, quantize_eager

def same(a, b):
    (a8, asc), (b8, bsc) = a, b
    return (torch.equal(a8.view(torch.uint8), b8.view(torch.uint8)) and torch.equal(asc, bsc)
            and asc.shape == bsc.shape and asc.stride() == bsc.stride() and b8.dtype == torch.float8_e4m3fn)

torch.manual_seed(7)
bad = []
for dtype in (torch.bfloat16, torch.float16, torch.float32):
    for m, k in ((16, 4096), (3, 300), (1, 128), (1, 1000), (5, 1000), (33, 2050)):
        x = (torch.randn(m, k) * 3).to(dtype)
        x[0, :6] = torch.tensor([1e-3, 0.0, -0.0, 500.0, -7.0, 84.0 / 448.0])
        for mode in ("tensor", "token", "block", "static"):
            scale = torch.tensor([0.37]) if mode == "static" else None
            if not same(quantize_eager(x, mode, scale), quantize(x, mode, scale, kernels=True)):
                bad.append(f"{dtype} {m}x{k} {mode}")
zeros = torch.zeros(4, 256, dtype=torch.bfloat16)
for mode in ("tensor", "token", "block"):
    if not same(quantize_eager(zeros, mode), quantize(zeros, mode, kernels=True)):
        bad.append(f"zeros {mode}")
codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
values = codes[torch.isfinite(codes)].unique()
mids = (values[1:] + values[:-1]) / 2
edge = torch.cat([values, mids, torch.nextafter(mids, torch.full_like(mids, 1e9)),
                  torch.nextafter(mids, torch.full_like(mids, -1e9)), torch.tensor([448.0, -448.0, 2.0 ** -10, 1e-30])])
edge = torch.cat([edge, -edge]).reshape(1, -1)
one = torch.ones(1)
if not same(quantize_eager(edge, "static", one), quantize(edge, "static", one, kernels=True)):
    bad.append("the cast over every e4m3 value, midpoint and neighbour")
print(json.dumps({"bad": bad, "cast_values": edge.numel()}))
"""


def test_the_kernels_match_the_eager_ops_bit_for_bit_under_the_interpreter() -> None:
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["bad"] == [] and result["cast_values"] > 1000, result


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_the_kernels_match_the_eager_ops_bit_for_bit_on_the_gpu(mode: str) -> None:
    torch.manual_seed(3)
    for m, k in ((1, 4096), (16, 14336), (300, 1000), (8192, 4096)):
        x = (torch.randn(m, k, device="cuda") * 5).to(torch.bfloat16)
        scale = torch.tensor([0.05], device="cuda") if mode == "static" else None
        a8, asc = quantize_eager(x, mode, scale)
        b8, bsc = quantize(x, mode, scale)
        assert torch.equal(a8.view(torch.uint8), b8.view(torch.uint8)), (mode, m, k)
        assert torch.equal(asc, bsc) and asc.stride() == bsc.stride(), (mode, m, k)


def test_the_eager_ops_serve_a_tensor_off_the_gpu() -> None:
    """By default the kernels run only on a GPU: a CPU tensor takes the eager ops, with their
    values."""
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    for mode in ("tensor", "token", "block"):
        got, want = quantize(x, mode), quantize_eager(x, mode)
        assert torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8)) and torch.equal(got[1], want[1])


def test_each_mode_scales_as_it_says() -> None:
    x = torch.tensor([[1.0, -896.0, 0.0, 2.0], [0.5, 0.25, -0.5, 0.0]])
    x8, s = quantize(x, "tensor")
    assert s.tolist() == [2.0] and x8.float()[0].tolist() == [0.5, -448.0, 0.0, 1.0]
    x8, s = quantize(x, "token")
    assert torch.equal(s, torch.tensor([2.0, 0.5 / 448.0])) and x8.float()[1, 0].item() == 448.0
    x8, s = quantize(x, "static", torch.tensor([4.0]))
    assert s.tolist() == [4.0] and x8.float()[0].tolist() == [0.25, -224.0, 0.0, 0.5]
    wide = torch.cat([torch.full((1, 128), 448.0), torch.full((1, 130), 4.48)], dim=1)
    x8, s = quantize(wide, "block")
    assert s.shape == (1, 3) and torch.allclose(s, torch.tensor([[1.0, 0.01, 0.01]])) and s.T.is_contiguous()
    assert torch.all(x8.float() == 448.0)


def test_what_a_caller_passes_wrong_is_named() -> None:
    x = torch.randn(4, 256)
    with pytest.raises(ValueError, match="mode is one of"):
        quantize(x, "channel")
    with pytest.raises(ValueError, match="2-D"):
        quantize(x.reshape(2, 2, 256), "tensor")
    with pytest.raises(ValueError, match="only then"):
        quantize(x, "static")
    with pytest.raises(ValueError, match="only then"):
        quantize(x, "tensor", torch.ones(1))
    with pytest.raises(ValueError, match="one value"):
        quantize(x, "static", torch.ones(2))
