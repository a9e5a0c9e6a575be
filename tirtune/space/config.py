"""Re-exports for the old import path (see the comment below)."""

from __future__ import annotations

# moved to tirtune.core.config; shim kept until the parallel branches are merged
from tirtune.core.config import V2_KNOBS, Config

__all__ = ["V2_KNOBS", "Config"]
