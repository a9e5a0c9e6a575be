"""The one run-time change tirtune makes inside TVM, applied before a template is traced.

What it replaces: `tvm.script.parser.core.parser.ScriptMacro._find_parser_def` (TVM 0.27), which
finds the active parser by calling `inspect.getouterframes(inspect.currentframe())` and reading
each frame's globals. `getouterframes` builds a FrameInfo per frame, and for each it resolves the
frame's source file through `inspect.getmodule`, which scans every loaded module when the file is
TVMScript's `<ast>`: about 60% of a template trace, once per macro call (issue 16,
shared/notes/build-speed.md).

The replacement walks the same frames in the same order (`frame.f_back` from the current one)
and returns the first parser found in a frame's globals, raising the same RuntimeError when there
is none: only the FrameInfo objects nobody reads are gone. The CUDA it produces is byte-identical
(tests/test_template_fold.py checks the recorded kernel-source hashes with it applied, and
tests/test_tvm_patches.py the lookup itself against the original). Anything unexpected in TVM's
shape (another version, the method renamed) leaves TVM untouched.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

__all__ = ["applied", "apply", "original"]

log = logging.getLogger(__name__)
_ORIGINAL: Any = None


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
    return True


def applied() -> bool:
    return _ORIGINAL is not None


def original() -> Any:
    """TVM's own method (None before `apply`): what the tests compare against."""
    return _ORIGINAL
