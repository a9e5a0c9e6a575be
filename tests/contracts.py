"""Does a class implement one of our Protocols? `isinstance` against a runtime-checkable Protocol
only asks whether the method names exist; this compares each method's signature with the
Protocol's: parameter names, kinds and defaults, and the annotations (resolved)."""

from __future__ import annotations

import inspect
import typing
from typing import Any


def _hints(function: Any) -> dict[str, Any]:
    return typing.get_type_hints(function)


def _accepts(have: Any, want: Any) -> bool:
    """`have` takes at least what `want` names: the same, Any, or the same generic of Any."""
    if have in (want, Any):
        return True
    args = typing.get_args(have)
    return bool(args) and typing.get_origin(have) is typing.get_origin(want) and all(a is Any for a in args)


def mismatches(implementation: type, protocol: type) -> list[str]:
    """What differs, one line per difference; empty when `implementation` fits `protocol`.

    An implementation may add parameters that have defaults and may take `Any` where the
    Protocol names a type (it accepts more)."""
    found = []
    methods = [n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")]
    for name in methods:
        have = getattr(implementation, name, None)
        if have is None:
            found.append(f"{name}: missing")
            continue
        want_sig, have_sig = inspect.signature(getattr(protocol, name)), inspect.signature(have)
        want_hints, have_hints = _hints(getattr(protocol, name)), _hints(have)
        have_params = list(have_sig.parameters.values())
        for i, want in enumerate(want_sig.parameters.values()):
            if i >= len(have_params):
                found.append(f"{name}: no parameter {want.name!r}")
                continue
            got = have_params[i]
            if (got.name, got.kind, got.default) != (want.name, want.kind, want.default):
                found.append(f"{name}: parameter {i} is {got} where the protocol has {want}")
            elif want.name in want_hints and not _accepts(have_hints.get(want.name), want_hints[want.name]):
                found.append(f"{name}: {want.name} is {have_hints.get(want.name)}, not {want_hints[want.name]}")
        for extra in have_params[len(want_sig.parameters):]:
            if extra.default is inspect.Parameter.empty and extra.kind not in (extra.VAR_POSITIONAL, extra.VAR_KEYWORD):
                found.append(f"{name}: extra required parameter {extra.name!r}")
        if have_hints.get("return") != want_hints.get("return"):
            found.append(f"{name}: returns {have_hints.get('return')}, not {want_hints.get('return')}")
    return found
