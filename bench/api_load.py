"""Load benchmark: GET /best, GET /trials?limit=100 and GET /jobs/{id} under concurrent clients
against PostgreSQL, on loopback only.

    python -m bench.api_load [--clients 200] [--seconds 20] [--workers 2] [--rates 200 500 1000]
                             [--trials-clients 50] [--trials-rates 100]
                             [--jobs-clients 50] [--jobs-rates 100]
                             [--endpoints best trials jobs] [--out api-load/DATE-WHAT]

1. Creates a throwaway PostgreSQL database (dropped at the end), migrates it, and fills it with
   realistic measurements: the 156 configs recorded on an H200 (bench/data/*.jsonl) replayed for
   PROBLEMS shapes, times scaled by FLOPs, plus INVALID rows, as a tuning service accumulates, one
   job per problem, done, its best re-measured; then VACUUM ANALYZE, as autovacuum does to a table
   after that many inserts (without it the planner has no statistics and every COUNT reads the
   heap).
2. Starts the API (uvicorn, `--workers` processes, no job workers) on a free 127.0.0.1 port.
3. Runs phases with concurrent keep-alive connections, each for `--seconds`:
   - saturation: every client sends its next request as soon as the last answer arrives (closed
     loop): the throughput the server sustains; latency there is queueing (Little's law:
     clients / throughput), not service time;
   - paced: the clients together offer a rate (each at rate/clients, open loop on a fixed
     schedule, latency counted from the scheduled send time): the latency a client sees at
     that load.
   GET /best (one path per problem) at `--rates`; GET /trials?limit=100 at `--trials-rates` and
   GET /jobs/{id} (one path per job: what the dashboard and clients poll) at `--jobs-rates`, with
   the API's per-process answer cache on (the default) and then off (a second server with
   TIRTUNE_BEST_CACHE_CHECK_S=0): every request then reads PostgreSQL, as while a job is adding
   measurements and the cache is dropped every second. `--endpoints` picks which of the three run.
   With both GET /best and GET /jobs/{id}, the two also saturate in turns (four slices each, the
   GET /jobs/{id} clients): their throughputs compare like for like on a machine whose other work
   comes and goes.
4. Writes bench/results/<--out>.json and .md (default api-load/<date>-<endpoints>, e.g.
   api-load/2026-11-30-best-trials): p50/p90/p99/max latency, req/s,
   errors, date, machine, versions, and whether the goals were met (GET /best p99 <= 10 ms at
   200 req/s, GET /trials?limit=100 p99 <= 50 ms at 100 req/s, GET /jobs/{id} p99 <= 20 ms at
   100 req/s and a saturation throughput at least half of GET /best's in the same run).

The client is a minimal asyncio HTTP/1.1 keep-alive client (one connection per client), so on a
2-core machine the load generator takes as little CPU from the server as possible. Requests are
bounded (`--max-requests`) and only ever go to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import sqlalchemy as sa
from uvicorn.protocols.http.h11_impl import H11Protocol

from bench.filing import dated
from tirtune.core import Candidate, Outcome, Provenance, RunResult, Stack
from tirtune.db import JobState, make_engine, migrate, normalize_url, repo, session_factory, transaction
from tirtune.runner.replay_runner import from_record
from tirtune.space import Problem

ROOT = Path(__file__).resolve().parents[1]

log = logging.getLogger("api_load")
RECORDED = ROOT / "bench" / "data" / "hopper-4096x4096x4096-float16.jsonl"
RESULTS = ROOT / "bench" / "results"
ADMIN_URL = os.environ.get("TIRTUNE_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
SIZES = (512, 1024, 2048, 3072, 4096, 6144, 8192)
INVALID_PER_PROBLEM = 60
NOTES = """What the numbers measure. GET /best, GET /trials and GET /jobs/{id} answers are cached per API
process (tirtune/api/cache.py) and dropped when the measurements or the jobs change (checked once a
second): the "cache off" phases run a second server with TIRTUNE_BEST_CACHE_CHECK_S=0, so every
request reads PostgreSQL, as it would for pages nobody asked for in the last second.

GET /best, where its p99 came from (2026-11-29, 10 s phases): (1) the once-per-second cache version
check ran on the request that claimed it (a thread hop plus a database round trip): with it taken
off the request path p99 at 200 req/s went from 13.8 to 4.6 ms; (2) FastAPI ran the plain-def
session-factory dependency in the thread pool on every request: a hit cost 0.55-0.73 ms of CPU
in-process, 0.21 ms once it was async.

GET /trials?limit=100 (37 req/s, p50 1.3 s with 50 clients, before), profiled in-process on this
machine (2026-11-30) before the change: one page cost 37 ms in the route plus about 15 ms around
it: the ORM query and records 21 ms (ORM instances, then Config.from_json per row), COUNT(*) 10 ms
(a sequential scan: the freshly filled table had no statistics or visibility map; after VACUUM
ANALYZE, as autovacuum would do, an index-only scan of 1.3 ms), Config.to_json through
dataclasses.asdict (a deep copy per row) 10 ms, and FastAPI validating the returned 100-item page
once more (3 ms). After: the page is read as plain rows (no ORM objects), Config.to_json/from_json
copy and check without dataclasses' generic machinery, the last page knows its total without a
COUNT, the answer is encoded once and returned as bytes (no second validation), and pages are cached
like /best answers. A page read from PostgreSQL now costs 5.3 ms of CPU in-process (rows 1.7 ms of
which psycopg 0.8, records 1.3, COUNT 0.75, response models 0.8, JSON 0.3) and 6.6 ms per request
in a uvicorn worker (from /proc; PostgreSQL 0.35 ms): with the cache off the endpoint is bound by
the API's Python CPU, 100 req/s take two thirds of a core, and on this shared machine its p99 at
100 req/s was above the 50 ms goal. A cached page costs about 0.3 ms; with jobs writing, each
process drops its cache at most once a second, so a page asked for 100 times a second is read
from PostgreSQL about once a second per process.

GET /jobs/{id} (50 clients on PostgreSQL: 121 req/s, p50 316 ms, p99 1.8 s, while GET /best served
326 req/s), profiled in-process on this machine (2026-12-02) before the change: not N+1 and no scan,
but every request read PostgreSQL from a worker thread: the job by its key, its best trial, that
trial's re-measurements (three SELECTs, eight round trips with the pool's ping and the transaction),
1.6-1.8 ms of CPU and 2.6-3.2 ms wall in-process per answer, on top of the HTTP path; GET /best's
answers come from the per-process cache. After: the job's answer (its progress and best are kept on the
job's row) is cached like GET /best's, and dropped when a job, a measurement or a re-measurement
changes: the check reads `repo.jobs_version` (count, newest id and sum of revisions of the jobs;
every update of a job adds one to its revision) besides the measurements' version, once a second
per process; a job queued through POST /tune drops the process's stored pages at once. A miss is
two SELECTs (the job joined with its best trial, then the trial's re-measurement): 1.2 ms of CPU,
1.4 ms wall in-process on the same data. GET /jobs pages are cached the same way.

Saturation before 2026-12-02 measured the clients, not the server: under uvicorn `--workers` the
connections lacked TCP_NODELAY (uvicorn binds the listening socket without naming IPPROTO_TCP, and
asyncio sets TCP_NODELAY only on sockets made with it), so each response's body, written after its
headers, waited for the client's delayed ACK: about 40 ms between back-to-back requests on a
connection, whatever the endpoint (one client: 22 req/s, p50 44 ms, on /healthz too). A saturated
phase gave its clients / 44 ms (200 clients: 3,000-4,500 req/s), and the tails of paced phases held
such waits. The benchmark's server now sets TCP_NODELAY on every connection (`NoDelayH11`, the
same connection p50 1 ms). `tirtune serve` runs one uvicorn process on asyncio's own socket, which
has it.

What remains above a few ms is CPU sharing: the asyncio client, two uvicorn workers and PostgreSQL
share two cores with whatever else runs on the machine (other engineers' builds and test suites
during these runs: see the load average), and `nice` does not shield the benchmark from it
(scheduler autogroups)."""
LATE_S = 2.0  # a paced client that is this far behind its schedule when time is up stops


@dataclass(frozen=True)
class Phase:
    endpoint: str
    name: str
    clients: int
    seconds: float
    offered_rps: float | None
    requests: int
    errors: int
    non_200: int
    throughput_rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    p99_from_schedule_ms: float  # paced phase: from the scheduled send time (= p99_ms when saturated)


# --- the database ---------------------------------------------------------------------------------


@contextmanager
def throwaway_database() -> Iterator[str]:
    admin = sa.create_engine(normalize_url(ADMIN_URL), isolation_level="AUTOCOMMIT")
    name = f"tirtune_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield normalize_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def problems() -> list[Problem]:
    """A grid of shapes of both dtypes, e.g. the GEMMs of a few transformer models."""
    rng = random.Random(0)
    grid = {(m, n, k) for m in SIZES for n in SIZES for k in SIZES}
    picked = sorted(rng.sample(sorted(grid), int(os.environ.get("BENCH_SHAPES", 40))))
    return [Problem(m, n, k, dtype) for m, n, k in picked for dtype in ("float16", "bfloat16")]


def fill(url: str) -> tuple[int, list[Problem]]:
    """Insert the recorded H200 results for every problem; returns (rows, problems)."""
    recorded = [from_record(json.loads(line)) for line in RECORDED.read_text().splitlines() if line.strip()]
    engine = make_engine(url)
    factory = session_factory(engine)
    rows = 0
    shapes = problems()
    for problem in shapes:
        with transaction(factory) as s:
            job = repo.create_job(s, problem, "sm_90a", len(recorded))
            repo.claim_job(s, job.id)
            for i, ((version, base, config), data) in enumerate(recorded):
                scale = problem.flops / base.flops
                result = _scaled(Candidate(config, problem, version), data, scale)
                repo.record_measurement(s, job_id=job.id, trial_number=i, key=f"{problem}-{i}",
                                        candidate=result.candidate, outcome=result.outcome, message="",
                                        result=result)
                rows += 1
            for i in range(INVALID_PER_PROBLEM):
                candidate = Candidate(recorded[i][0][2], problem, recorded[i][0][0])
                repo.record_measurement(s, job_id=job.id, trial_number=None, key=f"{problem}-inv-{i}",
                                        candidate=candidate, outcome=Outcome.INVALID,
                                        message="smem_fits: too many stages", result=None)
                rows += 1
            # Done, its best trial re-measured, as a job ends.
            _, best = repo.job_with_best(s, job.id)
            assert best is not None
            index = int(best.key.rsplit("-", 1)[1])
            trial = Candidate(best.config, problem, best.template_version)
            again = _scaled(trial, recorded[index][1], problem.flops / recorded[index][0][1].flops)
            repo.record_remeasurements(s, job_id=job.id, session_id=uuid.uuid4().hex, rounds=10,
                                       pairs=[(best, again)])
            repo.finish_job(s, job.id, JobState.DONE, "trial budget reached")
    engine.dispose()
    vacuum(url)
    return rows, shapes


def vacuum(url: str) -> None:
    """What autovacuum does to a table after this many inserts: statistics, and a visibility map
    (index-only scans for counts)."""
    engine = make_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as c:
        c.execute(sa.text("VACUUM ANALYZE"))
    engine.dispose()


def _scaled(candidate: Candidate, data: dict[str, object], scale: float) -> RunResult:
    def ms(key: str) -> float | None:
        value = data.get(key)
        return None if value is None else float(value) * scale  # type: ignore[arg-type]

    stack = Stack(**data["stack"])  # type: ignore[arg-type]
    return RunResult(candidate, Outcome(data["outcome"]), time_ms=ms("time_ms"), cublas_ms=ms("cublas_ms"),
                     repetitions=int(data.get("repetitions") or 0),  # type: ignore[call-overload]
                     rel_error=data.get("rel_error"),  # type: ignore[arg-type]
                     provenance=Provenance(stack, candidate.template_version, str(data.get("torch", ""))))


# --- the server -----------------------------------------------------------------------------------


def app():  # type: ignore[no-untyped-def]
    """The uvicorn factory: the API only, no job workers (they would start Ray)."""
    from tirtune.api import create_app

    return create_app(start_workers=False)


class NoDelayH11(H11Protocol):
    """uvicorn's h11 protocol with TCP_NODELAY on every connection. With `--workers`, uvicorn binds
    the listening socket without naming IPPROTO_TCP, and asyncio sets TCP_NODELAY only on sockets
    made with it: a response (headers, then the body: two writes) then waited for the client's
    delayed ACK, about 40 ms between back-to-back requests on one connection, so a saturated
    phase measured its clients / 44 ms, not the server. `tirtune serve` (one process on asyncio's
    own socket) sets it already."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def server(url: str, workers: int, cache: bool = True) -> Iterator[int]:
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", "--factory", "bench.api_load:app", "--app-dir", str(ROOT),
           "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers), "--http", "bench.api_load:NoDelayH11",
           "--log-level", "warning", "--no-access-log"]
    env = {**os.environ, "DATABASE_URL": url, **({} if cache else {"TIRTUNE_BEST_CACHE_CHECK_S": "0"})}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    try:
        _wait_ready(port, proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(30)


def _wait_ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the API exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                time.sleep(2)  # every worker process up
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("the API did not start within 60 s")


# --- the clients ----------------------------------------------------------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection to 127.0.0.1 that sends GETs and reads whole responses."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            sock = self.writer.get_extra_info("socket")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        assert self.reader is not None
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        lines = head.split(b"\r\n")
        length = next(int(x.split(b":")[1]) for x in lines if x.lower().startswith(b"content-length:"))
        await self.reader.readexactly(length)
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def client(port: int, paths: list[str], until: float, interval: float | None, budget: list[int],
                 latencies: list[float], late: list[float], outcome: dict[str, int], seed: int) -> None:
    """One client on its own connection. `latencies`: send to last byte; `late`: scheduled send
    time to last byte (includes the client's own timer lag and any backlog: no coordinated omission)."""
    rng = random.Random(seed)
    conn = Connection(port)
    next_at = time.perf_counter() + (rng.random() * interval if interval else 0.0)
    try:
        while budget[0] > 0:
            if interval is not None:
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            sent = time.perf_counter()
            scheduled = next_at if interval is not None else sent
            if scheduled >= until or sent >= until + LATE_S:
                return
            budget[0] -= 1
            try:
                status = await conn.get(rng.choice(paths))
            except (OSError, asyncio.IncompleteReadError, ValueError, StopIteration):
                outcome["errors"] += 1
                conn.close()
                conn = Connection(port)
                continue
            done = time.perf_counter()
            latencies.append(done - sent)
            late.append(done - scheduled)
            outcome["non_200"] += status != 200
            if interval is not None:
                next_at += interval
    finally:
        conn.close()


@dataclass
class _Load:
    """What the clients of one endpoint saw, over one or more time windows."""

    latencies: list[float] = field(default_factory=list)
    late: list[float] = field(default_factory=list)
    outcome: dict[str, int] = field(default_factory=lambda: {"errors": 0, "non_200": 0})
    elapsed: float = 0.0

    async def run(self, port: int, paths: list[str], clients: int, seconds: float, rate: float | None,
                  max_requests: int) -> None:
        budget = [max_requests]
        interval = None if rate is None else clients / rate
        begin = time.perf_counter()
        until = begin + seconds
        await asyncio.gather(*(client(port, paths, until, interval, budget, self.latencies, self.late, self.outcome,
                                      i) for i in range(clients)))
        self.elapsed += time.perf_counter() - begin

    def phase(self, endpoint: str, name: str, clients: int, rate: float | None) -> Phase:
        q, q_late = _percentiles(self.latencies), _percentiles(self.late)
        return Phase(endpoint, name, clients, round(self.elapsed, 2), rate, len(self.latencies),
                     self.outcome["errors"], self.outcome["non_200"], round(len(self.latencies) / self.elapsed, 1),
                     q[49], q[89], q[98], q[99], q_late[98])


async def phase(endpoint: str, name: str, port: int, paths: list[str], clients: int, seconds: float,
                rate: float | None, max_requests: int) -> Phase:
    load = _Load()
    await load.run(port, paths, clients, seconds, rate, max_requests)
    return load.phase(endpoint, name, clients, rate)


ALTERNATING = "saturation, alternating"


async def alternating(port: int, loads: list[tuple[str, list[str]]], clients: int, seconds: float, slices: int,
                      max_requests: int) -> list[Phase]:
    """Saturation of several endpoints, each for `seconds` in all, in `slices` turns taken one after
    another: whatever else runs on the machine weighs on each alike, so their throughputs compare."""
    seen = {endpoint: _Load() for endpoint, _ in loads}
    for _ in range(slices):
        for endpoint, paths in loads:
            await seen[endpoint].run(port, paths, clients, seconds / slices, None, max_requests)
    return [seen[endpoint].phase(endpoint, ALTERNATING, clients, None) for endpoint, _ in loads]


def _percentiles(seconds: list[float]) -> list[float]:
    """1st..99th percentiles and the max, in ms."""
    ms = sorted(x * 1000 for x in seconds) or [float("nan")]
    q = statistics.quantiles(ms, n=100) if len(ms) > 1 else ms * 99
    return [round(x, 2) for x in [*q, ms[-1]]]


# --- the report -----------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    names = ("tirtune", "fastapi", "starlette", "uvicorn", "uvloop", "httptools", "pydantic", "sqlalchemy",
             "psycopg")
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    out["python"] = platform.python_version()
    return out


def postgres_version(url: str) -> str:
    engine = make_engine(url)
    with engine.connect() as c:
        version = str(c.execute(sa.text("SHOW server_version")).scalar())
    engine.dispose()
    return version


def write(report: dict[str, object], out: str) -> None:
    json_path, md_path = RESULTS / f"{out}.json", RESULTS / f"{out}.md"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    names = dict.fromkeys(p["endpoint"].split(",")[0] for p in report["phases"])  # type: ignore[attr-defined]
    lines = [
        f"# {' and '.join(names)} under load (bench/api_load.py)",
        "",
        f"{report['date']}; {report['machine']}; PostgreSQL {report['postgres']}; "
        f"{report['rows']} measurements of {report['problems']} problems; "
        f"{report['server_workers']} uvicorn worker(s). The load generator, the API and PostgreSQL share "
        "this machine's cores (and other work on it: see the load average below).",
        "",
        "| endpoint | phase | clients | offered req/s | requests | req/s | p50 ms | p90 ms | p99 ms | max ms "
        "| p99 ms from schedule | errors | non-200 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in report["phases"]:  # type: ignore[attr-defined]
        lines.append(f"| {p['endpoint']} | {p['name']} | {p['clients']} | {p['offered_rps'] or 'max'} | "
                     f"{p['requests']} | {p['throughput_rps']} | {p['p50_ms']} | {p['p90_ms']} | {p['p99_ms']} | "
                     f"{p['max_ms']} | {p['p99_from_schedule_ms']} | {p['errors']} | {p['non_200']} |")
    lines += ["", "Goals:", ""]
    lines += [f"- {g['endpoint']}: {g['goal']}: **{'met' if g['met'] else 'NOT met'}** ({g['measured']})"
              for g in report["goals"]]  # type: ignore[attr-defined]
    load = report["load_average_1_5_15"]
    lines += ["", f"Load average (1, 5, 15 min) before the phases: {load['before']}, after: {load['after']} "  # type: ignore[index]
              "(anything above the server's own share is other work on the machine).", "",
              NOTES, "",
              "Versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()), ""]  # type: ignore[attr-defined]
    md_path.write_text("\n".join(lines))


def run_phases(port: int, endpoint: str, paths: list[str], clients: int, rates: list[float], args: argparse.Namespace,
               saturate: bool = True) -> list[Phase]:
    asyncio.run(phase(endpoint, "warm-up", port, paths, clients, 3, None, args.max_requests))
    phases = []
    if saturate:
        phases.append(asyncio.run(phase(endpoint, "saturation", port, paths, clients, args.seconds, None,
                                        args.max_requests)))
    phases += [asyncio.run(phase(endpoint, f"paced {rate:g}/s", port, paths, clients, args.seconds, rate,
                                 args.max_requests)) for rate in rates]
    return phases


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=200, help="GET /best clients")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    p.add_argument("--rates", type=float, nargs="+", default=[200.0, 500.0, 1000.0],
                   help="offered req/s of the paced GET /best phases")
    p.add_argument("--trials-clients", type=int, default=50, help="GET /trials clients")
    p.add_argument("--trials-rates", type=float, nargs="+", default=[100.0],
                   help="offered req/s of the paced GET /trials phases")
    p.add_argument("--jobs-clients", type=int, default=50, help="GET /jobs/{id} clients")
    p.add_argument("--jobs-rates", type=float, nargs="+", default=[100.0],
                   help="offered req/s of the paced GET /jobs/{id} phases")
    p.add_argument("--endpoints", nargs="+", choices=ENDPOINTS, default=list(ENDPOINTS),
                   help="which endpoints to load (GET /best runs first when asked: the others' goals compare with it)")
    p.add_argument("--out", default=None,
                   help="results file stem under bench/results (default: api-load/<date>-<endpoints>)")
    p.add_argument("--max-requests", type=int, default=400_000, help="per phase")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    with throwaway_database() as url:
        migrate.upgrade(url)
        rows, shapes = fill(url)
        log.info("filled %d measurements of %d problems", rows, len(shapes))
        loads = {
            "best": ("GET /best", [f"/best?shape={s.shape}&dtype={s.dtype}" for s in shapes], args.clients,
                     args.rates),
            "trials": ("GET /trials?limit=100", ["/trials?limit=100"], args.trials_clients, args.trials_rates),
            "jobs": ("GET /jobs/{id}", [f"/jobs/{i}" for i in range(1, len(shapes) + 1)], args.jobs_clients,
                     args.jobs_rates),
        }
        chosen = [name for name in ENDPOINTS if name in args.endpoints]
        load_before = os.getloadavg()
        phases = []
        with server(url, args.workers) as port:
            for name in chosen:
                endpoint, paths, clients, rates = loads[name]
                phases += run_phases(port, endpoint, paths, clients, rates, args)
            if {"best", "jobs"} <= set(chosen):  # the throughput goal's comparison, same clients, taking turns
                pair = [(loads[name][0], loads[name][1]) for name in ("best", "jobs")]
                phases += asyncio.run(alternating(port, pair, args.jobs_clients, args.seconds, ALTERNATING_SLICES,
                                                  args.max_requests))
        with server(url, args.workers, cache=False) as port:  # GET /best is only ever served cached
            for name in (n for n in chosen if n != "best"):
                endpoint, paths, clients, rates = loads[name]
                phases += run_phases(port, f"{endpoint}, cache off", paths, clients, rates, args)
        load_after = os.getloadavg()
        report = build_report(args, rows, len(shapes), postgres_version(url), phases)
        report["load_average_1_5_15"] = {"before": load_before, "after": load_after}
    log.info("%s", json.dumps(report["phases"], indent=1))
    if not args.no_write:
        write(report, args.out or str(dated("api-load", "-".join(chosen)).relative_to(RESULTS)))
    return 0


ENDPOINTS = ("best", "trials", "jobs")
LOADED = {"best": "GET /best?shape=MxNxK&dtype=...", "trials": "GET /trials?limit=100", "jobs": "GET /jobs/{id}"}
# (endpoint, offered req/s, p99 ms at it): goals of the endpoints that ran.
GOALS = (("GET /best", 200.0, 10.0), ("GET /trials?limit=100", 100.0, 50.0),
         ("GET /trials?limit=100, cache off", 100.0, 50.0), ("GET /jobs/{id}", 100.0, 20.0),
         ("GET /jobs/{id}, cache off", 100.0, 20.0))
# (endpoint, share): its saturation throughput at least `share` of GET /best's in the same run, measured
# with the same clients in alternating slices (`alternating`) when both ran.
THROUGHPUT_GOALS = (("GET /jobs/{id}", 0.5),)
ALTERNATING_SLICES = 4


def build_report(
    args: argparse.Namespace, rows: int, n_problems: int, pg: str, phases: list[Phase]
) -> dict[str, object]:
    ran = {p.endpoint for p in phases}
    goals: list[dict[str, object]] = []
    for endpoint, rate, p99 in (g for g in GOALS if g[0] in ran):
        paced = next((p for p in phases if p.endpoint == endpoint and p.offered_rps == rate), None)
        met = paced is not None and paced.p99_ms <= p99 and paced.errors == 0 and paced.non_200 == 0
        measured = "not run" if paced is None else (f"p99 {paced.p99_ms} ms, {paced.throughput_rps} req/s, "
                                                    f"{paced.errors} errors, {paced.non_200} non-200")
        goals.append({"endpoint": endpoint, "goal": f"p99 <= {p99} ms at {rate:g} req/s", "rate": rate,
                      "p99_ms": p99, "met": met, "measured": measured})
    saturated = {p.endpoint: p for p in phases if p.name == "saturation"}
    saturated |= {p.endpoint: p for p in phases if p.name == ALTERNATING}  # a like-for-like comparison first
    for endpoint, share in (g for g in THROUGHPUT_GOALS if g[0] in ran and "GET /best" in ran):
        mine, best = saturated.get(endpoint), saturated.get("GET /best")
        met = mine is not None and best is not None and mine.throughput_rps >= share * best.throughput_rps
        measured = "not run" if mine is None or best is None else (
            f"{mine.throughput_rps} req/s with {mine.clients} clients, GET /best {best.throughput_rps} req/s with "
            f"{best.clients}: {mine.throughput_rps / best.throughput_rps:.2f} of it")
        goals.append({"endpoint": endpoint, "goal": f"saturation throughput >= {share:g} x GET /best's",
                      "share_of_best": share, "met": met, "measured": measured})
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, "
                   f"{platform.system()} {platform.release()}",
        "postgres": pg, "rows": rows, "problems": n_problems, "server_workers": args.workers,
        "endpoints": [LOADED[name] for name in ENDPOINTS if name in args.endpoints],
        "loopback_only": True, "client_and_server_share_the_machine": True,
        "phases": [asdict(p) for p in phases], "goals": goals, "goal_met": all(g["met"] for g in goals),
        "versions": versions(),
    }


if __name__ == "__main__":
    sys.exit(main())
