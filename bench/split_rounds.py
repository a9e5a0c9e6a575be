"""When splitting K pays: every measured split beside its unsplit twin, by whether it adds rounds.

    python -m bench.split_rounds --out bench/results/generalize/<date>-split-rounds

Split-K gives each output tile split_k CTAs, each over 1/split_k of the k-tiles, and pays for it
with a reduction. It is meant to fill SMs that too few tiles leave idle; once the tiles alone fill
the SMs, the split only adds CTAs, and those run as further rounds. This reads every measurement
on file, no GPU needed:

- the shipped priors (tirtune/model/data/*.csv.gz: the 16-bit measurements of each GPU model);
- the FP8 suites' trial tables (bench/results/fp8/*-trials.csv, the GPU named by the report
  beside each).

For each problem and GPU, each config that splits every tile (split_k > 1, split_k_scope "all",
no stream-K) is paired with its unsplit twin (the same config with split_k 1, any reduction) where
both were measured, the best of each taken. A pair "adds rounds" when the split's CTAs
(`rules.rounds`: tiles x split_k over 132 SMs x the CTAs one SM holds) fill the SMs more times
than the twin's. Decode problems (M <= 16) are counted apart: they are bound by the weights'
bytes, where more CTAs in flight is what a split can buy.

Writes OUT.json and OUT.md: {"sources", "groups": [{"dtype_group", "decode", "adds_rounds",
"pairs", "problems", "geomean_split_over_unsplit", "split_wins"}], "pairs": [...]}.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.filing import RESULTS, dated
from tirtune.core import Config, Problem
from tirtune.model.prior import PRIOR_DIR
from tirtune.space.hopper.knobs import KNOBS
from tirtune.space.hopper.rules import rounds
from tirtune.space.hopper.spaces import same_kernel

# (gpu, problem) -> config -> best ratio measured
Measured = dict[tuple[str, Problem], dict[Config, float]]


def prior_rows(folder: Path = PRIOR_DIR) -> Iterator[tuple[str, Problem, Config, float]]:
    for path in sorted(folder.glob("*.csv.gz")):
        for r in csv.DictReader(io.StringIO(gzip.decompress(path.read_bytes()).decode())):
            problem = Problem(int(r["m"]), int(r["n"]), int(r["k"]), r["dtype"])
            yield r["gpu_name"], problem, Config.from_json(json.loads(r["config"]), KNOBS), float(r["ratio"])


def fp8_rows(folder: Path = RESULTS / "fp8") -> Iterator[tuple[str, Problem, Config, float]]:
    """The FP8 suites' correct trials. A trials table names its problem but not its scaling, so
    here every scaling's jobs of a problem count as one problem, and a pair may join a split
    config of one scaling's job with its twin from another's (their configs rank alike, but for
    block scales)."""
    for path in sorted(folder.glob("*-trials.csv")):
        report = path.with_name(path.name.removesuffix("-trials.csv") + ".json")
        gpu = json.loads(report.read_text()).get("gpu", "") if report.is_file() else ""
        for r in csv.DictReader(path.open()):
            if r["outcome"] != "OK" or not r["ratio"]:
                continue
            m, n, k = (int(x) for x in r["problem"].split("x"))
            yield gpu, Problem(m, n, k, r["dtype"]), Config.from_label(r["config"], KNOBS), float(r["ratio"])


def measured(rows: Iterator[tuple[str, Problem, Config, float]]) -> Measured:
    out: Measured = defaultdict(dict)
    for gpu, problem, config, ratio in rows:
        best = out[(gpu, problem)]
        best[config] = max(best.get(config, 0.0), ratio)
    return out


def pairs(data: Measured) -> list[dict[str, Any]]:
    """Each split config beside its best measured unsplit twin (any reduction knob: unsplit, it
    builds the same kernel, `same_kernel`)."""
    out = []
    for (gpu, problem), configs in sorted(data.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        for config, ratio in configs.items():
            if config.split_k <= 1 or config.split_k_scope != "all" or config.stream_k:
                continue
            twin = same_kernel(config.replace(split_k=1))
            twins = [c for c in configs if same_kernel(c) == twin]
            if not twins:
                continue
            unsplit = max(configs[c] for c in twins)
            out.append(
                {
                    "gpu": gpu,
                    "problem": f"{problem.m}x{problem.n}x{problem.k}",
                    "dtype": problem.dtype,
                    "config": config.label(),
                    "rounds": rounds(config, problem),
                    "unsplit_rounds": rounds(twin, problem),
                    "split_ratio": ratio,
                    "unsplit_ratio": unsplit,
                }
            )
    return out


def groups(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    by: dict[tuple[str, bool, bool], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        dtype_group = "fp8" if r["dtype"].startswith("float8") else "16-bit"
        decode = int(r["problem"].split("x")[0]) <= 16
        by[(dtype_group, decode, r["rounds"] > r["unsplit_rounds"])].append(r)
    out = []
    for (dtype_group, decode, adds), rs in sorted(by.items()):
        logs = [math.log(r["split_ratio"] / r["unsplit_ratio"]) for r in rs]
        out.append(
            {
                "dtype_group": dtype_group,
                "decode": decode,
                "adds_rounds": adds,
                "pairs": len(rs),
                "problems": len({(r["gpu"], r["problem"], r["dtype"]) for r in rs}),
                "geomean_split_over_unsplit": round(math.exp(sum(logs) / len(logs)), 4),
                "split_wins": sum(1 for x in logs if x > 0),
            }
        )
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Split-K beside its unsplit twin, by whether the split adds rounds",
        "",
        f"- sources: {', '.join(report['sources'])}",
        "- a pair: one config splitting every tile and the same config unsplit, both measured on one problem and GPU",
        "",
        "| operands | decode (M <= 16) | split adds rounds | pairs | problems | split / unsplit (geomean) "
        "| split wins |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for g in report["groups"]:
        lines.append(
            f"| {g['dtype_group']} | {'yes' if g['decode'] else 'no'} | {'yes' if g['adds_rounds'] else 'no'} | "
            f"{g['pairs']} | {g['problems']} | {g['geomean_split_over_unsplit']:.3f} | "
            f"{g['split_wins']} of {g['pairs']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=dated("generalize", "split-rounds"))
    args = ap.parse_args(argv)
    rows = pairs(measured(prior_rows())) + pairs(measured(fp8_rows()))
    report = {
        "sources": [
            str(PRIOR_DIR.relative_to(Path(__file__).resolve().parent.parent)) + "/*.csv.gz",
            "bench/results/fp8/*-trials.csv",
        ],
        "groups": groups(rows),
        "pairs": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
