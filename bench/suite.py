"""The public suite through the service: twenty GEMMs tuned by POST /tune, scored by GET /best.

    python -m bench.suite --trials 32        # starts `tirtune serve` itself; bench/results/suite/<date>-32trials
    python -m bench.suite --url http://127.0.0.1:8000 --trials 32 ...    # or uses a running service

The twenty problems of the suite (`SHAPES` below: ten shapes, fp16 and bf16; D = A @ B.T) are
queued as jobs with one fixed trial budget, fp16 first (a bf16 job then transfers from the same
shape in fp16). Each job is the service's own: proposals, builds, the measuring child, and at the
end its top trials re-measured interleaved with cuBLAS in fresh processes. The score of a problem
is what GET /best serves for it: the re-measured same-run ratio (cuBLAS time / kernel time, L2
flushed), its p10-p90 over rounds and processes, and the fraction of the roofline (the physical
limit measured in the same process, tirtune.core.roofline). The geomean is over the ratios.

With no --url the script starts `python -m tirtune serve` on a free loopback port with its own
database (`--database`, default a SQLite file beside the output) and stops it at the end, so the
figures come from this run's jobs only. A SIGTERM while it serves (a GPU host's queue step cut at
its limit) ends the waiting as the deadline does: what finished is scored, the report written
and the service stopped, where the default action would end the script at once and leave the
service, which runs in a session of its own, tuning on the GPU into the next step. Writes
OUT.json and OUT.md (default OUT: bench/results/suite/<date>-<trials>trials):
{"date", "gpu", "driver", "cuda", "tvm", "torch", "template_version", "trials_per_problem",
 "problems": [{"problem", "dtype", "config", "ratio", "ratio_p10", "ratio_p90", "tflops",
 "cublas_tflops", "roofline_fraction", ...}], "geomean"}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.filing import dated

SHAPES = (
    ("4096x4096x4096", "square"),
    ("8192x8192x8192", "square, large"),
    ("2048x2048x2048", "square, small"),
    ("1024x1024x1024", "square, fewer tiles than SMs"),
    ("4096x14336x4096", "N-wide (an MLP up-projection)"),
    ("8192x8192x1024", "K-light"),
    ("128x4096x4096", "small batch"),
    ("16x4096x4096", "decode, memory-bound"),
    ("4000x4000x4000", "ragged (no tile divides it)"),
    ("3000x5000x2000", "ragged, rectangular"),
)
DTYPES = ("float16", "bfloat16")
FINISHED = ("DONE", "FAILED", "CANCELLED")


def problems(only: Sequence[str] = ()) -> list[tuple[str, str, str]]:
    """(shape, dtype, class) of the suite, fp16 first; `only` keeps entries like "16x4096x4096" or
    "16x4096x4096:bfloat16"."""
    chosen = [(shape, dtype, what) for dtype in DTYPES for shape, what in SHAPES]
    if not only:
        return chosen
    return [p for p in chosen if p[0] in only or f"{p[0]}:{p[1]}" in only]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Set by a SIGTERM while `stop_on_sigterm` is in force: `wait` stops waiting.
_STOP = threading.Event()


@contextmanager
def stop_on_sigterm() -> Iterator[threading.Event]:
    """While in force, a SIGTERM sets the event `wait` watches instead of ending the process, so
    that the script scores, reports and stops its service; the handler before is restored after.
    Only the main thread can set handlers: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield _STOP
        return
    _STOP.clear()
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: _STOP.set())
    try:
        yield _STOP
    finally:
        signal.signal(signal.SIGTERM, previous)
        _STOP.clear()


@contextmanager
def service(database: str, log: Path, *, worker: bool = True) -> Iterator[str]:
    """`tirtune serve` on a free loopback port with its own database; its URL, stopped after.
    Without `worker` it only answers (a stored run's database read again, on a machine without
    a GPU, leaves its unfinished jobs as they are)."""
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": database}
    env.pop("TIRTUNE_REPLAY", None)  # the suite is measured on the GPU, never replayed
    command = [sys.executable, "-m", "tirtune", "serve", "--port", str(port), *([] if worker else ["--no-worker"])]
    with log.open("w") as out, stop_on_sigterm():
        proc = subprocess.Popen(command, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"tirtune serve exited with {proc.returncode}; see {log}")
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit(f"tirtune serve did not answer within 120 s; see {log}")
                time.sleep(0.5)
            yield url
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def queue(client: httpx.Client, chosen: Sequence[tuple[str, str, str]], trials: int) -> list[dict[str, Any]]:
    jobs = []
    for shape, dtype, what in chosen:
        m, n, k = (int(x) for x in shape.split("x"))
        reply = client.post("/tune", json={"m": m, "n": n, "k": k, "dtype": dtype, "max_trials": trials})
        if reply.status_code != 202:
            raise SystemExit(f"POST /tune {shape} {dtype}: {reply.status_code} {reply.text[:300]}")
        jobs.append({"shape": shape, "dtype": dtype, "class": what, "job_id": reply.json()["id"]})
    return jobs


def wait(client: httpx.Client, jobs: list[dict[str, Any]], deadline_s: float, since: float | None = None) -> None:
    """Poll until every job has finished (or the deadline passes, or a SIGTERM comes while
    `stop_on_sigterm` is in force: the rest are reported unfinished).
    The deadline counts from `since` (a `time.monotonic()` reading: the script's start, so that the
    service's start and the queuing count too, as they do against a GPU host's step limit), else
    from this call."""
    started = time.monotonic() if since is None else since
    pending = {j["job_id"]: j for j in jobs}
    while pending and not _STOP.is_set() and time.monotonic() - started < deadline_s:
        for job_id, job in list(pending.items()):
            state = client.get(f"/jobs/{job_id}").json()
            job["state"], job["message"] = state["state"], state.get("message", "")
            if state["state"] in FINISHED:
                job["finished_after_s"] = round(time.monotonic() - started, 1)
                print(f"[{job['finished_after_s']:7.1f} s] {job['shape']} {job['dtype']}: {state['state']} "
                      f"({state['trials_done']} trials) {job['message'][:120]}", flush=True)
                del pending[job_id]
        _STOP.wait(2)
    if pending and _STOP.is_set():
        print(f"SIGTERM: stopped waiting, {len(pending)} job(s) not finished", flush=True)


def score(client: httpx.Client, job: dict[str, Any], source: str = "gpu") -> dict[str, Any]:
    """What GET /best serves for the problem (this run's database holds this run's jobs only)."""
    entry = {"problem": job["shape"], "dtype": job["dtype"], "class": job["class"], "job_id": job["job_id"],
             "state": job.get("state"), "job_message": job.get("message", "")}
    # Measured figures only: for a problem with no measurement the service may answer with its cost
    # model's prediction (`"kind": "predicted"`, 200), which is never a score.
    best = client.get("/best", params={"shape": job["shape"], "dtype": job["dtype"], "source": source,
                                       "predict": "false"})
    b = best.json()
    if best.status_code != 200 or b.get("kind") == "predicted":
        error = b.get("error", {}).get("message") if best.status_code != 200 else "a prediction, nothing measured"
        return {**entry, "config": None, "ratio": None, "error": error}
    return {
        **entry,
        "config": b["config"],
        "config_label": b["config_label"],
        "ratio": b["ratio"],
        "ratio_p10": b["ratio_p10"],
        "ratio_p90": b["ratio_p90"],
        "confirmed": b["confirmed"],
        "tflops": b["tflops"],
        "cublas_tflops": b["cublas_tflops"],
        "roofline_fraction": b["roofline"]["fraction"],
        "roofline_bound": b["roofline"]["bound"],
        "bandwidth_gbs": b["roofline"]["bandwidth_gbs"],
        "copy_gbs": b["roofline"]["copy_gbs"],
        "trial_ratio": b["trial"]["ratio"],
        "within_noise_of_runner_up": b["within_noise_of_runner_up"],
        "note": b["note"],
        "provenance": b["provenance"],
        "template_version": b["provenance"].get("template_version"),
    }


def geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def report(scored: list[dict[str, Any]], trials: int, wall_s: float, source: str = "gpu") -> dict[str, Any]:
    measured = [p for p in scored if p.get("ratio")]
    first = measured[0]["provenance"] if measured else {}
    ratios = [p["ratio"] for p in measured]
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": source,  # "replay": a plumbing check on recorded data, never a suite result
        "gpu": first.get("gpu_name"),
        "driver": first.get("driver"),
        "cuda": first.get("cuda"),
        "tvm": first.get("tvm_version"),
        "torch": first.get("torch_version"),
        "template_version": measured[0]["template_version"] if measured else None,
        "trials_per_problem": trials,
        "wall_s": round(wall_s, 1),
        # How the started service ran the jobs (bench/scaling.py compares 1 and 2 GPUs, jobs run at once).
        "concurrent_jobs": int(os.environ.get("TIRTUNE_CONCURRENT_JOBS", "1")),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "problems": scored,
        "geomean": geomean(ratios),
        "geomean_float16": geomean([p["ratio"] for p in measured if p["dtype"] == "float16"]),
        "geomean_bfloat16": geomean([p["ratio"] for p in measured if p["dtype"] == "bfloat16"]),
        # Of the measured problems only: one with no measurement is listed as unmeasured instead.
        "below_0_97": [f"{p['problem']} {p['dtype']}" for p in measured if p["ratio"] < 0.97],
        "unmeasured": [f"{p['problem']} {p['dtype']}" for p in scored if not p.get("ratio")],
        # Scored before their job ended (the deadline passed): a best of fewer trials, or one whose
        # re-measurement had not landed, so its figure is the trial's.
        "unfinished": [f"{p['problem']} {p['dtype']}" for p in scored if p.get("state") not in FINISHED],
        "not_remeasured": [f"{p['problem']} {p['dtype']}" for p in scored if p.get("ratio") and not p.get("confirmed")],
    }


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(r: dict[str, Any]) -> str:
    lines = [
        "# The public GEMM suite through the service"
        + (" (REPLAYED recordings: a plumbing check, not a result)" if r.get("source") == "replay" else ""),
        "",
        f"- {r['date']}; {r['gpu']}, driver {r['driver']}, CUDA {r['cuda']}, TVM {r['tvm']}, torch {r['torch']}; "
        f"template {r['template_version']}",
        f"- every problem tuned by `POST /tune` with {r['trials_per_problem']} trials, scored by `GET /best`: the "
        "job's top trials re-measured interleaved with cuBLAS (torch.mm) in fresh processes, L2 flushed; ratio = "
        "cuBLAS time / tirtune time; roofline = max(flops / MMA peak at the measured clock, bytes / device-copy "
        f"bandwidth), both measured in the same process; {r['wall_s']} s in all",
        f"- geomean **{_f(r['geomean'])}** (fp16 {_f(r['geomean_float16'])}, bf16 {_f(r['geomean_bfloat16'])}); "
        f"below 0.97: {', '.join(r['below_0_97']) or 'none'}",
        *([f"- scored before their job ended (the deadline passed): {', '.join(r['unfinished'])}"]
          if r.get("unfinished") else []),
        *([f"- the trial's figure, not a re-measurement: {', '.join(r['not_remeasured'])}"]
          if r.get("not_remeasured") else []),
        "",
        "| problem | dtype | class | job | config | ratio | re-measured | p10-p90 | TFLOP/s | cuBLAS TFLOP/s "
        "| roofline | bound |",
        "| --- | --- | --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for p in r["problems"]:
        lines.append(
            f"| {p['problem']} | {p['dtype']} | {p['class']} | {p.get('state') or '-'} | "
            f"{p.get('config_label') or p.get('error') or '-'} | {_f(p.get('ratio'))} | "
            f"{'yes' if p.get('confirmed') else 'no'} | "
            f"{_f(p.get('ratio_p10'))}-{_f(p.get('ratio_p90'))} | {_f(p.get('tflops'), 1)} | "
            f"{_f(p.get('cublas_tflops'), 1)} | {_f(p.get('roofline_fraction'), 2)} | "
            f"{p.get('roofline_bound') or '-'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=32, help="the fixed trial budget of every problem (<= 64)")
    ap.add_argument("--out", type=Path, default=None,
                    help="OUT.json and OUT.md (default: bench/results/suite/<date>-<trials>trials)")
    ap.add_argument("--url", default=None, help="a running service; default: start one")
    ap.add_argument("--database", default=None, help="the started service's database (default: OUT.sqlite)")
    ap.add_argument("--only", nargs="*", default=(),
                    help="problems to run, e.g. 16x4096x4096 or 128x4096x4096:bfloat16")
    ap.add_argument("--deadline-s", type=float, default=3600.0,
                    help="give up waiting this many seconds after the script began (its service's start included)")
    ap.add_argument("--source", choices=("gpu", "replay"), default="gpu",
                    help="replay: score a replaying service's recorded figures (a check of this script, with --url)")
    args = ap.parse_args(argv)
    if not 1 <= args.trials <= 64:
        ap.error("--trials must be 1..64 (the suite's fixed budget is at most 64)")
    args.out = args.out or dated("suite", f"{args.trials}trials")
    chosen = problems(args.only)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    database = args.database or f"sqlite:///{args.out.with_suffix('.sqlite').resolve()}"
    with service(database, args.out.with_suffix(".serve.log")) if args.url is None else _given(args.url) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            jobs = queue(client, chosen, args.trials)
            wait(client, jobs, args.deadline_s, since=began)
            scored = [score(client, job, args.source) for job in jobs]
    result = report(scored, args.trials, time.monotonic() - began, args.source)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0 if not result["unmeasured"] else 1


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url


if __name__ == "__main__":
    sys.exit(main())
