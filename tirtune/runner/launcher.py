"""A generic launcher for device-only kernels: a cubin + a LaunchSpec + tensors, through cuda-bindings.

It replays what TVM's exported CUDA host wrapper does on every call (`tirtune.builder.launch_spec`
says where each step is read from): encode every tensor map the kernel takes (cuTensorMapEncodeTiled with
the spec's dtype, rank, dims, strides, box, element strides, interleave, swizzle, L2 promotion
and OOB fill, on the argument's data pointer + offset), raise the function's dynamic
shared-memory maximum when the kernel uses 48 KiB or more, allow non-portable cluster sizes when
it has a cluster, and launch with cuLaunchKernelEx on the caller's stream with the cluster
dimension attribute. No host code is compiled per kernel.

Importable without a GPU and without cuda-bindings (imported on first launch); the driver module
can be passed in, which is how the CPU tests check the calls. Kernel parameters are packed here
with ctypes (an array of pointers to each argument's bytes, a tensor map's 128 bytes copied into
a 64-byte aligned buffer), so the packing is checked on CPU too.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirtune.core.artifacts import CUBIN_ARTIFACT
from tirtune.core.launch import DYN_SMEM_ATTR_FROM, LaunchSpec, TensorMapSpec, unbundle
from tirtune.runner.errors import WorkerError

__all__ = [
    "CubinKernel",
    "LaunchError",
    "TorchStreamKernel",
    "TvmFfiKernel",
    "encode_arguments",
    "load_artifact",
    "load_bundle",
    "pack_params",
    "tensor_map_dtype",
]

TENSOR_MAP_BYTES = 128
# TVM's descriptor dtypes -> CUtensorMapDataType member names (the exported wrapper's spelling).
# The copy engine has no FP8 type: a 1-byte element moves as UINT8, as FP8 GEMMs encode their maps.
_DTYPE_NAMES = {
    "uint8": "UINT8",
    "int8": "UINT8",
    "float8_e4m3fn": "UINT8",
    "float8_e5m2": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "int32": "INT32",
    "uint64": "UINT64",
    "int64": "INT64",
    "float16": "FLOAT16",
    "float32": "FLOAT32",
    "float64": "FLOAT64",
    "bfloat16": "BFLOAT16",
}
_SCALARS = {
    "int32": ctypes.c_int32,
    "int64": ctypes.c_int64,
    "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64,
    "float32": ctypes.c_float,
    "bool": ctypes.c_bool,
}


class LaunchError(WorkerError):
    """A driver call of the launcher failed (the message names the call and the CUresult)."""


def _aligned_map(raw: bytes) -> tuple[Any, int]:
    """(owner buffer, address of a 64-byte aligned copy of `raw`): CUtensorMap is alignas(64), and
    ctypes honours no alignment request before Python 3.13."""
    owner = (ctypes.c_uint8 * (TENSOR_MAP_BYTES + 64))()
    address = (ctypes.addressof(owner) + 63) & ~63
    ctypes.memmove(address, raw, TENSOR_MAP_BYTES)
    return owner, address


def tensor_map_dtype(spec: TensorMapSpec) -> str:
    """The CUtensorMapDataType member name of a tensor map ("CU_TENSOR_MAP_DATA_TYPE_FLOAT16")."""
    if spec.force_cu_dtype >= 0:
        raise LaunchError(f"forced CUtensorMapDataType {spec.force_cu_dtype}: not supported by the launcher yet")
    if spec.dtype not in _DTYPE_NAMES:
        raise LaunchError(f"no CUtensorMapDataType for descriptor dtype {spec.dtype!r}")
    return "CU_TENSOR_MAP_DATA_TYPE_" + _DTYPE_NAMES[spec.dtype]


@dataclass(frozen=True, slots=True)
class EncodeArguments:
    """cuTensorMapEncodeTiled's arguments, in its order, as plain values."""

    dtype: str
    rank: int
    address: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: int
    swizzle: int
    l2_promotion: int
    oob_fill: int


def encode_arguments(spec: TensorMapSpec, pointers: Sequence[int]) -> EncodeArguments:
    """What the host wrapper passes to cuTensorMapEncodeTiled for `spec`, given the arguments'
    data pointers."""
    # A rank-1 map (a one-row operand) has no stride, but the wrapper still passes a one-element
    # zeroed array, and the driver refuses a null one (CUDA_ERROR_INVALID_VALUE).
    strides = spec.strides or (0,)
    return EncodeArguments(
        tensor_map_dtype(spec),
        spec.rank,
        pointers[spec.arg] + spec.byte_offset,
        spec.dims,
        tuple(strides),
        spec.box,
        spec.element_strides,
        spec.interleave,
        spec.swizzle,
        spec.l2_promotion,
        spec.oob_fill,
    )


def pack_params(spec: LaunchSpec, maps: Sequence[bytes], pointers: Sequence[int]) -> tuple[Any, list[Any]]:
    """(void*[] of the kernel's parameters, the buffers it points into: keep them alive for the launch)."""
    keep: list[Any] = []
    addresses: list[int] = []
    for arg in spec.args:
        if arg.kind == "tensormap":
            raw = maps[arg.index]
            if len(raw) != TENSOR_MAP_BYTES:
                raise LaunchError(f"a tensor map has {len(raw)} bytes, not {TENSOR_MAP_BYTES}")
            owner, address = _aligned_map(raw)
            keep.append(owner)
            addresses.append(address)
            continue
        if arg.kind == "pointer":
            value: Any = ctypes.c_void_p(pointers[arg.index] + arg.byte_offset)
        elif arg.kind == "scalar":
            if arg.dtype not in _SCALARS:
                raise LaunchError(f"scalar kernel argument of dtype {arg.dtype!r}")
            value = _SCALARS[arg.dtype](arg.value)
        else:
            raise LaunchError(f"unknown kernel argument kind {arg.kind!r}")
        keep.append(value)
        addresses.append(ctypes.addressof(value))
    array = (ctypes.c_void_p * max(1, len(addresses)))(*addresses)
    return array, keep


class CubinKernel:
    """One kernel of a cubin, launched as its LaunchSpec says: `kernel(A, B, D, stream=...)`, and
    after D a fused epilogue's operands in `spec.operands` order (`kernel(A, B, D, bias, residual)`).

    Tensors are anything with `data_ptr()` (torch tensors) or plain integer device pointers;
    `stream` is a CUstream handle as an int (torch: `torch.cuda.current_stream().cuda_stream`),
    0 for the default stream. Needs the CUDA context current in this thread (torch makes its
    primary context current once it has touched the device)."""

    def __init__(self, cubin: bytes, spec: LaunchSpec, driver: Any = None) -> None:
        if driver is None:
            from cuda.bindings import driver as cuda_driver

            driver = cuda_driver
        self.driver = driver
        self.spec = spec
        self._check(driver.cuInit(0), "cuInit")
        self.module = self._check(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
        self.function = self._check(
            driver.cuModuleGetFunction(self.module, spec.kernel.encode()), f"cuModuleGetFunction({spec.kernel})"
        )
        attr = driver.CUfunction_attribute
        if spec.dyn_smem >= DYN_SMEM_ATTR_FROM:
            self._check(
                driver.cuFuncSetAttribute(
                    self.function, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, spec.dyn_smem
                ),
                "cuFuncSetAttribute(max dynamic smem)",
            )
        if spec.has_cluster:
            self._check(
                driver.cuFuncSetAttribute(self.function, attr.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                "cuFuncSetAttribute(non-portable cluster size)",
            )

    def __call__(self, *tensors: Any, stream: int = 0) -> None:
        if len(tensors) != self.spec.num_params:
            named = len(self.spec.operands) == self.spec.num_params
            names = f" ({', '.join(self.spec.operands)})" if named else ""
            raise LaunchError(f"{self.spec.kernel} takes {self.spec.num_params} tensors{names}, got {len(tensors)}")
        pointers = [t if isinstance(t, int) else int(t.data_ptr()) for t in tensors]
        maps = [self._encode(encode_arguments(m, pointers)) for m in self.spec.tensor_maps]
        params, keep = pack_params(self.spec, maps, pointers)
        config = self.launch_config(stream)
        self._check(
            self.driver.cuLaunchKernelEx(config, self.function, ctypes.addressof(params), 0),
            f"cuLaunchKernelEx({self.spec.kernel})",
        )
        del keep

    def launch_config(self, stream: int) -> Any:
        d, spec = self.driver, self.spec
        config = d.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = spec.grid
        config.blockDimX, config.blockDimY, config.blockDimZ = spec.block
        config.sharedMemBytes = spec.dyn_smem
        config.hStream = d.CUstream(stream)
        attrs = []
        if spec.has_cluster:
            attr = d.CUlaunchAttribute()
            attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            dim = attr.value.clusterDim  # one view, set in place (as cuda.core's launcher does)
            dim.x, dim.y, dim.z = spec.cluster
            attrs.append(attr)
        config.attrs = attrs
        config.numAttrs = len(attrs)
        return config

    def _encode(self, a: EncodeArguments) -> bytes:
        d = self.driver
        u64, u32 = d.cuuint64_t, d.cuuint32_t
        tensor_map = self._check(
            d.cuTensorMapEncodeTiled(
                getattr(d.CUtensorMapDataType, a.dtype),
                a.rank,
                a.address,
                [u64(x) for x in a.dims],
                [u64(x) for x in a.strides],
                [u32(x) for x in a.box],
                [u32(x) for x in a.element_strides],
                d.CUtensorMapInterleave(a.interleave),
                d.CUtensorMapSwizzle(a.swizzle),
                d.CUtensorMapL2promotion(a.l2_promotion),
                d.CUtensorMapFloatOOBfill(a.oob_fill),
            ),
            "cuTensorMapEncodeTiled",
        )
        return ctypes.string_at(tensor_map.getPtr(), TENSOR_MAP_BYTES)

    def _check(self, result: Any, what: str) -> Any:
        """cuda-bindings returns (CUresult, value...) tuples: the value, or LaunchError."""
        err, *values = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            _, name = self.driver.cuGetErrorName(err)
            raise LaunchError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
        return values[0] if len(values) == 1 else (values or None)


def load_bundle(data: bytes, driver: Any = None) -> CubinKernel:
    """The kernel of a cubin-path artifact (`kernel.tlaunch`'s bytes)."""
    spec, cubin = unbundle(data)
    return CubinKernel(cubin, spec, driver=driver)


class TorchStreamKernel:
    """`fn(A, B, D, *operands)` on torch's current stream: the call shape of the `.so` path's
    tvm-ffi function. `operands`: the kernel's parameter names, from its launch spec."""

    def __init__(self, kernel: CubinKernel) -> None:
        import torch

        self.kernel = kernel
        self.torch = torch

    @property
    def operands(self) -> tuple[str, ...]:
        return self.kernel.spec.operands

    def __call__(self, *tensors: Any) -> None:
        stream = self.torch.cuda.current_stream(tensors[0].device).cuda_stream
        self.kernel(*tensors, stream=stream)


class TvmFfiKernel:
    """`fn(A, B, D, *operands)`: a `.so` module's tvm-ffi `main`, every argument passed through in
    order on torch's current stream (the module's wrapper checks their count, dtypes and shapes).
    `operands` is None: the wrapper does not name its parameters to the caller; they are in
    `Problem.operands` order (`kernels/hopper/kernel.py`, `with_operands`)."""

    operands: tuple[str, ...] | None = None

    def __init__(self, main: Callable[..., Any]) -> None:
        self.main = main

    def __call__(self, *tensors: Any) -> None:
        import tvm_ffi

        # CPU tensors have no stream to follow (a stand-in `main` in the CPU tests).
        on_gpu = bool(getattr(tensors[0], "is_cuda", False))
        with tvm_ffi.use_torch_stream() if on_gpu else contextlib.nullcontext():
            self.main(*tensors)


def load_artifact(path: str | Path) -> Any:
    """`fn(A, B, D, *operands)` launching on torch's current stream, for a built artifact of
    either path (`tirtune.core.artifacts.KINDS`): a `.tlaunch` bundle through this launcher, a
    `.so` through tvm-ffi; a fused epilogue's operands follow D. What the measuring child and
    tirtune.gemm's loader both run."""
    path = Path(path)
    if path.suffix == Path(CUBIN_ARTIFACT).suffix:
        return TorchStreamKernel(load_bundle(path.read_bytes()))
    import tvm_ffi

    return TvmFfiKernel(tvm_ffi.load_module(str(path))["main"])
