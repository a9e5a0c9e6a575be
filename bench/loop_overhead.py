"""The job loop's own pace, with no GPU and no compiler: how close it keeps stand-in GPUs to busy.

A study on two H200s measured its GPUs busy only half the time
(bench/results/scaling/2026-11-30-1-vs-2-gpus.md: 4096^3, each GPU 0.48-0.53), so the host side of
the loop (asking Optuna, telling it, recording each trial) sets the pace there. This runs the
service's own JobLoop, OptunaProposer and database on the hopper-gemm/5 space, with stand-ins at our
own interfaces only: a builder that answers at once (a warm build cache) and a runner whose `gpus`
slots each take `gpu_s` seconds a candidate (the H200's measured 0.35 s at 4096^3) and share out
concurrent callers the way GpuRunner's actors do. Reported: wall, trials per minute, the slots' busy
fraction, and where the loop thread's time went (ask, the wait for builds, the wait for
measurements, recording and telling).

    python -m bench.loop_overhead --gpus 1 2 --trials 64 --out bench/results/scaling/2026-12-01-loop-overhead
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tirtune.core import BuildResult, Candidate, Outcome, Problem, Provenance, RunResult, Source, Stack
from tirtune.db import open_database, repo, transaction, url_of
from tirtune.space.branches import branch
from tirtune.tuner.job import JobLoop
from tirtune.tuner.optuna_proposer import LOCAL_SHARE, OptunaProposer
from tirtune.tuner.proposer import Feedback, Proposal

STACK = Stack("stand-in GPU", "0", "13.0", "0.27.0", "9.0")


class InstantBuilder:
    """A warm build cache: every candidate built, at once."""

    def build(self, batch: Sequence[Candidate]) -> list[BuildResult]:
        return [BuildResult(c, Outcome.OK, artifact=f"stand-in/{c.build_key()}", cached=True) for c in batch]


class SlotRunner:
    """`gpus` slots, each busy `gpu_s` a candidate; concurrent callers share the free slots."""

    source = Source.GPU

    def __init__(self, gpus: int, gpu_s: float) -> None:
        self.gpu_s = gpu_s
        self._slots = threading.Semaphore(gpus)
        self._lock = threading.Lock()
        self.busy_s = 0.0

    def stack(self) -> Stack:
        return STACK

    def _one(self, build: BuildResult) -> RunResult:
        with self._slots:
            began = time.perf_counter()
            time.sleep(self.gpu_s)
            with self._lock:
                self.busy_s += time.perf_counter() - began
        # A deterministic figure per config: the search has something to climb.
        h = int(hashlib.sha256(build.candidate.config.canonical().encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        return RunResult(build.candidate, Outcome.OK, time_ms=1.0, cublas_ms=0.2 + 0.8 * h, repetitions=10,
                         rel_error=1e-4, provenance=Provenance(STACK, build.candidate.template_version))

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        out: list[RunResult | None] = [None] * len(batch)

        def one(i: int) -> None:
            out[i] = self._one(batch[i])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(batch))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [r for r in out if r is not None]

    def remeasure(self, batch: Sequence[BuildResult], rounds: int = 5, processes: int = 1) -> list[RunResult]:
        return self.run(batch)


class TimedProposer:
    """The job's OptunaProposer, its asks and tells timed."""

    def __init__(self, inner: OptunaProposer, spent: dict[str, float]) -> None:
        self.inner, self.spent = inner, spent

    def ask(self, n: int) -> list[Proposal]:
        with _timed(self.spent, "ask"):
            return self.inner.ask(n)

    def tell(self, feedback: Sequence[Feedback]) -> None:
        with _timed(self.spent, "tell"):
            self.inner.tell(feedback)

    def abandon(self) -> None:
        self.inner.abandon()


@contextmanager
def _timed(spent: dict[str, float], what: str) -> Iterator[None]:
    began = time.perf_counter()
    try:
        yield
    finally:
        spent[what] += time.perf_counter() - began


def study(problem: Problem, gpus: int, gpu_s: float, trials: int, batch: int, ahead: int, work: Path,
          local_share: float = LOCAL_SHARE) -> dict[str, Any]:
    url = f"sqlite:///{work / f'loop-{gpus}-{time.monotonic_ns()}.db'}"
    sessions = open_database(url)
    hopper = branch("sm_90a")
    spent: dict[str, float] = defaultdict(float)
    runner = SlotRunner(gpus, gpu_s)

    def proposer(job: Any) -> TimedProposer:
        inner = OptunaProposer(url_of(sessions), job.study_name, hopper.space, seed=job.id,
                               start_with=hopper.start_configs(job.problem), problem=job.problem,
                               local_share=local_share)
        return TimedProposer(inner, spent)

    with transaction(sessions) as s:
        job = repo.create_job(s, problem, "sm_90a", trials)
        repo.claim_job(s, job.id)
    loop = JobLoop(sessions, url_of(sessions), hopper.space, InstantBuilder(), runner, batch_size=batch,
                   proposer_factory=proposer, remeasure_top=0, ahead=ahead)
    began = time.perf_counter()
    summary = loop.run(job.id)
    wall = time.perf_counter() - began
    sessions.kw["bind"].dispose()
    return {
        "problem": problem.shape, "gpus": gpus, "gpu_s": gpu_s, "trials": summary.trials, "batch": batch,
        "ahead": ahead, "local_share": local_share, "wall_s": round(wall, 2),
        "trials_per_min": round(60 * summary.trials / wall, 1),
        "gpu_bound_trials_per_min": round(60 * gpus / gpu_s, 1),
        "busy": round(runner.busy_s / (wall * gpus), 3),
        "ask_s": round(spent["ask"], 2), "tell_s": round(spent["tell"], 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="4096x4096x4096")
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--gpu-s", type=float, default=0.35, help="stand-in GPU seconds a candidate")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ahead", type=int, default=2)
    ap.add_argument("--local-share", type=float, default=LOCAL_SHARE,
                    help="the proposer's local search share (0: TPE alone)")
    ap.add_argument("--label", default="", help="names this run's loop in the table (e.g. a commit)")
    ap.add_argument("--add-to", type=Path, default=None, help="an earlier OUT.json whose rows come first")
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args(argv)
    m, n, k = (int(x) for x in args.problem.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        rows = [study(Problem(m, n, k, "float16"), g, args.gpu_s, args.trials, args.batch, args.ahead, Path(tmp),
                      args.local_share) for g in args.gpus]
    for r in rows:
        r["loop"] = args.label
    earlier = json.loads(args.add_to.read_text())["rows"] if args.add_to else []
    report = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.processor() or
              platform.machine(), "cpus": len(os.sched_getaffinity(0)), "rows": earlier + rows}
    md = to_markdown(report)
    print(md)  # noqa: T201
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(md)
    return 0


def to_markdown(report: dict[str, Any]) -> str:
    lines = [
        "# The job loop's own pace (stand-in GPUs and builder; real JobLoop, Optuna, SQLite)", "",
        f"{report['date']}; {report['cpus']} CPUs ({report['machine']}).", "",
        "| loop | problem | GPUs | GPU s/candidate | trials | batch | ahead | wall s | trials/min "
        "| GPU-bound trials/min | busy | ask s | tell s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| {r.get('loop') or '-'} | {r['problem']} | {r['gpus']} | {r['gpu_s']} | {r['trials']} | {r['batch']} "
              f"| {r['ahead']} "
              f"| {r['wall_s']} | {r['trials_per_min']} | {r['gpu_bound_trials_per_min']} | {r['busy']} "
              f"| {r['ask_s']} | {r['tell_s']} |" for r in report["rows"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
