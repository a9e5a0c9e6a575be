"""The two run-time changes tirtune makes inside TVM (0.27), applied around every lowering.

1. Speed. What it replaces: `tvm.script.parser.core.parser.ScriptMacro._find_parser_def`, which
finds the active parser by calling `inspect.getouterframes(inspect.currentframe())` and reading
each frame's globals. `getouterframes` builds a FrameInfo per frame, and for each it resolves the
frame's source file through `inspect.getmodule`, which scans every loaded module when the file is
TVMScript's `<ast>`: about 60% of a template trace, once per macro call (issue 16,
shared/notes/build-speed.md).

The replacement walks the same frames in the same order (`frame.f_back` from the current one)
and returns the first parser found in a frame's globals, raising the same RuntimeError when there
is none: only the FrameInfo objects nobody reads are gone. The CUDA it produces is byte-identical
(tests/test_template_fold.py checks the recorded kernel-source hashes with it applied, and
tests/test_tvm_patches.py the lookup itself against the original).

2. Determinism. What it wraps: `tvm.backend.cuda.tile_primitive.copy_async.tma._buffer_base`,
which returns (base pointer, key, byte offset); the key names the base in the kernel's tensor-map
cache as `f"{hash(buffer.data)}:{base}"`. For a TIRx buffer `buffer.data` builds a new
`handle_add_byte_offset(A.data, 0)` Call at each access, and `hash` of a TVM object is the
address of its C++ node, so the key hashes a temporary that dies on that line: two copies get the
same key, and share one tensor map, only when the allocator happens to give their temporaries
the same address. The same kernel lowered in two processes could so have 9 tensor-map parameters
or 8 (seen in CI: one of the 125 recorded kernels, about 1 lowering in 40, with the maps
renumbered). The wrapper keeps TVM's base and offset and replaces the key's hash part with a
number unique within the lowering: the outcome when no address is reused, which is the one every
recorded kernel hash has, now always. The key is used for nothing else.

Anything unexpected in TVM's shape (another version, a name gone) leaves that part of TVM
untouched, with a warning.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import logging
from collections.abc import Iterator
from typing import Any

__all__ = ["applied", "apply", "lowering", "original"]

log = logging.getLogger(__name__)
_ORIGINAL: Any = None
_ORIGINAL_BUFFER_BASE: Any = None
_KEYS = itertools.count()  # the tensor-map base keys of the current lowering


def _find_parser_def(self: Any) -> Any:
    from tvm.script.parser.core.parser import ScriptMacro

    frame = inspect.currentframe()
    while frame is not None:
        parser = frame.f_globals.get(ScriptMacro.parser_object_name)
        if parser is not None:
            return parser
        frame = frame.f_back
    raise RuntimeError(f"{ScriptMacro.parser_object_name} not available")


def apply() -> bool:
    """Install the replacement once per process; False (TVM untouched) if TVM is not as expected."""
    global _ORIGINAL
    if _ORIGINAL is not None:
        return True
    try:
        from tvm.script.parser.core.parser import ScriptMacro
    except ImportError:
        return False
    original = getattr(ScriptMacro, "_find_parser_def", None)
    if original is None or not hasattr(ScriptMacro, "parser_object_name"):
        log.warning("TVMScript's ScriptMacro has no _find_parser_def: lowering runs unpatched (slower)")
        return False
    _ORIGINAL = original
    ScriptMacro._find_parser_def = _find_parser_def
    _wrap_buffer_base()
    return True


def _buffer_base(buffer: Any, *, auto: bool, stage: str) -> tuple[Any, str, Any]:
    base, _key, byte_offset = _ORIGINAL_BUFFER_BASE(buffer, auto=auto, stage=stage)
    return base, f"{next(_KEYS)}:{base}", byte_offset


def _wrap_buffer_base() -> None:
    global _ORIGINAL_BUFFER_BASE
    try:
        from tvm.backend.cuda.tile_primitive.copy_async import tma
    except ImportError:
        log.warning("TVM has no tile_primitive.copy_async.tma: tensor-map keys left as they are")
        return
    original = getattr(tma, "_buffer_base", None)
    if original is None:
        log.warning("tma._buffer_base is gone: tensor-map keys left as they are (kernels may vary by process)")
        return
    _ORIGINAL_BUFFER_BASE = original
    tma._buffer_base = _buffer_base


@contextlib.contextmanager
def lowering() -> Iterator[None]:
    """Around one lowering (under toolchain._TRACE_LOCK): the patches installed, and the
    tensor-map keys numbered from 0, so a kernel's lowering never depends on what came before."""
    global _KEYS
    apply()
    _KEYS = itertools.count()
    yield


def applied() -> bool:
    return _ORIGINAL is not None


def original() -> Any:
    """TVM's own method (None before `apply`): what the tests compare against."""
    return _ORIGINAL
