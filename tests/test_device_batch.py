"""Several kernels per `nvcc -cubin`: names never clash, and a bad kernel fails alone with its own
root cause (small stand-in kernels shaped like TVM's device source: its includes, a helper
every kernel defines under the same name, and an `extern "C"` entry called main_kernel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tirtune.builder import toolchain
from tirtune.builder.device_build import BatchItem, batch_source, compile_batch

SOURCE = """
#include <cuda_fp16.h>
#if !defined(__CUDA_ARCH__) || (__CUDA_ARCH__ >= 530)
#include <cstdint>
#endif
__forceinline__ __device__ int helper(int x) {{ return x * {factor}; }}
extern "C" __global__ void __launch_bounds__(128) main_kernel(int* __restrict__ out) {{
  out[threadIdx.x] = helper((int)threadIdx.x){broken};
}}
"""


def _item(i: int, broken: bool = False) -> BatchItem:
    text = SOURCE.format(factor=i + 2, broken=" +" if broken else "")
    return BatchItem(text, "main_kernel", f"tk_{i}")


def test_batch_source_namespaces_each_kernel_and_renames_its_entry() -> None:
    text = batch_source([_item(0), _item(1)])
    assert text.count("namespace tirtune_k0 {") == text.count("namespace tirtune_k1 {") == 1
    assert "main_kernel" not in text
    assert text.index("#include <cuda_fp16.h>") < text.index("namespace tirtune_k0")


@pytest.mark.nvcc
def test_a_bad_kernel_fails_alone_with_its_own_root_cause(tmp_path: Path) -> None:
    items = [_item(0), _item(1, broken=True), _item(2), _item(3)]
    results = compile_batch(items, tmp_path)
    assert [r.error is None for r in results] == [True, False, True, True]
    bad = results[1]
    assert bad.cubin is None and bad.batch_size == 1 and "expected an expression" in bad.error.root  # type: ignore[union-attr]
    good = [r for r in results if r.cubin is not None]
    assert all(r.resources is not None for r in good)
    for r in good:
        assert f"Function : {r.item.symbol}" in toolchain.sass(r.cubin)  # type: ignore[arg-type]
