"""tirtune: find, per GEMM problem and GPU model, the fastest correct TIRx kernel configuration."""

from __future__ import annotations

__all__ = ["TirtuneError", "__version__"]

__version__ = "0.1.0"


class TirtuneError(Exception):
    """Root of every error tirtune raises on purpose; each package derives its own from it."""
