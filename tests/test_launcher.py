"""The generic cubin launcher on CPU: what it asks of the driver, and how it packs parameters.

A fake driver module records the calls; the tensor maps' bytes, the pointer and scalar parameters
are read back from the packed void*[] with ctypes. The GPU test (marked `gpu`) launches a real
cubin; it runs on the H200 host (bench/build_paths.py compares both build paths bitwise).
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import pytest

from tirtune.core.launch import KernelArg, LaunchSpec, TensorMapSpec
from tirtune.runner.launcher import CubinKernel, LaunchError, encode_arguments, pack_params, tensor_map_dtype

MAP_A = TensorMapSpec(0, 0, "float16", 2, (4096, 1000), (8192,), (64, 128), (1, 1), 0, 3, 2, 0)
MAP_D = TensorMapSpec(2, 256, "bfloat16", 2, (1000, 1000), (2000,), (64, 64), (1, 1), 0, 3, 1, 0)
SPEC = LaunchSpec(
    "tk_0",
    (KernelArg("tensormap", index=0), KernelArg("pointer", index=1, byte_offset=16),
     KernelArg("tensormap", index=1), KernelArg("scalar", value=-7, dtype="int32")),
    (MAP_A, MAP_D), grid=(132, 1, 1), block=(384, 1, 1), cluster=(2, 1, 1), dyn_smem=214016, num_params=3,
    launch_params=("clusterCtaIdx.x", "clusterCtaIdx.y", "blockIdx.x", "threadIdx.x", "tirx.use_dyn_shared_memory"),
)


class _Enum:
    def __getattr__(self, name: str) -> str:
        return name

    def __call__(self, value: int) -> int:
        return value


class FakeDriver:
    """Records every call; tensor maps are 128 bytes of the map's index + 1."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.maps: list[Any] = []
        for name in ("CUfunction_attribute", "CUtensorMapDataType", "CUtensorMapInterleave", "CUtensorMapSwizzle",
                     "CUtensorMapL2promotion", "CUtensorMapFloatOOBfill", "CUlaunchAttributeID"):
            setattr(self, name, _Enum())
        self.cuuint64_t = self.cuuint32_t = int
        self.CUstream = int

    def _record(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))

    def cuInit(self, flags: int) -> tuple[int]:
        self._record("cuInit", flags)
        return (0,)

    def cuModuleLoadData(self, image: bytes) -> tuple[int, str]:
        self._record("cuModuleLoadData", image)
        return 0, "module"

    def cuModuleGetFunction(self, module: str, name: bytes) -> tuple[int, str]:
        self._record("cuModuleGetFunction", module, name)
        return 0, "function"

    def cuFuncSetAttribute(self, function: str, attr: str, value: int) -> tuple[int]:
        self._record("cuFuncSetAttribute", attr, value)
        return (0,)

    def cuTensorMapEncodeTiled(self, *args: Any) -> tuple[int, Any]:
        self._record("cuTensorMapEncodeTiled", *args)
        buf = (ctypes.c_uint8 * 128)(*([len(self.maps) + 1] * 128))
        self.maps.append(buf)
        return 0, SimpleNamespace(getPtr=lambda: ctypes.addressof(buf))

    def CUlaunchConfig(self) -> SimpleNamespace:
        return SimpleNamespace()

    def CUlaunchAttribute(self) -> SimpleNamespace:
        return SimpleNamespace(id=None, value=SimpleNamespace(clusterDim=SimpleNamespace(x=0, y=0, z=0)))

    def cuLaunchKernelEx(self, config: Any, function: str, params: int, extra: int) -> tuple[int]:
        self._record("cuLaunchKernelEx", config, function, _read_params(params))
        return (0,)

    def cuGetErrorName(self, err: int) -> tuple[int, bytes]:
        return 0, b"CUDA_ERROR_FAKE"


def _read_params(address: int) -> list[Any]:
    """The four parameters of SPEC, read back through the void*[] at `address`."""
    slots = (ctypes.c_void_p * 4).from_address(address)
    first_map = bytes((ctypes.c_uint8 * 128).from_address(slots[0]))
    pointer = ctypes.c_void_p.from_address(slots[1]).value
    second_map = bytes((ctypes.c_uint8 * 128).from_address(slots[2]))
    scalar = ctypes.c_int32.from_address(slots[3]).value
    return [first_map, pointer, second_map, scalar, slots[0] % 64, slots[2] % 64]


def test_launch_replays_the_host_wrapper() -> None:
    driver = FakeDriver()
    kernel = CubinKernel(b"cubin", SPEC, driver=driver)
    kernel(0x10000, 0x20000, 0x30000, stream=5)
    names = [name for name, _ in driver.calls]
    assert names == ["cuInit", "cuModuleLoadData", "cuModuleGetFunction", "cuFuncSetAttribute", "cuFuncSetAttribute",
                     "cuTensorMapEncodeTiled", "cuTensorMapEncodeTiled", "cuLaunchKernelEx"]
    assert driver.calls[2][1] == ("module", b"tk_0")
    assert driver.calls[3][1] == ("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 214016)
    assert driver.calls[4][1] == ("CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED", 1)
    encode_a, encode_d = driver.calls[5][1], driver.calls[6][1]
    assert encode_a == ("CU_TENSOR_MAP_DATA_TYPE_FLOAT16", 2, 0x10000, [4096, 1000], [8192], [64, 128], [1, 1],
                        0, 3, 2, 0)
    assert encode_d[:3] == ("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 2, 0x30000 + 256)
    config, function, params = driver.calls[7][1]
    assert function == "function"
    assert (config.gridDimX, config.blockDimX, config.sharedMemBytes, config.hStream) == (132, 384, 214016, 5)
    (cluster,) = config.attrs
    assert cluster.id == "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION" and config.numAttrs == 1
    assert (cluster.value.clusterDim.x, cluster.value.clusterDim.y, cluster.value.clusterDim.z) == (2, 1, 1)
    assert params == [bytes([1] * 128), 0x20000 + 16, bytes([2] * 128), -7, 0, 0]


def test_small_kernel_without_cluster_sets_no_attributes() -> None:
    driver = FakeDriver()
    spec = LaunchSpec("k", (KernelArg("pointer", index=0),), (), (8, 8, 1), (256, 1, 1), dyn_smem=33792,
                      num_params=1,
                      launch_params=("blockIdx.x", "threadIdx.x", "blockIdx.y", "tirx.use_dyn_shared_memory"))
    kernel = CubinKernel(b"cubin", spec, driver=driver)
    assert [n for n, _ in driver.calls] == ["cuInit", "cuModuleLoadData", "cuModuleGetFunction"]
    config = kernel.launch_config(0)
    assert config.attrs == [] and config.numAttrs == 0 and (config.gridDimX, config.gridDimY) == (8, 8)
    with pytest.raises(LaunchError, match="takes 1 tensors"):
        kernel(1, 2)


def test_encoding_and_packing_refuse_what_they_cannot_do() -> None:
    assert tensor_map_dtype(MAP_A) == "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"
    assert encode_arguments(MAP_D, [0, 0, 1000]).address == 1256
    # e4m3 operands move as 1-byte elements; a dtype the table does not name is refused.
    fp8 = TensorMapSpec(0, 0, "float8_e4m3fn", 2, (4096, 64), (4096,), (128, 64), (1, 1), 0, 3, 2, 0)
    assert tensor_map_dtype(fp8) == "CU_TENSOR_MAP_DATA_TYPE_UINT8"
    with pytest.raises(LaunchError):
        tensor_map_dtype(TensorMapSpec(0, 0, "float8_e4m3", 1, (8,), (), (8,), (1,), 0, 0, 0, 0))
    with pytest.raises(LaunchError, match="128"):
        pack_params(SPEC, [b"x", b"y"], [0, 0, 0])
    driver = FakeDriver()
    driver.cuModuleGetFunction = lambda module, name: (500, None)  # type: ignore[method-assign]
    with pytest.raises(LaunchError, match="CUDA_ERROR_FAKE"):
        CubinKernel(b"cubin", SPEC, driver=driver)


@pytest.mark.gpu
def test_launcher_imports_cuda_bindings_on_a_gpu_host() -> None:
    from cuda.bindings import driver

    assert hasattr(driver, "cuLaunchKernelEx") and hasattr(driver, "cuTensorMapEncodeTiled")


def test_a_rank_one_map_passes_a_zeroed_stride_as_the_host_wrapper_does() -> None:
    """A one-row operand's map has rank 1 and no stride; TVM's wrapper passes a one-element zeroed
    array, and the driver refuses an empty (null) one with CUDA_ERROR_INVALID_VALUE (seen on the H200)."""
    row = TensorMapSpec(0, 0, "float16", 1, (4096,), (), (64,), (1,), 0, 3, 2, 0)
    assert encode_arguments(row, [4096, 0, 0]).strides == (0,)
    assert encode_arguments(MAP_D, [0, 0, 1000]).strides == MAP_D.strides


# --- a fused epilogue's operands -----------------------------------------------------------------

FUSED = LaunchSpec(
    "fused_0",
    (KernelArg("tensormap", index=0), KernelArg("pointer", index=2), KernelArg("pointer", index=3),
     KernelArg("pointer", index=4)),
    (MAP_A,), grid=(64, 1, 1), block=(384, 1, 1), num_params=5,
    launch_params=("blockIdx.x", "threadIdx.x"), operands=("A", "B", "D", "bias", "residual"),
)


class FusedDriver(FakeDriver):
    """Reads FUSED's parameters back at launch: A's map, then the pointers of D, bias, residual."""

    def cuLaunchKernelEx(self, config: Any, function: str, params: int, extra: int) -> tuple[int]:
        slots = (ctypes.c_void_p * 4).from_address(params)
        read = [bytes((ctypes.c_uint8 * 128).from_address(slots[0]))]
        read += [ctypes.c_void_p.from_address(slots[i]).value for i in (1, 2, 3)]
        self._record("cuLaunchKernelEx", config, function, read)
        return (0,)


def test_a_fused_kernel_is_launched_with_each_operand_at_its_parameter() -> None:
    """The launch spec points the kernel's parameters at A's map, D, bias and residual: the
    pointers packed are the third, fourth and fifth tensors passed, in the spec's order."""
    driver = FusedDriver()
    kernel = CubinKernel(b"cubin", FUSED, driver=driver)
    kernel(0x10000, 0x20000, 0x30000, 0x40000, 0x50000, stream=0)
    [params] = [args[2] for name, args in driver.calls if name == "cuLaunchKernelEx"]
    assert params == [bytes([1] * 128), 0x30000, 0x40000, 0x50000]
    encode = next(args for name, args in driver.calls if name == "cuTensorMapEncodeTiled")
    assert encode[2] == 0x10000
    with pytest.raises(LaunchError, match=r"takes 5 tensors \(A, B, D, bias, residual\), got 3"):
        kernel(0x10000, 0x20000, 0x30000)


def test_the_cubin_kernel_names_its_parameters_for_the_measuring_child() -> None:
    from tirtune.runner.launcher import TorchStreamKernel

    assert TorchStreamKernel(CubinKernel(b"cubin", FUSED, driver=FakeDriver())).operands == FUSED.operands
    assert TorchStreamKernel(CubinKernel(b"cubin", SPEC, driver=FakeDriver())).operands == ("A", "B", "D")


def test_the_so_paths_kernel_passes_every_argument_through_tvm_ffi_in_order() -> None:
    """A `.so`'s `main` is a tvm-ffi function: here a real one made from Python, handed CPU
    tensors (no stream to follow), sees A, B, D, bias, residual in the order they were passed."""
    torch = pytest.importorskip("torch")
    tvm_ffi = pytest.importorskip("tvm_ffi")
    from tirtune.runner.launcher import TvmFfiKernel

    seen: list[tuple[tuple[int, ...], ...]] = []
    main = tvm_ffi.convert(lambda *xs: seen.append(tuple(tuple(x.shape) for x in xs)))
    kernel = TvmFfiKernel(main)
    assert kernel.operands is None  # the wrapper checks count and shapes; the caller passes problem order
    a, b, d = torch.zeros(8, 4), torch.zeros(6, 4), torch.zeros(8, 6)
    kernel(a, b, d, torch.zeros(6), torch.zeros(8, 6))
    kernel(a, b, d)
    assert seen == [((8, 4), (6, 4), (8, 6), (6,), (8, 6)), ((8, 4), (6, 4), (8, 6))]
