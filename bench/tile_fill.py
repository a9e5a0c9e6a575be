"""How full the winning tiles keep the GPU: the waves and the padding of each draw's best config.

    python -m bench.tile_fill                          # every full draw under bench/results/generalize/
    python -m bench.tile_fill --draws A.json B.json --out bench/results/generalize/<date>-tile-fill

For every problem a random draw scored (bench/generalize.py's report), the best config's tile is
laid over the problem in the kernel's own axes (with swap_ab the problem's N x M), and two
fractions of the GPU's work are computed from it, no GPU needed:

- `wave_fill`: the CTAs the kernel launches (tiles, times split_k where the split covers every
  tile; with split_k_scope "tail" the whole waves' tiles plus the last wave's split ones) over
  the SMs' rounds they take (132 SMs a round on the H200), 1.0 when every round is full;
- `pad_fill`: the problem's M x N over the tiles' area, 1.0 when the tile divides both;
- `tile_fill`: their product, the share of the launched rounds' MMA slots that compute D.

A persistent kernel walks the same tiles over the same SMs, so the same fractions apply. Decode
problems (M below `--min-m`, 64 by default) are left out: they are bound by bytes, not by MMA
slots. The summary compares the problems below 0.97 of cuBLAS with those at or above 1.0, and
gives the Pearson correlation of log ratio against log tile_fill.

Writes OUT.json and OUT.md: {"draws", "sms", "min_m", "problems": [{"problem", "dtype", "draw",
"ratio", "config", "tiles", "ctas", "waves", "wave_fill", "pad_fill", "tile_fill"}], "summary"}.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.filing import RESULTS, dated
from bench.suite import geomean
from tirtune.core import Config, Problem
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.space.hopper.rules import SMS

DRAWS = RESULTS / "generalize"


def full_draws(folder: Path = DRAWS) -> list[Path]:
    """The reports of full draws on file: <date>-<seed>.json, not a partial run, a tuner-quality
    run or a model study."""
    return sorted(
        p
        for p in folder.glob("*.json")
        if p.stem.split("-")[-1].isdigit() and "partial" not in p.stem and "quality" not in p.stem
    )


def fill(config: Config, problem: Problem, sms: int = SMS) -> dict[str, Any]:
    """The tile counts and the three fractions of `config` on `problem` (see the module's text)."""
    m, n = (problem.n, problem.m) if config.swap_ab else (problem.m, problem.n)
    rows, cols = -(-m // config.blk_m), -(-n // config.blk_n)
    tiles = rows * cols
    if config.split_k > 1 and config.split_k_scope == "tail":
        whole = tiles - tiles % sms
        ctas = whole + (tiles - whole) * config.split_k
    else:
        ctas = tiles * config.split_k
    waves = ctas / sms
    wave_fill = ctas / (math.ceil(waves) * sms)
    pad_fill = (m * n) / (rows * config.blk_m * cols * config.blk_n)
    return {
        "tiles": tiles,
        "ctas": ctas,
        "waves": round(waves, 3),
        "wave_fill": round(wave_fill, 4),
        "pad_fill": round(pad_fill, 4),
        "tile_fill": round(wave_fill * pad_fill, 4),
    }


def rows_of(report: Mapping[str, Any], name: str, min_m: int) -> list[dict[str, Any]]:
    """One row per scored problem of a draw's report with M >= min_m."""
    out = []
    for p in report["problems"]:
        if p.get("ratio") is None or not isinstance(p.get("config"), dict):
            continue
        m, n, k = (int(x) for x in p["problem"].split("x"))
        if m < min_m:
            continue
        config = Config.from_json(p["config"], HOPPER_KNOBS)
        problem = Problem(m, n, k, p["dtype"])
        out.append(
            {"problem": p["problem"], "dtype": p["dtype"], "draw": name, "ratio": p["ratio"],
             "config": config.label(), **fill(config, problem)}
        )
    return out


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    low = [r for r in rows if r["ratio"] < 0.97]
    high = [r for r in rows if r["ratio"] >= 1.0]
    figures: dict[str, Any] = {"problems": len(rows), "below_097": len(low), "at_or_above_1": len(high)}
    for name, group in (("below_097", low), ("at_or_above_1", high)):
        for key in ("wave_fill", "pad_fill", "tile_fill"):
            value = geomean([r[key] for r in group])
            figures[f"{key}_{name}"] = round(value, 4) if value is not None else None
    if len(rows) > 2:
        figures["correlation_log_ratio_log_tile_fill"] = round(
            statistics.correlation([math.log(r["ratio"]) for r in rows], [math.log(r["tile_fill"]) for r in rows]), 3
        )
    return figures


def markdown(r: Mapping[str, Any]) -> str:
    s = r["summary"]
    lines = [
        "# How full the winning tiles keep the GPU",
        "",
        f"- draws: {', '.join(r['draws'])}; {r['sms']} SMs a round; problems with M >= {r['min_m']}: {s['problems']}",
        f"- below 0.97 of cuBLAS ({s['below_097']}): wave fill {s['wave_fill_below_097']}, padding fill "
        f"{s['pad_fill_below_097']}, tile fill {s['tile_fill_below_097']} (geomeans)",
        f"- at or above 1.0 ({s['at_or_above_1']}): wave fill {s['wave_fill_at_or_above_1']}, padding fill "
        f"{s['pad_fill_at_or_above_1']}, tile fill {s['tile_fill_at_or_above_1']}",
        f"- correlation of log ratio with log tile fill: {s.get('correlation_log_ratio_log_tile_fill')}",
        "",
        "| problem | dtype | ratio | config | tiles | CTAs | waves | wave fill | padding fill | tile fill |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in sorted(r["problems"], key=lambda p: p["ratio"]):
        lines.append(
            f"| {p['problem']} | {p['dtype']} | {p['ratio']:.3f} | {p['config']} | {p['tiles']} | {p['ctas']} "
            f"| {p['waves']:.2f} | {p['wave_fill']:.3f} | {p['pad_fill']:.3f} | {p['tile_fill']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--draws", type=Path, nargs="*", default=None, help="draw reports (default: every full draw)")
    ap.add_argument("--min-m", type=int, default=64, help="leave out problems with fewer rows (decode)")
    ap.add_argument("--out", type=Path, default=None, help="OUT.json / OUT.md (default: generalize/<date>-tile-fill)")
    args = ap.parse_args(argv)
    draws = args.draws if args.draws is not None else full_draws()
    if not draws:
        raise SystemExit("no draw reports: give --draws or file a draw under bench/results/generalize/")
    rows: list[dict[str, Any]] = []
    for path in draws:
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise SystemExit(f"cannot read the draw report {path}: {e}") from None
        rows += rows_of(report, path.name, args.min_m)
    result = {"draws": [p.name for p in draws], "sms": SMS, "min_m": args.min_m, "problems": rows,
              "summary": summary(rows)}
    out = args.out or dated("generalize", "tile-fill")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print("\n".join(line for line in markdown(result).splitlines() if line.startswith("- ")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
