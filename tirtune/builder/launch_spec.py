"""How to launch one device-only kernel, read from TVM's own lowered host code (not re-derived).

TVM's host function (the tvm-ffi wrapper, before its finalizing passes) says everything a launch
needs: for every TMA operand a `tirx.tensormap_encode_tiled(map, data_ptr, dims.., strides..,
box.., element_strides.., descriptor_dtype=, rank=, interleave=, swizzle=, l2_promotion=,
oob_fill=, force_cu_dtype=)` and then one `tirx.call_ffi_kernel(name, operands.., launch values..,
launch_params=[tags])`, whose tags name the launch values (blockIdx.x: grid, threadIdx.x: block,
clusterCtaIdx.x/y: cluster dims, tirx.use_dyn_shared_memory: dynamic shared-memory bytes).
A pointer operand names the function argument it is the data of by position; the spec carries the
arguments' names (`LaunchSpec.operands`: A, B, D, then a fused epilogue's bias, residual or
scales), so the caller knows what to pass where.
`extract` walks that IR and freezes it into a `LaunchSpec` (`tirtune.core.launch`, the format both
sides share); `tirtune.runner.launcher` replays it through the CUDA driver API exactly as the
exported CUDA host wrapper does (`export_cuda_host`): encode each map, raise the dynamic
shared-memory maximum when the bytes reach 48 KiB, allow non-portable cluster sizes when the kernel
has a cluster, launch with the cluster attribute.

Anything the extractor does not recognise (a symbolic extent, an unknown launch tag, a second
kernel) is an `ExtractError`, never a guess: a wrong box size hangs the kernel on its barriers.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tirtune.core.launch import (
    BLOCK,
    CLUSTER,
    DYN_SMEM,
    GRID,
    PLAIN_OPERANDS,
    ExtractError,
    KernelArg,
    LaunchSpec,
    TensorMapSpec,
)

__all__ = ["ExtractError", "extract"]

_VALUE_TAGS = frozenset((*GRID, *BLOCK, *CLUSTER, DYN_SMEM))
# tvm_struct_get field of a packed argument's handle, and of a DLTensor's data pointer.
_ARG_HANDLE, _ARR_DATA = 15, 1


def extract(host_mod: Any, num_params: int, operands: tuple[str, ...] = PLAIN_OPERANDS) -> LaunchSpec:
    """The LaunchSpec of the one kernel `host_mod` launches (the host IRModule of
    `tvm.tirx.build.split_host_device_mods`, before the host finalizing passes); `operands` names
    the function's `num_params` parameters in order (A, B, D and a fused epilogue's)."""
    if len(operands) != num_params:
        raise ExtractError(f"{num_params} parameters but {len(operands)} operand names: {', '.join(operands)}")
    funcs = [f for _, f in host_mod.functions.items()]
    walker = _Walker()
    for func in funcs:
        walker.stmt(func.body)
    if len(walker.launches) != 1:
        raise ExtractError(f"expected one kernel launch in the host code, found {len(walker.launches)}")
    return replace(walker.spec(walker.launches[0], num_params), operands=tuple(operands))


class _Walker:
    """Collects bindings, tensor-map encodes and kernel launches of a host function."""

    def __init__(self) -> None:
        self.binds: dict[Any, Any] = {}
        self.maps: dict[Any, TensorMapSpec] = {}  # the map's variable -> its encoding
        self.launches: list[Any] = []

    def stmt(self, node: Any) -> None:
        from tvm import tirx

        if isinstance(node, tirx.SeqStmt):
            for s in node.seq:
                self.stmt(s)
        elif isinstance(node, tirx.Bind):
            self.binds[node.var] = node.value
        elif isinstance(node, tirx.DeclBuffer):
            var, data = _data_var(node.buffer.data), _data_var(node.data)
            if not var.same_as(data):  # a view re-declares its source's data: no new binding
                self.binds[var] = data
        elif isinstance(node, tirx.IfThenElse):
            self.stmt(node.then_case)
            if node.else_case is not None:
                self.stmt(node.else_case)
        elif isinstance(node, tirx.Evaluate):
            self.call(node.value)
        elif hasattr(node, "body"):  # AttrStmt, For, While, ...
            self.stmt(node.body)

    def call(self, expr: Any) -> None:
        from tvm import ir

        if not isinstance(expr, ir.Call) or not hasattr(expr.op, "name"):
            return
        if expr.op.name == "tirx.tensormap_encode_tiled":
            self.maps[expr.args[0]] = self.tensor_map(expr)
        elif expr.op.name == "tirx.call_ffi_kernel":
            self.launches.append(expr)

    def tensor_map(self, call: Any) -> TensorMapSpec:
        attrs, args = call.attrs, list(call.args)
        rank = int(attrs.rank)
        arg, offset = self.pointer(args[1])
        values = [_int(a, "tensor-map operand") for a in args[2:]]
        dims, rest = values[:rank], values[rank:]
        strides, rest = rest[: rank - 1], rest[rank - 1 :]
        box, elem = rest[:rank], rest[rank:]
        return TensorMapSpec(
            arg=arg,
            byte_offset=offset,
            dtype=str(attrs.descriptor_dtype),
            rank=rank,
            dims=tuple(dims),
            strides=tuple(strides),
            box=tuple(box),
            element_strides=tuple(elem),
            interleave=int(attrs.interleave),
            swizzle=int(attrs.swizzle),
            l2_promotion=int(attrs.l2_promotion),
            oob_fill=int(attrs.oob_fill),
            force_cu_dtype=int(attrs.force_cu_dtype),
        )

    def pointer(self, expr: Any, offset: int = 0) -> tuple[int, int]:
        """(argument index, byte offset) of a data pointer expression."""
        from tvm import ir, tirx

        for _ in range(64):  # a chain of bindings, never a cycle; bounded all the same
            expr = _data_var(expr)
            if isinstance(expr, tirx.Var) and expr in self.binds:
                expr = self.binds[expr]
                continue
            if isinstance(expr, ir.Call) and hasattr(expr.op, "name"):
                name, args = "tirx." + expr.op.name.split(".")[-1], list(expr.args)  # tirx.* or prim.*
                if name == "tirx.handle_add_byte_offset":
                    offset += _int(args[1], "byte offset")
                    expr = args[0]
                    continue
                if name == "tirx.reinterpret":
                    expr = args[0]
                    continue
                if name == "tirx.if_then_else":  # the handle of a tvm-ffi Tensor vs a DLTensor*
                    expr = args[2]
                    continue
                if name == "tirx.tvm_struct_get" and _int(args[2], "field") == _ARR_DATA:
                    expr = args[0]
                    continue
                if name == "tirx.tvm_struct_get" and _int(args[2], "field") == _ARG_HANDLE:
                    return _int(args[1], "argument index"), offset
            break
        raise ExtractError(f"cannot trace a data pointer to a function argument: {expr}")

    def spec(self, call: Any, num_params: int) -> LaunchSpec:
        from tvm import ir

        tags = tuple(str(t) for t in call.attrs.launch_params)
        unknown = [t for t in tags if t not in _VALUE_TAGS]
        if unknown:
            raise ExtractError(f"unknown launch tag(s) {unknown}: the launcher would launch differently")
        args = list(call.args)
        kernel = args[0].value if isinstance(args[0], ir.StringImm) else str(args[0])
        values = [_int(v, "launch value") for v in args[len(args) - len(tags) :]]
        operands = args[1 : len(args) - len(tags)]
        by_tag = dict(zip(tags, values, strict=True))
        maps: list[TensorMapSpec] = []
        kernel_args = [self.operand(op, maps) for op in operands]

        def dims(names: tuple[str, str, str]) -> tuple[int, int, int]:
            x, y, z = (max(1, by_tag.get(n, 1)) for n in names)
            return x, y, z

        return LaunchSpec(
            kernel=kernel,
            args=tuple(kernel_args),
            tensor_maps=tuple(maps),
            grid=dims(GRID),
            block=dims(BLOCK),
            cluster=dims(CLUSTER),
            dyn_smem=by_tag.get(DYN_SMEM, 0),
            num_params=num_params,
            launch_params=tags,
        )

    def operand(self, expr: Any, maps: list[TensorMapSpec]) -> KernelArg:
        from tvm import tirx

        if isinstance(expr, tirx.Var) and expr in self.maps:
            maps.append(self.maps[expr])
            return KernelArg("tensormap", index=len(maps) - 1)
        if isinstance(expr, tirx.IntImm):
            return KernelArg("scalar", value=int(expr.value), dtype=str(expr.dtype))
        arg, offset = self.pointer(expr)
        return KernelArg("pointer", index=arg, byte_offset=offset)


def _data_var(expr: Any) -> Any:
    """A buffer's data pointer is `tirx.buffer_data(var)`: the var is what bindings name."""
    from tvm import ir

    if isinstance(expr, ir.Call) and getattr(expr.op, "name", "") == "tirx.buffer_data":
        return expr.args[0]
    return expr


def _int(expr: Any, what: str) -> int:
    from tvm import tirx

    if isinstance(expr, int):
        return expr
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    raise ExtractError(f"{what} is not a constant: {expr} (a symbolic shape needs run-time values)")
