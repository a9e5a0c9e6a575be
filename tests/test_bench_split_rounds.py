"""bench/split_rounds.py: each measured split beside its unsplit twin, grouped by whether it adds rounds."""

from __future__ import annotations

from bench import split_rounds
from tirtune.core import Problem
from tirtune.space.hopper.knobs import config as hopper_config


def test_a_split_is_paired_with_its_best_unsplit_twin_whatever_its_reduction_knob() -> None:
    base = hopper_config(blk_m=128, blk_n=64, blk_k=128, stages=4, consumers=2, l2_hint="none/first")
    small, large = Problem(128, 4096, 4096), Problem(512, 4096, 4096)
    data = {
        # 64 tiles: split in two, 128 CTAs, still one round; the twin measured twice (its reduction
        # knob differs, the kernel does not): the better one counts.
        ("GPU", small): {
            base.replace(split_k=2): 1.10,
            base: 0.90,
            base.replace(split_k_reduce="serial"): 0.92,
            base.replace(split_k=4): 0.75,  # 256 CTAs: two rounds
        },
        # 256 tiles: split in two, four rounds against two.
        ("GPU", large): {base.replace(split_k=2): 0.50, base: 0.70},
        # a split without a measured twin is not a pair
        ("GPU", Problem(256, 4096, 4096)): {base.replace(split_k=2): 0.80},
    }
    pairs = split_rounds.pairs(data)
    by = {(p["problem"], p["config"]): p for p in pairs}
    assert len(pairs) == 3
    two = by[("128x4096x4096", base.replace(split_k=2).label())]
    assert (two["rounds"], two["unsplit_rounds"], two["unsplit_ratio"]) == (1, 1, 0.92)
    assert by[("128x4096x4096", base.replace(split_k=4).label())]["rounds"] == 2
    assert by[("512x4096x4096", base.replace(split_k=2).label())]["rounds"] == 4

    groups = {g["adds_rounds"]: g for g in split_rounds.groups(pairs)}
    assert (groups[False]["pairs"], groups[False]["split_wins"]) == (1, 1)
    assert (groups[True]["pairs"], groups[True]["problems"], groups[True]["split_wins"]) == (2, 2, 0)
    assert all(g["dtype_group"] == "16-bit" and not g["decode"] for g in groups.values())
