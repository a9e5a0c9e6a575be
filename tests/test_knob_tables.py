"""Each branch declares its knobs once, in its package's table (`tirtune.space.<branch>.knobs`):
type, default, values and meaning. A config is a point of one table, checked against it; the tables
agree with their branches' spaces and rules, and with the tables docs/design.md shows."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from tirtune.core import Config, Knob, KnobTable, SpaceError
from tirtune.core.knobs import CONFIG_ATTRIBUTES
from tirtune.space.blackwell.knobs import KNOBS as BLACKWELL_KNOBS
from tirtune.space.blackwell.knobs import config as blackwell_config
from tirtune.space.blackwell.rules import IMPLEMENTED_KNOBS
from tirtune.space.branches import BRANCHES
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.space.hopper.knobs import config as hopper_config
from tirtune.space.hopper.spaces import same_kernel

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"


@pytest.mark.parametrize("arch", sorted(BRANCHES))
def test_a_branch_table_matches_its_space(arch: str) -> None:
    b = BRANCHES[arch]
    defaults = Config(b.knobs)
    for knob in b.knobs:
        assert getattr(defaults, knob.name) == knob.default
    assert b.space.table is b.knobs  # the space's configs are points of the branch's table
    # The current space draws exactly the table's values, for the knobs of its grid.
    assert set(b.space.knobs) <= set(b.knobs.names)
    assert all(b.space.knobs[name] == b.knobs[name].values for name in b.space.knobs)
    # Each knob the table leaves out of the grid holds one value (its default).
    assert all(b.knobs[name].values == (b.knobs[name].default,) for name in set(b.knobs.names) - set(b.space.knobs))


def test_blackwell_holds_every_hopper_knob_it_does_not_declare_at_its_default() -> None:
    own = {k.name for k in BLACKWELL_KNOBS.own}
    assert own == IMPLEMENTED_KNOBS and own < set(HOPPER_KNOBS.names)
    assert set(BLACKWELL_KNOBS.names) == set(HOPPER_KNOBS.names)
    for knob in BLACKWELL_KNOBS:
        hopper = HOPPER_KNOBS[knob.name]
        assert (knob.type, knob.default) == (hopper.type, hopper.default)
        assert knob.held == (knob.name not in own)
        if knob.held:
            assert knob.values == (knob.default,)
    assert BLACKWELL_KNOBS.first == HOPPER_KNOBS.first and BLACKWELL_KNOBS.labels is HOPPER_KNOBS.labels
    # A knob added to the Hopper table is held by a table that holds it, without an edit there.
    grown = KnobTable(*HOPPER_KNOBS, Knob("new_knob", int, 3, (1, 3), "a knob added later"))
    holder = KnobTable(*BLACKWELL_KNOBS.own, holds=grown)
    assert holder["new_knob"].held and holder["new_knob"].values == (3,)


def test_a_config_of_either_branch_is_the_same_point_with_the_same_digest() -> None:
    knobs = {"blk_m": 256, "blk_n": 192, "consumers": 2, "persistent": True, "cluster": 2}
    hopper, blackwell = hopper_config(**knobs), blackwell_config(**knobs)
    assert hopper == blackwell and hash(hopper) == hash(blackwell)
    assert hopper.digest() == blackwell.digest() and hopper.label() == blackwell.label()
    assert hopper.table is HOPPER_KNOBS and blackwell.table is BLACKWELL_KNOBS


def test_a_config_is_checked_against_its_table() -> None:
    with pytest.raises(SpaceError, match="unknown config knob.*warp_size"):
        hopper_config(warp_size=32)
    with pytest.raises(SpaceError, match="config knob swap_ab must be true or false"):
        hopper_config(swap_ab=1)
    with pytest.raises(SpaceError, match="config knob blk_m must be an integer"):
        hopper_config(blk_m="128")
    table = KnobTable(Knob("depth", int, 4, (2, 4), "ring depth"), home=None)
    assert Config(table, depth=2).depth == 2
    with pytest.raises(SpaceError, match="unknown config knob.*blk_m"):
        Config(table, blk_m=64)
    with pytest.raises(AttributeError, match="no knob 'blk_m'"):
        _ = Config(table).blk_m
    with pytest.raises(SpaceError, match="a config is a point of a knob table"):
        Config({"blk_m": 64})  # type: ignore[arg-type]


def test_a_config_is_frozen_and_replace_checks_the_change() -> None:
    base = hopper_config(blk_m=64)
    with pytest.raises(AttributeError, match="frozen"):
        base.blk_m = 128  # type: ignore[misc]
    assert base.replace(blk_n=96) == hopper_config(blk_m=64, blk_n=96) and base.blk_n == 128
    with pytest.raises(SpaceError, match="config knob stages must be an integer"):
        base.replace(stages="4")
    assert base.replace().table is HOPPER_KNOBS


def test_a_config_pickles_with_its_table_named() -> None:
    for config in (hopper_config(blk_m=64, swap_ab=True), blackwell_config(blk_m=256, consumers=2)):
        back = pickle.loads(pickle.dumps(config))
        assert back == config and back.table is config.table
    with pytest.raises(TypeError, match="without a home"):
        pickle.dumps(Config(KnobTable(Knob("depth", int, 4, (4,), "ring depth"))))


def test_the_first_knobs_stay_in_every_canonical_text() -> None:
    assert HOPPER_KNOBS.first == ("blk_m", "blk_n", "blk_k", "stages", "consumers", "warp_specialized")
    default = hopper_config()
    assert default.canonical() == (
        '{"blk_k":64,"blk_m":128,"blk_n":128,"consumers":2,"stages":4,"warp_specialized":true}'
    )
    assert '"swap_ab":true' in default.replace(swap_ab=True).canonical()
    with pytest.raises(SpaceError, match="first knob.*not in the table"):
        KnobTable(Knob("depth", int, 4, (4,), "ring depth"), first=("blk_m",))


def test_a_knob_name_never_hides_what_a_config_answers_to() -> None:
    public = {name for name in dir(Config) if not name.startswith("_")}
    assert public == set(CONFIG_ATTRIBUTES)
    for name in ("digest", "_hidden", "two words"):
        with pytest.raises(SpaceError, match="a knob is read as a config's attribute"):
            KnobTable(Knob(name, int, 1, (1,), "a knob"))


def test_a_held_knob_must_agree_with_the_table_it_holds() -> None:
    with pytest.raises(SpaceError, match="blk_m: int 64 here, int 128 in the table it holds"):
        KnobTable(Knob("blk_m", int, 64, (64, 128), "rows"), holds=HOPPER_KNOBS)


@pytest.mark.parametrize("knob", HOPPER_KNOBS.names)
def test_every_hopper_knob_off_its_default_reads_back_from_its_label(knob: str) -> None:
    """A knob added without its label word fails here: tables and CSVs name configs by label. The
    label leaves out what the template ignores (cluster_dim without a cluster, the reduction
    without a split: `same_kernel`)."""
    values = [v for v in HOPPER_KNOBS[knob].values if v != HOPPER_KNOBS[knob].default] or [
        {bool: True, int: 2, str: "tail"}[HOPPER_KNOBS[knob].type]
    ]
    for value in values:
        config = hopper_config(**{knob: value})
        assert Config.from_label(config.label(), HOPPER_KNOBS) == same_kernel(config), (knob, value, config.label())


def test_a_table_without_labels_names_its_knobs() -> None:
    table = KnobTable(Knob("depth", int, 4, (2, 4), "ring depth"), Knob("wide", bool, False, (False, True), "w"),
                      first=("depth",))
    config = Config(table, wide=True)
    assert config.label() == "depth=4 wide=True"
    assert Config.from_label(config.label(), table) == config
    with pytest.raises(SpaceError, match="not a config label"):
        Config.from_label("deep=4", table)


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
