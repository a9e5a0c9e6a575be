"""The root cause of a failed build, in one line: what a person needs before the full log.

A failed lowering raises through TVMScript's parser, whose message ends with the whole kernel
script; nvcc prints one ptxas error per PTX line it rejects. The decisive line is elsewhere: the
reason in TIRx's dispatch table, the first `error` of ptxas or the C++ front end, the innermost
exception of a chain. `root_cause` finds it, so a stored message, the CLI's table, `GET /jobs/{id}`
and the dashboard can lead with it (the full tail follows on the next lines).
"""

from __future__ import annotations

import re

__all__ = ["ROOT_CAUSE_CHARS", "root_cause"]

ROOT_CAUSE_CHARS = 300

# "| tma_auto (prio=10) | declined — <reason>; use dispatch=... |" (first row of a variant)
_DISPATCH_HEAD = re.compile(r"TIRx schedule dispatch failed: op=(\S+)")
_DISPATCH_ROW = re.compile(r"^\|\s*(\S[^|]*?)\s*\|\s*(.*?)\s*\|\s*$")
# "ptxas /tmp/x.ptx, line 324; error   : Unknown modifier ..." and "ptxas error   : Entry function ..."
_PTXAS = re.compile(r"^ptxas\b(?:.*?, line (\d+);)?\s*error\s*:\s*(.+)$")
_CXX = re.compile(r"^(?:.*?)\((\d+)\): error: (.+)$")
_SCRIPT_ERROR = re.compile(r"^\s*error: (.+)$")
_EXCEPTION = re.compile(r"^(?:tvm\.\w+\.)?(\w*(?:Error|Exception)): (.+)$")
_CHAIN = "-- caused by --"


def root_cause(text: str) -> str:
    """The one line that says why a build failed (at most ROOT_CAUSE_CHARS characters)."""
    for finder in (_dispatch, _ptxas, _cxx, _script_error, _innermost_exception):
        found = finder(text)
        if found:
            return _clip(found)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "no message")
    return _clip(first)


def _dispatch(text: str) -> str | None:
    """TIRx's dispatch table: each variant that declined, with its reason (the hint dropped)."""
    head = _DISPATCH_HEAD.search(text)
    if head is None:
        return None
    reasons = []
    for line in text[head.end() :].splitlines():
        if line.startswith("Error in pass") or line.startswith("Location"):
            break
        row = _DISPATCH_ROW.match(line)
        if row is None or row.group(1) == "Variant":
            continue
        variant, error = row.groups()
        error = re.sub(r"^declined\s*[—-]\s*", "", error)
        error = re.split(r";\s*use dispatch=", error)[0]
        reasons.append(f"{variant.split(' (')[0]}: {error}")
    detail = "; ".join(reasons) if reasons else "no variant applies"
    return f"TIRx could not dispatch {head.group(1)}: {detail}"


def _ptxas(text: str) -> str | None:
    errors = [m for line in text.splitlines() if (m := _PTXAS.match(line.strip()))]
    if not errors:
        return None
    line, message = errors[0].groups()
    where = f" (PTX line {line})" if line else ""
    more = f"; {len(errors) - 1} more error(s)" if len(errors) > 1 else ""
    return f"ptxas: {message.strip()}{where}{more}"


def _cxx(text: str) -> str | None:
    for line in text.splitlines():
        m = _CXX.match(line.strip())
        if m:
            return f"nvcc: {m.group(2).strip()} (line {m.group(1)} of the generated CUDA)"
    return None


def _script_error(text: str) -> str | None:
    for line in text.splitlines():
        m = _SCRIPT_ERROR.match(line)
        if m:
            return m.group(1).strip()
    return None


def _innermost_exception(text: str) -> str | None:
    """The last `SomethingError: message` line of the innermost link of an exception chain."""
    for part in reversed(text.split(_CHAIN)):
        found = [m for line in part.splitlines() if (m := _EXCEPTION.match(line.strip()))]
        if found:
            kind, message = found[0].groups()
            return f"{kind}: {message.strip()}"
    return None


def _clip(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= ROOT_CAUSE_CHARS else line[: ROOT_CAUSE_CHARS - 1] + "…"
