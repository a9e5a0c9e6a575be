"""The launch spec read from TVM's host IR says what today's exported CUDA host wrapper does.

For a few kernels that between them take the launch's variants (a 2-CTA cluster with three tensor
maps, the register epilogue's pointer operand, the thread loader's pointers only, bf16, ping-pong,
swap_ab), `device_build.lower_device` gives a LaunchSpec; the same kernel exported the old way
(`toolchain.lower_to_cuda`, the tvm-ffi host wrapper in CUDA C++) must encode the same tensor
maps (every operand, dtype and enum) and launch with the same grid, block, cluster and dynamic
shared memory. Lowering only (no nvcc), twice per kernel: about 20 s on two cores.
"""

from __future__ import annotations

import re

import pytest

from tirtune.builder import device_build, toolchain
from tirtune.core import Config, Problem
from tirtune.core.launch import DYN_SMEM_ATTR_FROM, ExtractError, KernelArg, LaunchSpec, TensorMapSpec
from tirtune.space.hopper.knobs import config as hopper_config

CASES = [
    (hopper_config(128, 256, 64, 3, 2, True, persistent=True, raster_group=8, epilogue="tma", cluster=2),
     Problem(4096, 4096, 4096, "float16")),
    (hopper_config(128, 128, 64, 4, 2, True), Problem(1000, 1000, 1000, "bfloat16")),
    (hopper_config(128, 128, 64, 1, 2, False, loader="threads"), Problem(1000, 1000, 1000, "float16")),
    (hopper_config(128, 128, 64, 4, 2, True, persistent=True, schedule="pingpong", epilogue="tma"),
     Problem(1000, 1000, 1000, "float16")),
]
_DTYPES = {"float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32"}


def _wrapper_encodes(source: str) -> list[dict[str, object]]:
    """Each cuTensorMapEncodeTiled of the exported host wrapper: its operands and enums."""
    found = []
    for block in re.findall(r"CUtensorMap\* \w+_tensormap = .*?CUresult tensormap_error\w* = [^;]*;", source, re.S):
        values = re.findall(r"auto tensormap_arg\w* = (.*);", block)
        call = re.search(r"cuTensorMapEncodeTiled\([^,]*, CU_TENSOR_MAP_DATA_TYPE_(\w+), (\d+),", block)
        enums = [int(v) for v in re.findall(r"static_cast<CUtensorMap\w+>\((\d+)\)", block)]
        assert call is not None
        found.append({"dtype": call.group(1), "rank": int(call.group(2)), "pointer": values[1],
                      "values": [int(v) for v in values[2:]], "enums": enums})
    return found


def _wrapper_launch(source: str) -> list[int]:
    """The launch values (`auto cuda_arg_N = V;` with integer V) of the exported wrapper, in order."""
    return [int(v) for v in re.findall(r"auto cuda_arg\w* = (\d+);", source)]


@pytest.mark.parametrize(("config", "problem"), CASES, ids=lambda x: x.label() if isinstance(x, Config) else str(x))
def test_spec_matches_the_exported_host_wrapper(config: Config, problem: Problem) -> None:
    _, spec = device_build.lower_device(config, problem)
    old = toolchain.lower_to_cuda(config, problem)
    encodes = _wrapper_encodes(old)
    # The wrapper encodes in the host code's order; the spec lists maps in kernel-operand order.
    # (The thread loader's wrapper encodes maps its kernel never receives: the spec keeps the
    # kernel's operands only, so every map the kernel takes, and no other, must be there.)
    by_pointer = {e["pointer"]: e for e in encodes}
    signature = re.search(rf"__global__ .*\b{spec.kernel}\(([^)]*)\)", old)
    assert signature is not None and signature.group(1).count("CUtensorMap") == len(spec.tensor_maps)
    names = "ABD"
    for m in spec.tensor_maps:
        e = by_pointer[f"((void*)((char*){names[m.arg]} + {m.byte_offset}))"]
        assert e["dtype"] == _DTYPES[m.dtype] and e["rank"] == m.rank
        assert e["values"] == [*m.dims, *m.strides, *m.box, *m.element_strides]
        assert e["enums"] == [m.interleave, m.swizzle, m.l2_promotion, m.oob_fill]
    by_tag = dict(zip(spec.launch_params, _wrapper_launch(old)[-len(spec.launch_params):], strict=True))
    assert spec.grid[0] == by_tag["blockIdx.x"] and spec.block[0] == by_tag["threadIdx.x"]
    assert spec.dyn_smem == by_tag.get("tirx.use_dyn_shared_memory", 0)
    assert spec.cluster[0] == by_tag.get("clusterCtaIdx.x", 1)
    assert spec.has_cluster == ("cudaLaunchAttributeClusterDimension" in old)
    assert ("cudaFuncAttributeMaxDynamicSharedMemorySize" in old) == (spec.dyn_smem > 0)
    assert spec.num_params == 3
    assert LaunchSpec.from_json(spec.to_json()) == spec


def test_device_source_is_tvm_compiles_device_module() -> None:
    import tvm

    from tirtune.kernels import build

    config, problem = CASES[1]
    source, _ = device_build.lower_device(config, problem)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}, host="llvm")
    executable = tvm.compile(tvm.IRModule({"main": build(config, problem)}), target=target, tir_pipeline="tirx")
    assert source == executable.mod.imports[0].inspect_source("cuda")


def test_spec_refuses_what_it_cannot_describe() -> None:
    with pytest.raises(ExtractError):
        TensorMapSpec(0, 0, "float16", 2, (64, 64), (), (64, 64), (1, 1), 0, 3, 2, 0)
    spec = LaunchSpec("k", (KernelArg("scalar", value=3, dtype="int32"),), (), (1, 1, 1), (128, 1, 1))
    assert LaunchSpec.from_json(spec.to_json()) == spec and not spec.has_cluster
    assert DYN_SMEM_ATTR_FROM == 48 * 1024
