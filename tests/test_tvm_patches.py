"""The run-time changes inside TVM (tirtune/workers/tvm_patches.py): same CUDA, same lookup, stable keys."""

from __future__ import annotations

import pytest

from tirtune.core import Config, Problem
from tirtune.workers import toolchain, tvm_patches


def _lower_with(method: object, config: Config, problem: Problem) -> str:
    from tvm.script.parser.core.parser import ScriptMacro

    saved = ScriptMacro._find_parser_def
    ScriptMacro._find_parser_def = method
    try:
        return toolchain.lower_to_cuda(config, problem)
    finally:
        ScriptMacro._find_parser_def = saved


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        (Config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2, warp_specialized=True),
         Problem(1000, 1000, 1000)),
        (Config(blk_m=64, blk_n=16, blk_k=128, stages=8, consumers=1, warp_specialized=True, swap_ab=True,
                l2_hint="first/none"), Problem(16, 4096, 4096, "bfloat16")),
    ],
)
def test_the_patched_parser_lookup_lowers_byte_identical_cuda(config: Config, problem: Problem) -> None:
    assert tvm_patches.apply() and tvm_patches.applied()
    from tvm.script.parser.core.parser import ScriptMacro

    patched = ScriptMacro._find_parser_def
    assert patched is not tvm_patches.original()  # installed: the class holds the replacement
    unpatched_cuda = _lower_with(tvm_patches.original(), config, problem)
    patched_cuda = _lower_with(patched, config, problem)
    assert patched_cuda == unpatched_cuda and "__global__" in patched_cuda


def test_the_lookup_fails_as_tvms_own_when_no_parser_is_active() -> None:
    tvm_patches.apply()
    from tvm.script.parser.core.parser import ScriptMacro

    with pytest.raises(RuntimeError, match=ScriptMacro.parser_object_name) as ours:
        ScriptMacro._find_parser_def(object())
    with pytest.raises(RuntimeError) as theirs:
        tvm_patches.original()(object())
    assert str(ours.value) == str(theirs.value)


def _tensor_map_keys(count: int) -> list[str]:
    """The keys TMA's `_buffer_base` gives `count` global views made and dropped one after another,
    as a kernel's copies are dispatched."""
    from tvm import tirx
    from tvm.backend.cuda.tile_primitive.copy_async import tma

    keys = []
    for _ in range(count):
        view = tirx.decl_buffer((64, 64), "float16", name="A")
        keys.append(tma._buffer_base(view, auto=True, stage="global-base")[1])
        del view
    return keys


def test_unpatched_tensor_map_keys_collide_by_address() -> None:
    """What the patch is for: TVM's own key hashes a temporary's address, so keys repeat as the
    allocator reuses addresses (if this ever fails, TVM changed and the patch may be moot)."""
    tvm_patches.apply()
    from tvm.backend.cuda.tile_primitive.copy_async import tma

    saved = tma._buffer_base
    tma._buffer_base = tvm_patches._ORIGINAL_BUFFER_BASE
    try:
        keys = _tensor_map_keys(50)
    finally:
        tma._buffer_base = saved
    assert len(set(keys)) < len(keys)


def test_patched_tensor_map_keys_are_unique_and_the_same_in_every_lowering() -> None:
    with tvm_patches.lowering():
        first = _tensor_map_keys(50)
    with tvm_patches.lowering():
        second = _tensor_map_keys(50)
    assert len(set(first)) == 50
    assert first == second  # numbered from 0 in each lowering, whatever the addresses
    assert first[0].endswith(":T.handle_add_byte_offset(A.data, 0)")  # TVM's base kept as it was
