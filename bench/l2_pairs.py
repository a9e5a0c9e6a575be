"""The weights' L2 policy: every measured config beside its twins under the other policies.

    python -m bench.l2_pairs --out bench/results/generalize/<date>-l2-pairs

The l2_hint knob sets the L2 eviction priority of the kernel's A and B loads ("<A>/<B>", each
none, first or last). The weights (the problem's B) are the kernel's B, or its A with swap_ab;
every row of tiles re-reads them, while the activations are re-read by every column of tiles.
This reads the shipped priors (tirtune/model/data/*.csv.gz, every 16-bit measurement of each GPU
model), no GPU needed, and groups the configs of one problem and GPU that differ only in
l2_hint. Within a group each policy of the weights takes its best measured ratio (whatever the
activations' policy), and each pair of policies present is compared: the geomean of best(x) /
best(y) over groups, and in how many x won. Problems are classed by M: decode (M <= 64),
mid-sized (64 < M < 4096) and large; and by whether more than one row of tiles shares the
weights.

Writes OUT.json and OUT.md: {"source", "comparisons": [{"gpu", "size", "rows_share_weights",
"policies", "groups", "geomean", "wins"}]}.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.filing import dated
from bench.split_rounds import Measured, measured, prior_rows
from bench.suite import geomean
from tirtune.core import Config, Problem
from tirtune.model.prior import PRIOR_DIR

POLICIES = ("none", "first", "last")
COMPARED = (("none", "first"), ("last", "first"), ("last", "none"))


def weights_policy(config: Config) -> str:
    a, b = config.l2_hint.split("/")
    return a if config.swap_ab else b


def size_class(problem: Problem) -> str:
    return "decode" if problem.m <= 64 else "mid-sized" if problem.m < 4096 else "large"


def rows_of_tiles(config: Config, problem: Problem) -> int:
    """How many rows of tiles read each weight tile: M over the tile's side along M (blk_n swapped)."""
    return -(-problem.m // (config.blk_n if config.swap_ab else config.blk_m))


def comparisons(data: Measured) -> list[dict[str, Any]]:
    ratios: dict[tuple[str, str, bool, str, str], list[float]] = defaultdict(list)
    for (gpu, problem), configs in data.items():
        twins: dict[Config, dict[str, float]] = defaultdict(dict)
        for config, ratio in configs.items():
            policies = twins[config.replace(l2_hint="none/none")]
            w = weights_policy(config)
            policies[w] = max(policies.get(w, 0.0), ratio)
        for base, best in twins.items():
            shared = rows_of_tiles(base, problem) > 1
            for x, y in COMPARED:
                if x in best and y in best:
                    ratios[(gpu, size_class(problem), shared, x, y)].append(best[x] / best[y])
    out = []
    for (gpu, size, shared, x, y), rs in sorted(ratios.items()):
        out.append(
            {
                "gpu": gpu,
                "size": size,
                "rows_share_weights": shared,
                "policies": f"{x} over {y}",
                "groups": len(rs),
                "geomean": round(geomean(rs) or 0.0, 4),
                "wins": sum(1 for r in rs if r > 1.0),
            }
        )
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# The weights' L2 policy: each config beside its twins under the other policies",
        "",
        f"- source: {report['source']}; a group: the configs of one problem and GPU that differ only in l2_hint, "
        "each policy of the weights at its best measured ratio",
        "",
        "| GPU | size | rows of tiles share the weights | weights' policy | groups | geomean | wins |",
        "| --- | --- | --- | --- | ---: | ---: | ---: |",
    ]
    for c in report["comparisons"]:
        lines.append(
            f"| {c['gpu']} | {c['size']} | {'yes' if c['rows_share_weights'] else 'no'} | {c['policies']} | "
            f"{c['groups']} | {c['geomean']:.3f} | {c['wins']} of {c['groups']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=dated("generalize", "l2-pairs"))
    args = ap.parse_args(argv)
    report = {
        "source": str(PRIOR_DIR.relative_to(Path(__file__).resolve().parent.parent)) + "/*.csv.gz",
        "comparisons": comparisons(measured(prior_rows())),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
