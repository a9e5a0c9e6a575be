"""Each branch declares its knobs once, in its package's table (`tirtune.space.<branch>.knobs`):
type, default, values and meaning. The tables agree with `Config` (the stored identity), with
their branches' spaces and rules, and with the tables docs/design.md shows."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from tirtune.core import V2_KNOBS, Config, Knob, KnobTable, SpaceError
from tirtune.core.config import FIRST_KNOBS
from tirtune.space.blackwell.rules import IMPLEMENTED_KNOBS
from tirtune.space.branches import BRANCHES

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"


@pytest.mark.parametrize("arch", sorted(BRANCHES))
def test_a_branch_table_matches_config_and_its_space(arch: str) -> None:
    b = BRANCHES[arch]
    Config.conform(b.knobs)
    defaults = Config()
    for knob in b.knobs:
        assert getattr(defaults, knob.name) == knob.default
    # The current space draws exactly the table's values, for the knobs of its grid.
    assert set(b.space.knobs) <= set(b.knobs.names)
    assert all(b.space.knobs[name] == b.knobs[name].values for name in b.space.knobs)
    # Each knob the table leaves out of the grid holds one value (its default).
    assert all(b.knobs[name].values == (b.knobs[name].default,) for name in set(b.knobs.names) - set(b.space.knobs))


def test_every_config_knob_has_a_meaning_and_first_knobs_stay_in_the_digest() -> None:
    names = {f.name for f in fields(Config)}
    assert names == {k.name for b in BRANCHES.values() for k in b.knobs}
    assert set(V2_KNOBS) == names - set(FIRST_KNOBS)
    assert IMPLEMENTED_KNOBS == frozenset(BRANCHES["sm_100a"].knobs.names)


def test_a_table_that_disagrees_with_config_is_refused() -> None:
    with pytest.raises(SpaceError, match="blk_m defaults to 128 in Config, 64"):
        Config.conform(KnobTable(Knob("blk_m", int, 64, (64, 128), "rows")))
    with pytest.raises(SpaceError, match="swap_ab is a bool in Config, a int"):
        Config.conform(KnobTable(Knob("swap_ab", int, 0, (0, 1), "swapped")))
    with pytest.raises(SpaceError, match="warp_size is not a Config knob"):
        Config.conform(KnobTable(Knob("warp_size", int, 32, (32,), "threads")))


def test_a_knob_is_declared_whole() -> None:
    with pytest.raises(SpaceError, match="must be one of its values"):
        Knob("stages", int, 4, (1, 2), "depth")
    with pytest.raises(SpaceError, match="is not a int"):
        Knob("stages", int, True, (True,), "depth")
    with pytest.raises(SpaceError, match="say what it means"):
        Knob("stages", int, 4, (4,), " ")
    with pytest.raises(SpaceError, match="declared twice"):
        KnobTable(Knob("stages", int, 4, (4,), "depth"), Knob("stages", int, 4, (4,), "depth"))


@pytest.mark.parametrize("arch", sorted(BRANCHES))
def test_the_design_doc_shows_each_table(arch: str) -> None:
    """docs/design.md holds each branch's `KNOBS.markdown()` (regenerate it there when a knob changes)."""
    assert BRANCHES[arch].knobs.markdown() in DESIGN.read_text()
