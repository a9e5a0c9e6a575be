"""The one run-time change inside TVM (tirtune/workers/tvm_patches.py): same CUDA, same lookup."""

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
