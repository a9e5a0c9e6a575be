"""Where a result is filed: bench/results/<topic>/<date>-<what> (bench/README.md, "Results").

The date is the run's (UTC), so a script's default output lands beside the earlier results of its
topic without overwriting them; a second run on the same day with the same name replaces the first.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def dated(topic: str, what: str) -> Path:
    """bench/results/<topic>/<today, UTC>-<what> (no suffix: the script adds .json, .md, ...)."""
    return RESULTS / topic / f"{datetime.now(UTC):%Y-%m-%d}-{what}"
