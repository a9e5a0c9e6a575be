"""tirtune: find, per GEMM problem and GPU model, the fastest correct TIRx kernel configuration."""

from __future__ import annotations

from typing import Any

__all__ = ["TirtuneError", "__version__", "gemm", "nn"]

__version__ = "0.1.0"


class TirtuneError(Exception):
    """Root of every error tirtune raises on purpose; each package derives its own from it."""


def __getattr__(name: str) -> Any:
    """`tirtune.gemm` and `tirtune.nn`, imported on first use (PEP 562): they need torch, and the
    root stays the bottom of the import graph for everything else (tests/import_graph.py reads
    this function as the package's face, not as a dependency)."""
    if name == "gemm":
        from tirtune.dispatch.op import gemm

        return gemm
    if name == "nn":
        import tirtune.nn as nn

        return nn
    raise AttributeError(f"module 'tirtune' has no attribute {name!r}")
