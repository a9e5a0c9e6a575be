"""bench/l2_pairs.py: each config beside its twins that differ only in l2_hint, the weights'
policy read from the right half of the hint (the kernel's B, or its A with swap_ab)."""

from __future__ import annotations

import pytest

from bench import l2_pairs
from tirtune.core import Problem
from tirtune.space.hopper.knobs import config as hopper_config


def test_the_weights_policy_is_bs_unswapped_and_as_swapped() -> None:
    assert l2_pairs.weights_policy(hopper_config(l2_hint="none/first")) == "first"
    assert l2_pairs.weights_policy(hopper_config(l2_hint="last/first", swap_ab=True)) == "last"
    problem = Problem(398, 11008, 4096)
    assert l2_pairs.rows_of_tiles(hopper_config(blk_m=128, blk_n=64), problem) == 4
    assert l2_pairs.rows_of_tiles(hopper_config(blk_m=64, blk_n=136, swap_ab=True), problem) == 3
    assert [l2_pairs.size_class(Problem(m, 4096, 4096)) for m in (64, 65, 4095, 4096)] == [
        "decode", "mid-sized", "mid-sized", "large"]


def test_twins_are_compared_per_policy_of_the_weights_at_its_best() -> None:
    base = hopper_config(blk_m=128, blk_n=128, stages=4, consumers=2)
    mid, decode = Problem(512, 4096, 4096), Problem(16, 4096, 4096)
    data = {
        ("GPU", mid): {
            base.replace(l2_hint="none/first"): 1.00,
            base.replace(l2_hint="none/none"): 0.90,
            base.replace(l2_hint="first/none"): 0.95,  # the default policy's best: 0.95
            base.replace(l2_hint="first/last"): 1.10,
            base.replace(blk_n=64): 0.5,  # no twin: no group of its own
        },
        # one row of tiles (swapped: 16 tokens in one 64-wide column)
        ("GPU", decode): {
            base.replace(swap_ab=True, blk_m=64, blk_n=64, l2_hint="none/first"): 1.2,
            base.replace(swap_ab=True, blk_m=64, blk_n=64, l2_hint="first/none"): 0.6,
        },
    }
    by = {(c["size"], c["policies"]): c for c in l2_pairs.comparisons(data)}
    assert len(by) == 4
    none_first = by[("mid-sized", "none over first")]
    assert none_first["rows_share_weights"] and none_first["groups"] == 1 and none_first["wins"] == 0
    assert none_first["geomean"] == pytest.approx(0.95)
    assert by[("mid-sized", "last over first")]["geomean"] == pytest.approx(1.10)
    assert by[("mid-sized", "last over none")]["geomean"] == pytest.approx(round(1.10 / 0.95, 4))
    swapped = by[("decode", "none over first")]  # the weights are A: "none/first" is none, "first/none" first
    assert not swapped["rows_share_weights"] and swapped["geomean"] == pytest.approx(2.0) and swapped["wins"] == 1
