"""tirtune's version: `tirtune.__version__`, the CLI's `--version` and the API's OpenAPI document."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
