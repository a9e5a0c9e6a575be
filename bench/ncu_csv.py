"""Nsight Compute's raw CSV (`ncu --csv --page raw --nvtx`), cut down to what a profile step asked.

    python -m bench.ncu_csv RAW.csv --out OUT [--keep METRIC,...]     # OUT.csv and OUT.md

`ncu --page raw` writes its own notes first, then a header row, a row of units and one row per
kernel with every device attribute beside the metrics asked for (~300 columns); numbers carry
thousands separators. This keeps the kernels launched inside an NVTX range (the cases a bench
script named; the set-up kernels around them are dropped), and of their columns the range, the
kernel's name, its launch shape and the metrics: those named by --keep (the ones the step asked
ncu for), else every metric but the device attributes and the per-unit .min/.max spreads;
numbers lose their separators. OUT.csv keeps ncu's units row under the header; OUT.md is a table
of the same with times in microseconds and bytes in MB.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

RANGE = "range"
SHAPE_COLUMNS = ("Kernel Name", "Block Size", "Grid Size")
DROPPED_PREFIXES = ("device__attribute", "nvlink__", "numa__", "c2clink__", "profiler__")


@dataclass(frozen=True)
class Profile:
    columns: tuple[str, ...]
    units: dict[str, str]
    rows: tuple[dict[str, str], ...]


def _range_name(value: str) -> str:
    """ncu's NVTX column reads 'TID  "<default domain>:NAME:none:none:none:none:none:none' (the
    header's Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg): the range's name,
    colons in it kept."""
    parts = value.split(":")
    return ":".join(parts[1:-6]) if len(parts) >= 8 else value


def _is_metric(column: str, keep: Sequence[str]) -> bool:
    if keep:
        return column in keep
    if "__" not in column or column.startswith(DROPPED_PREFIXES):
        return False
    return not (column.endswith((".min", ".max")) or ".min." in column or ".max." in column)


def read(text: str, keep: Sequence[str] = ()) -> Profile:
    """The ranged kernels of ncu's raw CSV `text`, with the metrics in `keep` (default: see the
    module's docstring); ValueError when it holds no kernel table."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no kernel table (a header row starting with \"ID\") in this ncu output")
    table = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    if not table:
        raise ValueError("the kernel table is empty")
    header = list(table[0].keys())
    nvtx = next((c for c in header if c.startswith("thread Domain")), None)
    if nvtx is None:
        raise ValueError("no NVTX column: run ncu with --nvtx")
    units_row, kernels = table[0], table[1:]
    metrics = [c for c in header if _is_metric(c, keep)]
    columns = (RANGE, *[c for c in SHAPE_COLUMNS if c in header], *metrics)
    units = {c: units_row.get(c, "") or "" for c in metrics}
    rows = []
    for k in kernels:
        if not k.get(nvtx) or not (k.get("ID") or "").strip().isdigit():
            continue
        row = {RANGE: _range_name(k[nvtx])}
        for c in columns[1:]:
            value = k.get(c) or ""
            row[c] = value.replace(",", "") if c in units else value
        rows.append(row)
    return Profile(columns, units, tuple(rows))


def write_csv(profile: Profile, path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(profile.columns)
        w.writerow([profile.units.get(c, "") for c in profile.columns])
        for row in profile.rows:
            w.writerow([row.get(c, "") for c in profile.columns])


def _cell(value: str, unit: str) -> str:
    try:
        number = float(value)
    except ValueError:
        return value[:60]
    if unit == "ns":
        return f"{number / 1e3:.2f} us"
    if unit == "byte":
        return f"{number / 1e6:.2f} MB"
    return f"{number:g}" + (f" {unit}" if unit else "")


def markdown(profile: Profile, title: str) -> str:
    lines = [f"# {title}", "", "| " + " | ".join(profile.columns) + " |",
             "| " + " | ".join("---" for _ in profile.columns) + " |"]
    for row in profile.rows:
        lines.append("| " + " | ".join(_cell(row.get(c, ""), profile.units.get(c, "")) if c in profile.units
                                       else row.get(c, "")[:60] for c in profile.columns) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ncu_csv", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path, help="ncu's CSV (--csv --page raw --nvtx)")
    ap.add_argument("--out", type=Path, required=True, help="writes OUT.csv and OUT.md")
    ap.add_argument("--title", default="Nsight Compute, the ranged kernels")
    ap.add_argument("--keep", default="", help="the metrics to keep, comma-separated (ncu's --metrics list)")
    args = ap.parse_args(argv)
    try:
        profile = read(args.raw.read_text(errors="replace"), [m for m in args.keep.split(",") if m])
    except (OSError, ValueError) as e:
        print(f"{args.raw}: {e}", file=sys.stderr)
        return 2
    write_csv(profile, args.out.with_suffix(".csv"))
    args.out.with_suffix(".md").write_text(markdown(profile, args.title))
    print(f"{len(profile.rows)} ranged kernels -> {args.out.with_suffix('.csv')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
