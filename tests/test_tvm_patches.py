"""The run-time changes inside TVM (tirtune/builder/tvm_patches.py): same CUDA, same lookup, stable keys."""

from __future__ import annotations

import inspect

import pytest

from tirtune.builder import toolchain, tvm_patches
from tirtune.core import Config, Problem
from tirtune.space.hopper.knobs import config as hopper_config


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
        (hopper_config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2, warp_specialized=True),
         Problem(1000, 1000, 1000)),
        (hopper_config(blk_m=64, blk_n=16, blk_k=128, stages=8, consumers=1, warp_specialized=True, swap_ab=True,
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


INLINE_SOURCE = '''@T.prim_func
def main(a: T.handle):
    @T.inline
    def helper(x):
        T.evaluate(x[1:4])
    helper(a)
'''


def test_a_kept_doc_tree_comes_back_as_parsed_whatever_the_parser_wrote_into_it() -> None:
    """TVMScript's parser writes into the tree (pops an inline function's decorator, shifts its
    lines, gives a slice a step): the next trace must get the tree as parsed, not as left."""
    tvm_patches.apply()
    from tvm.script.parser.core import doc

    first = doc.parse(INLINE_SOURCE)
    inline = first.body[0].body[0]
    fresh = tvm_patches._ORIGINAL_DOC_PARSE(INLINE_SOURCE)
    inline.decorator_list.pop()  # what visit_inline_function_def does
    inline.lineno += 100
    inline.body[0].value.args[0].slice.step = doc.Constant(1, None, 1, 1, 1, 2)  # the evaluator's default step
    again = doc.parse(INLINE_SOURCE)
    assert again is first  # kept, not parsed again
    assert _dump(again) == _dump(fresh)
    assert len(again.body[0].body[0].decorator_list) == 1 and again.body[0].body[0].lineno == 4


def _dump(node: object) -> str:
    from tvm.script.parser.core import doc

    if isinstance(node, list):
        return "[" + ",".join(_dump(n) for n in node) + "]"
    if isinstance(node, doc.AST):
        fields = ",".join(f"{f}={_dump(getattr(node, f, None))}" for f in node.__class__._FIELDS)
        return f"{type(node).__name__}({fields})"
    return repr(node)


def test_the_cheap_stack_gives_prim_func_the_frames_inspect_would() -> None:
    """What T.prim_func reads of its caller's frames (function, file, line, the line of context,
    the frame itself) is the same as inspect.stack gives."""

    def inner() -> tuple[list[inspect.FrameInfo], list[inspect.FrameInfo]]:
        return inspect.stack(), tvm_patches._InspectWithCheapStack("inspect").stack()

    theirs, ours = inner()
    assert len(ours) == len(theirs)
    for t, o in zip(theirs, ours, strict=True):
        assert (o.frame, o.lineno, o.function) == (t.frame, t.lineno, t.function)
        assert o.code_context == t.code_context or (t.code_context is None and o.code_context is None)
    assert ours[0].function == "inner" and ours[0].code_context and "inspect.stack()" in ours[0].code_context[0]
    assert tvm_patches._InspectWithCheapStack("inspect").isfunction(inner)  # the rest is inspect's own
