"""Build the cost model's shipped prior of a GPU model: its measurements on file, in one table.

    python -m bench.model_prior                                    # the H200's, from the results on file
    python -m bench.model_prior --database sqlite:///run.sqlite    # ... and a run's database
    python -m bench.model_prior --gpu "NVIDIA H100 80GB HBM3"      # another GPU model's
    python -m bench.model_prior --gpu-of kits/<date>-KIT.json       # the one a kit's timing ran on

The cost model (tirtune/model) learns from the measurements in the service's database and from
this prior, so a fresh database does not start blind (docs/design.md, "The cost model"). The
prior holds the correct (OK) trials of the results on file that the service's measuring child
took against same-run cuBLAS with L2 flushed: the suite runs' trial tables (`*trials*.csv`, a
config named by its label) and the prebuilt kits timed by bench/best_vs_cublas.py (`records`
with whole configs), plus, with `--database`, the OK GPU trials of a run's database (a
generalization run brought back from the GPU host, say). Every row keeps where it came from.
Another GPU model's runs are filed as measurement tables (`*-measurements.csv`, never named as
trial tables, so they stay out of the H200's): with `--gpu`, the prior is built from the tables
whose rows (a `gpu_name` column) or whose report beside them (`<stem>.json`, its "gpu") name it,
and from the kits timed on it.
Rows of configs the current Hopper space does not hold are left out, and said so, as are FP8 rows
(the model's features count 2-byte elements and a 16-bit MMA peak: it learns 16-bit GEMMs only, as
the service's own samples do, `repo.training_samples`).

Writes tirtune/model/data/<gpu>.csv.gz (gzip with a fixed mtime, rows sorted: the same inputs give
the same bytes, which the model's provenance digests).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import sqlalchemy as sa

from tirtune.core import Config, Problem, SpaceError
from tirtune.core.problem import HALF_DTYPES
from tirtune.model.prior import COLUMNS, PRIOR_DIR, prior_path
from tirtune.space.hopper import HOPPER
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
GPU = "NVIDIA H200"
KIT_VERSION = "hopper-gemm/5"


def _row(
    gpu: str,
    problem: Problem,
    config: Config,
    ratio: float,
    tflops: float | None,
    cublas: float | None,
    version: str,
    origin: str,
) -> dict[str, str]:
    return {
        "gpu_name": gpu,
        "template_version": version,
        "m": str(problem.m),
        "n": str(problem.n),
        "k": str(problem.k),
        "dtype": problem.dtype,
        "config": config.canonical(),
        "ratio": f"{ratio:.5f}",
        "tflops": "" if tflops is None else f"{tflops:.2f}",
        "cublas_tflops": "" if cublas is None else f"{cublas:.2f}",
        "origin": origin,
    }


def table_rows(path: Path, gpu: str, filed_gpu: str | None = None) -> Iterator[dict[str, str]]:
    """A trial or measurement table's correct plain-GEMM rows (a fused job's trials name their
    epilogue) as prior rows of `gpu`; with `filed_gpu`, only the rows measured on `gpu`, by the
    row's gpu_name or else `filed_gpu` (the report beside the table)."""
    with path.open() as f:
        for r in csv.DictReader(f):
            if filed_gpu is not None and (r.get("gpu_name") or filed_gpu) != gpu:
                continue
            if r.get("outcome") != "OK" or not r.get("ratio") or r.get("epilogue", "none") != "none":
                continue
            m, n, k = (int(x) for x in r["problem"].split("x"))
            yield _row(
                gpu,
                Problem(m, n, k, r["dtype"]),
                Config.from_label(r["config"], HOPPER_KNOBS),
                float(r["ratio"]),
                _number(r.get("tflops")),
                _number(r.get("cublas_tflops")),
                KIT_VERSION,
                str(path.relative_to(ROOT)),
            )


def trial_tables(results: Path) -> Iterator[dict[str, str]]:
    """The suite runs' trial tables: problem, dtype, config label, outcome, ratio, TFLOP/s (another
    GPU model's tables, `*-measurements.csv`, are not this one's whatever their names hold)."""
    for path in sorted(results.rglob("*trials*.csv")):
        if not path.name.endswith("-measurements.csv"):
            yield from table_rows(path, GPU)


def kit_records(results: Path, gpu: str = GPU) -> Iterator[dict[str, str]]:
    """Prebuilt kits timed against same-run cuBLAS (bench/best_vs_cublas.py's `records`)."""
    for path in sorted(results.rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(data, dict) or data.get("template_version") != KIT_VERSION or "records" not in data:
            continue
        if (data.get("environment") or {}).get("gpu_name") != gpu:
            continue
        for r in data["records"]:
            if r.get("outcome") != "OK" or not r.get("ratio") or not isinstance(r.get("config"), dict):
                continue
            m, n, k = (int(x) for x in str(r["problem"]).split("x"))
            yield _row(
                gpu,
                Problem(m, n, k, r["dtype"]),
                Config.from_json(r["config"], HOPPER_KNOBS),
                float(r["ratio"]),
                _number(r.get("tflops")),
                _number(r.get("cublas_tflops")),
                KIT_VERSION,
                str(path.relative_to(ROOT)),
            )


def measurement_tables(results: Path, gpu: str) -> Iterator[dict[str, str]]:
    """Another GPU model's measurement tables (`*-measurements.csv`): the plain GEMMs' correct rows
    measured on `gpu`, by the row's gpu_name or else the report beside the table."""
    for path in sorted(results.rglob("*-measurements.csv")):
        report = path.with_name(path.name.removesuffix("-measurements.csv") + ".json")
        try:
            filed = json.loads(report.read_text()).get("gpu", "") if report.is_file() else ""
        except (OSError, json.JSONDecodeError, AttributeError):
            filed = ""
        yield from table_rows(path, gpu, filed)


def database_rows(url: str, gpu: str = GPU) -> Iterator[dict[str, str]]:
    """The OK GPU trials of a tirtune database (measured on this GPU model)."""
    engine = sa.create_engine(url)
    query = sa.text(
        "SELECT m, n, k, dtype, config, ratio, tflops, cublas_tflops, template_version FROM tirtune_measurements "
        "WHERE outcome = 'OK' AND source = 'gpu' AND ratio IS NOT NULL AND gpu_name = :gpu ORDER BY id"
    )
    with engine.connect() as c:
        for m, n, k, dtype, config, ratio, tflops, cublas, version in c.execute(query, {"gpu": gpu}):
            knobs = json.loads(config) if isinstance(config, str) else config
            yield _row(
                gpu,
                Problem(m, n, k, dtype), Config.from_json(knobs, HOPPER_KNOBS), ratio, tflops, cublas, version, url.rsplit("/", 1)[-1]
            )
    engine.dispose()


def _number(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


def build(results: Path, databases: Sequence[str] = (), gpu: str = GPU) -> tuple[list[dict[str, str]], int]:
    """The prior's rows (sorted, each once) and how many rows were left out (not 16-bit, or not in
    the space)."""
    rows: dict[tuple[str, ...], dict[str, str]] = {}
    left_out = 0
    filed = [trial_tables(results)] if gpu == GPU else [measurement_tables(results, gpu)]
    filed.append(kit_records(results, gpu))
    sources = [*filed, *(database_rows(u, gpu) for u in databases)]
    for source in sources:
        for row in source:
            config = Config.from_json(json.loads(row["config"]), HOPPER_KNOBS)
            problem = Problem(int(row["m"]), int(row["n"]), int(row["k"]), row["dtype"])
            if problem.dtype not in HALF_DTYPES:
                left_out += 1
                continue
            if not HOPPER.holds(config) or not HOPPER.is_valid(config, problem):
                left_out += 1
                continue
            rows[tuple(row[c] for c in COLUMNS)] = row
    ordered = sorted(
        rows.values(),
        key=lambda r: (r["dtype"], int(r["m"]), int(r["n"]), int(r["k"]), r["origin"], r["config"], r["ratio"]),
    )
    return ordered, left_out


def write(rows: Sequence[dict[str, str]], path: Path) -> None:
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as z:
        z.write(text.getvalue().encode())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="where the results on file are")
    ap.add_argument("--database", action="append", default=[], help="also a run's database (SQLAlchemy URL)")
    gpu = ap.add_mutually_exclusive_group()
    gpu.add_argument("--gpu", default=GPU, help=f"the GPU model (default {GPU}: the trial tables and kits)")
    gpu.add_argument("--gpu-of", type=Path, default=None, metavar="KIT.json",
                     help="the GPU model a kit's timing (bench/best_vs_cublas.py's report) ran on")
    ap.add_argument("--out", type=Path, default=None, help=f"default: {PRIOR_DIR}/<gpu>.csv.gz")
    args = ap.parse_args(argv)
    if args.gpu_of is not None:
        try:
            args.gpu = json.loads(args.gpu_of.read_text())["environment"]["gpu_name"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"model_prior: no GPU named in {args.gpu_of}: {e}", file=sys.stderr)
            return 2
    try:
        rows, left_out = build(args.results, args.database, args.gpu)
    except (SpaceError, ValueError, KeyError) as e:
        print(f"model_prior: {e}", file=sys.stderr)
        return 2
    out = args.out or prior_path(args.gpu)
    write(rows, out)
    problems = {(r["m"], r["n"], r["k"], r["dtype"]) for r in rows}
    print(f"{len(rows)} rows over {len(problems)} problems -> {out} ({left_out} left out: not 16-bit, or not in the space)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
