"""FP8 (e4m3) GEMMs through the service, each scaling against torch._scaled_mm in the same run.

    python -m bench.fp8_suite --trials 32     # starts `tirtune serve` itself; bench/results/fp8/<date>-suite

The problems (`SHAPES`): the public suite's ten shapes (bench/suite.py) and four decoder-layer
GEMMs of Llama-3-8B at 16 to 8192 tokens (qkv, gate_up, down), M from 16 to 8192. Each is queued
by `POST /tune {dtype: float8_e4m3fn, scaling}` once per scaling the template builds (`tensor`:
one fp32 scale for A and one for B; `rowcol`: a scale per token and per channel; `block`:
DeepSeek-V3's 1x128 scales of A and 128x128 of B along K) with one fixed trial budget, and scored
by what `GET /best` serves: the re-measured same-run ratio against torch._scaled_mm with the same
scales, fast accumulation and a bf16 D, or for `block` torch._scaled_mm with block scales where
this torch takes them, else a Triton block-scaled GEMM written here (the measuring child's FP8
baseline, `runner.inputs.baseline`; `baseline` names it per problem). A scaling the template did
not build would be listed with no figure, so that the table says what is missing.

Writes OUT.json and OUT.md: {"date", "gpu", "torch", "trials_per_problem", "problems": [{"problem",
"scaling", "ratio", "ratio_p10", "ratio_p90", "tflops", "baseline", "baseline_tflops",
"fraction_of_peak"}], "geomean_by_scaling"}; fraction_of_peak against the H200's dense FP8 peak
(1979 TFLOP/s, the datasheet's).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench import suite
from bench.filing import dated
from tirtune.core import EpilogueSpec, Problem
from tirtune.core.epilogue import SCALINGS, UNBUILT_SCALINGS, with_scaling
from tirtune.core.problem import FP8
from tirtune.runner.inputs import baseline_label

FP8_PEAK_TFLOPS = 1979.0  # dense e4m3 on the H200 SXM (datasheet)
DECODER = (
    ("16x6144x4096", "Llama-3-8B qkv, 16 tokens (decode)"),
    ("64x28672x4096", "Llama-3-8B gate_up, 64 tokens"),
    ("512x4096x14336", "Llama-3-8B down, 512 tokens"),
    ("8192x6144x4096", "Llama-3-8B qkv, 8192 tokens (prefill)"),
)
SHAPES = (*suite.SHAPES, *DECODER)
BUILT = tuple(s for s in SCALINGS if s != "none")  # tensor, rowcol, block
_f = suite._f  # a figure in the table, "-" where there is none


def problems(only: Sequence[str] = (), scalings: Sequence[str] = BUILT) -> list[tuple[str, str, str]]:
    """(shape, scaling, class); `only` keeps entries like "16x4096x4096" or "16x4096x4096:rowcol"."""
    chosen = [(shape, scaling, what) for scaling in scalings for shape, what in SHAPES]
    return [p for p in chosen if not only or p[0] in only or f"{p[0]}:{p[1]}" in only]


def queue(client: httpx.Client, chosen: Sequence[tuple[str, str, str]], trials: int) -> list[dict[str, Any]]:
    jobs = []
    for shape, scaling, what in chosen:
        m, n, k = (int(x) for x in shape.split("x"))
        body = {"m": m, "n": n, "k": k, "dtype": FP8, "scaling": scaling, "max_trials": trials}
        reply = client.post("/tune", json=body)
        if reply.status_code not in (200, 202):
            raise SystemExit(f"POST /tune {shape} {scaling}: {reply.status_code} {reply.text[:300]}")
        jobs.append({"shape": shape, "dtype": f"{FP8} {scaling}", "scaling": scaling, "class": what,
                     "job_id": reply.json()["id"]})
    return jobs


def score(client: httpx.Client, job: dict[str, Any]) -> dict[str, Any]:
    """GET /best's measured answer for the problem (never a prediction: FP8 has none anyway)."""
    shape, scaling = job["shape"], job["scaling"]
    m, n, k = (int(x) for x in shape.split("x"))
    problem = Problem(m, n, k, FP8, with_scaling(EpilogueSpec(), scaling))
    entry = {"problem": shape, "scaling": scaling, "class": job["class"], "job_id": job["job_id"],
             "state": job.get("state"), "baseline": baseline_label(problem.epilogue, FP8, n)}
    best = client.get("/best", params={"shape": shape, "dtype": FP8, "scaling": scaling, "predict": "false"})
    b = best.json()
    if best.status_code != 200 or b.get("kind") != "measured":
        return {**entry, "ratio": None, "error": b.get("error", {}).get("message", "no measured answer")}
    return {
        **entry,
        "config": b["config"],
        "config_label": b["config_label"],
        "ratio": b["ratio"],
        "ratio_p10": b["ratio_p10"],
        "ratio_p90": b["ratio_p90"],
        "confirmed": b["confirmed"],
        "tflops": b["tflops"],
        "baseline_tflops": b["cublas_tflops"],
        "fraction_of_peak": None if b["tflops"] is None else b["tflops"] / FP8_PEAK_TFLOPS,
        "provenance": b["provenance"],
    }


def report(scored: list[dict[str, Any]], trials: int, wall_s: float) -> dict[str, Any]:
    measured = [p for p in scored if p.get("ratio")]
    first = measured[0]["provenance"] if measured else {}
    not_built = [{"problem": shape, "scaling": s, "ratio": None, "error": "not built"}
                 for s in UNBUILT_SCALINGS for shape, _ in SHAPES]
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "gpu": first.get("gpu_name"),
        "driver": first.get("driver"),
        "torch": first.get("torch_version"),
        "tvm": first.get("tvm_version"),
        "template_version": first.get("template_version"),
        "trials_per_problem": trials,
        "wall_s": round(wall_s, 1),
        "fp8_peak_tflops": FP8_PEAK_TFLOPS,
        "problems": [*scored, *not_built],
        "geomean_by_scaling": {
            s: suite.geomean([p["ratio"] for p in measured if p["scaling"] == s]) for s in (*BUILT, *UNBUILT_SCALINGS)
        },
        "below_0_95": [f"{p['problem']} {p['scaling']}" for p in measured if p["ratio"] < 0.95],
        "unmeasured": [f"{p['problem']} {p['scaling']}" for p in scored if not p.get("ratio")],
        "unfinished": [f"{p['problem']} {p['scaling']}" for p in scored if p.get("state") not in suite.FINISHED],
    }


def markdown(r: dict[str, Any]) -> str:
    geo = ", ".join(f"{s} {_f(v)}" for s, v in r["geomean_by_scaling"].items())
    lines = [
        "# FP8 (e4m3) GEMMs through the service, against torch._scaled_mm",
        "",
        f"- {r['date']}; {r['gpu']}, driver {r['driver']}, torch {r['torch']}, TVM {r['tvm']}; "
        f"template {r['template_version']}",
        f"- every problem tuned by `POST /tune` (dtype float8_e4m3fn, its scaling) with {r['trials_per_problem']} "
        "trials, scored by `GET /best`: re-measured interleaved with torch._scaled_mm (the same scales, fast "
        f"accumulation, bf16 D) in fresh processes, L2 flushed; {r['wall_s']} s in all",
        f"- geomean by scaling: {geo}; below 0.95: {', '.join(r['below_0_95']) or 'none'}",
        *([f"- scored before their job ended: {', '.join(r['unfinished'])}"] if r.get("unfinished") else []),
        "",
        "| problem | scaling | config | ratio | p10-p90 | TFLOP/s | baseline | baseline TFLOP/s | of peak |",
        "| --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for p in r["problems"]:
        lines.append(
            f"| {p['problem']} | {p['scaling']} | {p.get('config_label') or p.get('error') or '-'} | "
            f"{_f(p.get('ratio'))} | {_f(p.get('ratio_p10'))}-{_f(p.get('ratio_p90'))} | {_f(p.get('tflops'), 1)} | "
            f"{p.get('baseline') or '-'} | {_f(p.get('baseline_tflops'), 1)} | {_f(p.get('fraction_of_peak'), 2)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=32, help="the fixed trial budget of every problem (<= 64)")
    ap.add_argument("--out", type=Path, default=None,
                    help="OUT.json and OUT.md (default: bench/results/fp8/<date>-suite)")
    ap.add_argument("--url", default=None, help="a running service; default: start one")
    ap.add_argument("--database", default=None, help="the started service's database (default: OUT.sqlite)")
    ap.add_argument("--only", nargs="*", default=(), help="problems to run, e.g. 16x4096x4096 or 16x4096x4096:rowcol")
    ap.add_argument("--deadline-s", type=float, default=3600.0,
                    help="give up waiting this many seconds after the script began (its service's start included)")
    ap.add_argument("--scalings", nargs="*", choices=BUILT, default=BUILT,
                    help="the scalings to run, in this order (default: all; a run split in two parts under "
                         "one deadline each: tensor rowcol, then block)")
    ap.add_argument("--dry-run", action="store_true", help="print the problems and exit")
    args = ap.parse_args(argv)
    if not 1 <= args.trials <= 64:
        ap.error("--trials must be 1..64")
    chosen = problems(args.only, args.scalings)
    if not chosen:
        ap.error("no problem left: --only and --scalings keep none")
    if args.dry_run:
        for shape, scaling, what in chosen:
            print(f"{shape:>18} {scaling:<7} {what}")
        return 0
    args.out = args.out or dated("fp8", "suite")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    database = args.database or f"sqlite:///{args.out.with_suffix('.sqlite').resolve()}"
    log = args.out.with_suffix(".serve.log")
    with suite.service(database, log) if args.url is None else suite._given(args.url) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            jobs = queue(client, chosen, args.trials)
            suite.wait(client, jobs, args.deadline_s, since=began)
            scored = [score(client, job) for job in jobs]
    result = report(scored, args.trials, time.monotonic() - began)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0 if not result["unmeasured"] else 1


if __name__ == "__main__":
    sys.exit(main())
