"""A config's digest is its stored identity: every build and measurement is keyed by it. The table
in tests/data/config_digests.json holds the canonical text and digest of a spread of configs (the
default, every knob off its default alone, the start configs, the Blackwell journey, valid configs
drawn from every space); these must come out the same from every version of the code, read with the Hopper table and, where
a row is a point of it, with the Blackwell table (which holds the Hopper knobs it lacks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tirtune.core import Config
from tirtune.space.blackwell.knobs import KNOBS as BLACKWELL_KNOBS
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS

TABLE = Path(__file__).parent / "data" / "config_digests.json"
ROWS: list[dict[str, Any]] = json.loads(TABLE.read_text())["rows"]


def test_the_table_is_a_spread() -> None:
    """Every knob is off its default in some row, and the rows are distinct configs."""
    assert len(ROWS) > 400
    assert len({row["digest"] for row in ROWS}) == len(ROWS)
    assert set(HOPPER_KNOBS.names) == {name for row in ROWS for name in row["config"]}


@pytest.mark.parametrize("row", ROWS, ids=[row["digest"] for row in ROWS])
def test_canonical_text_and_digest_are_unchanged(row: dict[str, Any]) -> None:
    config = Config.from_json(row["config"], HOPPER_KNOBS)
    assert config.canonical() == row["canonical"]
    assert config.digest() == row["digest"]
    assert Config.from_json(config.to_json(), HOPPER_KNOBS) == config
    held = {k.name for k in BLACKWELL_KNOBS if k.held}
    if all(config.to_json()[name] == HOPPER_KNOBS[name].default for name in held):
        blackwell = Config.from_json(row["config"], BLACKWELL_KNOBS)
        assert (blackwell.canonical(), blackwell.digest()) == (row["canonical"], row["digest"])
