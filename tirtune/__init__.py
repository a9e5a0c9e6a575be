"""tirtune: find, per GEMM problem and GPU model, the fastest correct TIRx kernel configuration."""

from __future__ import annotations

from typing import Any

from tirtune.core.errors import TirtuneError
from tirtune.core.version import __version__

__all__ = ["TirtuneError", "__version__", "gemm", "nn", "pack_gate_up", "scaled_gemm", "unpack_gate_up"]


def __getattr__(name: str) -> Any:
    """`tirtune.gemm`, `tirtune.scaled_gemm` (FP8), `tirtune.nn` and the swiglu weight packing
    (`pack_gate_up`, `unpack_gate_up`),
    imported on first use (PEP 562): they need torch, and
    `import tirtune` does not. The root module is the package's face, the top of the import graph
    (tests/import_graph.py): it re-exports the root exception and the version from `tirtune.core`,
    and nothing of tirtune imports it."""
    if name == "gemm":
        from tirtune.dispatch.op import gemm

        return gemm
    if name == "scaled_gemm":
        from tirtune.dispatch.scaled import scaled_gemm

        return scaled_gemm
    if name == "pack_gate_up":
        from tirtune.dispatch.op import pack_gate_up

        return pack_gate_up
    if name == "unpack_gate_up":
        from tirtune.dispatch.op import unpack_gate_up

        return unpack_gate_up
    if name == "nn":
        import tirtune.nn as nn

        return nn
    raise AttributeError(f"module 'tirtune' has no attribute {name!r}")
