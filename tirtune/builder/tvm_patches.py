"""The four run-time changes tirtune makes inside TVM (0.27), applied around every lowering.

1. Speed. What it replaces: `tvm.script.parser.core.parser.ScriptMacro._find_parser_def`, which
finds the active parser by calling `inspect.getouterframes(inspect.currentframe())` and reading
each frame's globals. `getouterframes` builds a FrameInfo per frame, and for each it resolves the
frame's source file through `inspect.getmodule`, which scans every loaded module when the file is
TVMScript's `<ast>`: about 60% of a template trace, once per macro call (profiled while
speeding up the build, `bench/build_speed.py`).

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

3. Speed. What it wraps: `tvm.script.parser.core.doc.parse`, which turns a function's source
into TVMScript's doc AST (Python's `ast.parse`, then a node-by-node copy into doc classes). The
parser calls it for every `T.prim_func` and every macro use, on the template's same few sources,
each trace: a third of a warm lowering (`bench/build_speed.py`). The wrapper keeps the tree per source text with
a record of every node's fields, and before handing the tree out again puts every field back as
parsed: the parser writes into the tree (it pops `T.inline` decorators and shifts their line
numbers, gives slices a step, flips an augmented target's context), and those writes must not
reach the next trace. Putting ~25k fields back costs a tenth of converting them anew.

4. Speed. What it replaces: the `inspect` that `tvm.tirx.script.parser.entry` sees, for
`inspect.stack()` alone, which `T.prim_func` calls for its caller's frames (to tell a function
defined in a class body, and to resolve annotation names of enclosing scopes) and which builds a
FrameInfo per frame through `inspect.getframeinfo`, resolving each frame's source file module by
module: an eighth of a warm lowering. The replacement builds the same FrameInfo fields straight
from the frames (file and line from the code object, the one line of context from linecache, None
where there is no source), everything else of `inspect` as it is.

Each change is checked by the 125 recorded kernel-source hashes (tests/test_template_fold.py,
lowered with all of them applied) and by tests/test_tvm_patches.py against TVM's own. Anything
unexpected in TVM's shape (another version, a name gone) leaves that part of TVM untouched, with
a warning.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import linecache
import logging
import types
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
    _cache_doc_parse()
    _cheap_prim_func_stack()
    return True


_ORIGINAL_DOC_PARSE: Any = None
_DOC_TREES: dict[tuple[str, str, str], _Parsed] = {}


class _Parsed:
    """A doc tree and every node's fields as parsed (lists as tuples, to be copied back)."""

    def __init__(self, tree: Any, node_type: type) -> None:
        self.tree = tree
        self.fields: list[tuple[Any, list[tuple[str, Any, bool]]]] = []
        todo = [tree]
        while todo:
            node = todo.pop()
            saved: list[tuple[str, Any, bool]] = []
            for name in node.__class__._FIELDS:
                value = getattr(node, name, None)
                if isinstance(value, list):
                    saved.append((name, tuple(value), True))
                    todo.extend(v for v in value if isinstance(v, node_type))
                else:
                    saved.append((name, value, False))
                    if isinstance(value, node_type):
                        todo.append(value)
            self.fields.append((node, saved))

    def restored(self) -> Any:
        for node, saved in self.fields:
            for name, value, was_list in saved:
                setattr(node, name, list(value) if was_list else value)
        return self.tree


def _doc_parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> Any:
    key = (source, filename, mode)
    parsed = _DOC_TREES.get(key)
    if parsed is None:
        from tvm.script.parser.core import doc

        tree = _ORIGINAL_DOC_PARSE(source, filename, mode)
        _DOC_TREES[key] = _Parsed(tree, doc.AST)
        return tree
    return parsed.restored()


def _cache_doc_parse() -> None:
    global _ORIGINAL_DOC_PARSE
    try:
        from tvm.script.parser.core import doc
    except ImportError:
        return
    if getattr(doc, "parse", None) is None:
        log.warning("TVMScript's doc.parse is gone: sources are parsed on every trace (slower)")
        return
    _ORIGINAL_DOC_PARSE = doc.parse
    doc.parse = _doc_parse


def _cheap_stack(context: int = 1) -> list[inspect.FrameInfo]:
    """`inspect.stack(context)` for the caller, each FrameInfo made from its frame directly."""
    infos = []
    frame = inspect.currentframe()
    frame = frame.f_back if frame is not None else None
    while frame is not None:
        code = frame.f_code
        line = linecache.getline(code.co_filename, frame.f_lineno, frame.f_globals) if context > 0 else ""
        infos.append(
            inspect.FrameInfo(
                frame, code.co_filename, frame.f_lineno, code.co_name, [line] if line else None, 0 if line else None
            )
        )
        frame = frame.f_back
    return infos


class _InspectWithCheapStack(types.ModuleType):
    """`inspect`, but for `stack`."""

    def __getattr__(self, name: str) -> Any:
        return getattr(inspect, name)

    @staticmethod
    def stack(context: int = 1) -> list[inspect.FrameInfo]:
        return _cheap_stack(context)[1:]  # from stack()'s caller, as inspect.stack counts


def _cheap_prim_func_stack() -> None:
    try:
        from tvm.tirx.script.parser import entry
    except ImportError:
        return
    if getattr(entry, "inspect", None) is not inspect:
        log.warning("tvm.tirx.script.parser.entry does not use inspect as expected: left as it is")
        return
    entry.inspect = _InspectWithCheapStack("inspect")


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
