"""The job loop: propose, check validity, build on CPUs, measure on GPUs, record, tell.

Builds of the next batch overlap the measurement of the current one, so the GPU waits on nvcc
only at the start. Every candidate ends as one stored measurement (OK or a failure with its
reason); a config measured before on the same stack is reused, not measured again. A resumed
job answers configs it already recorded from its rows, so no config is measured twice in a job.
The best so far is the trial with the highest same-run ratio (not the most TFLOP/s). When the
budget is spent, the top trials by that ratio are re-measured interleaved, in
`remeasure_processes` measuring processes, and the job's best is chosen from those figures by
`repo.best_of`, the rule every surface uses (tirtune.db.best; docs/design.md, "One best, by the
same-run ratio"; docs/measurement.md).
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace

from sqlalchemy.orm import Session, sessionmaker

from tirtune.builder.builder import Builder
from tirtune.core import BuildResult, Candidate, Config, Outcome, Provenance, RunResult, Source, Stack
from tirtune.db.best import BestChoice
from tirtune.db.records import JobRecord, MeasurementRecord, RemeasurementRecord
from tirtune.model.guide import Guide
from tirtune.model.keeper import ModelKeeper
from tirtune.runner.runner import Runner
from tirtune.space.branches import branch
from tirtune.space.space import SearchSpace
from tirtune.tuner.errors import TunerError
from tirtune.tuner.job_store import JobStore
from tirtune.tuner.optuna_proposer import LOCAL_SHARE, OptunaProposer
from tirtune.tuner.proposer import Feedback, Proposal, Proposer, Refusal
from tirtune.tuner.start import guided_starts, start_sources

__all__ = ["JobLoop", "JobSummary", "Progress", "why_nothing_ran"]

log = logging.getLogger(__name__)

PENDING = "PENDING"
MAX_IDLE_ASKS = 200  # consecutive proposals that add nothing new: the space is exhausted
# A job asks at most a quarter of its trial budget at once (and at least 4): with two batches
# asked ahead, a 32-trial job in 16-wide batches asked everything before its first result, and its
# search (the local search around the best so far) never saw one. In quarters, half of a job's
# trials are asked knowing some results.
BUDGET_PARTS = 4
MIN_BATCH = 4


@dataclass(frozen=True, slots=True)
class Progress:
    job_id: int
    trials_done: int
    max_trials: int
    last: MeasurementRecord | None
    best: MeasurementRecord | None  # the highest same-run ratio so far (trial figures)


@dataclass(frozen=True, slots=True)
class JobSummary:
    job_id: int
    state: str
    trials: int
    best: MeasurementRecord | None
    message: str
    remeasured: tuple[RemeasurementRecord, ...] = ()
    choice: BestChoice | None = None  # repo.best_of for this job: the best with the figures it is named by


class JobLoop:
    """Runs one job to its trial or time budget; resumable, since all state is in the database."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        storage_url: str,
        space: SearchSpace,
        builder: Builder,
        runner: Runner,
        *,
        batch_size: int = 4,
        on_progress: Callable[[Progress], None] | None = None,
        proposer_factory: Callable[[JobRecord], Proposer] | None = None,
        remeasure_top: int = 5,
        remeasure_rounds: int = 5,
        remeasure_processes: int = 2,
        ahead: int = 2,
        local_share: float = LOCAL_SHARE,
        models: ModelKeeper | None = None,
    ) -> None:
        """`remeasure_top` trials (0: none) are re-measured interleaved, `remeasure_rounds`
        rounds in each of `remeasure_processes` measuring processes, before the job's best is named.
        `ahead` batches are asked and built ahead of the one the GPUs measure (1: the next one
        only, asked while the GPUs measure; 2: asking and building also overlap each other).
        `local_share` of each batch after the starting points is proposed one knob away from the
        best configs so far (`OptunaProposer`). With `models`, the cost model of the job's GPU
        (when it has enough measurements to learn from) ranks the starts and guides that search."""
        self.sessions = sessions
        self.storage_url = storage_url
        self.space = space
        self.builder = builder
        self.runner = runner
        self.batch_size = max(1, batch_size)
        self.on_progress = on_progress
        self.proposer_factory = proposer_factory or self._optuna
        self.remeasure_top = remeasure_top
        self.remeasure_rounds = remeasure_rounds
        self.remeasure_processes = max(1, remeasure_processes)
        self.ahead = max(1, ahead)
        self.local_share = local_share
        self.models = models
        self.source = Source(runner.source)
        self.store = JobStore(sessions, self.source)

    def _optuna(self, job: JobRecord) -> Proposer:
        # Transfer from the nearest tuned problems, then the configs of the job's shape class: the
        # starts themselves, or, with a cost model, seeds of its ranking.
        arch = branch(job.arch)
        near, own = start_sources(self.sessions, arch, job.problem, gpu_name=job.gpu_name, source=self.source)
        guide = self._guide(job, arch.version_prefix, (*near, *own))
        start_with = guided_starts(guide, near) if guide is not None else (*near, *own)
        return OptunaProposer(
            self.storage_url, job.study_name, self.space, seed=job.id, start_with=start_with, problem=job.problem,
            local_share=self.local_share, guide=guide,
        )

    def _guide(self, job: JobRecord, version_prefix: str, seeds: Sequence[Config]) -> Guide | None:
        """The cost model at this job's problem, or None (no keeper, or too little to learn from)."""
        if self.models is None:
            return None
        model = self.models.model(job.gpu_name, version_prefix, self.source)
        if model is None:
            return None
        guide = Guide(model, self.space, job.problem, seeds=seeds, rng=random.Random(job.id))
        log.info("job %d: cost model %s (%d samples, %d problems) ranks %d configs; its pick %s predicted %.3fx",
                 job.id, model.digest, model.samples, model.problems, len(guide.ranked),
                 guide.ranked[0][0].label() if guide.ranked else "-", guide.ranked[0][1] if guide.ranked else 0.0)
        return guide

    def run(self, job_id: int) -> JobSummary:
        job = self.store.job(job_id)
        if job.arch != self.space.arch:
            raise TunerError(
                f"job {job_id} asks for {job.arch} kernels, but this worker's GPUs take {self.space.arch} "
                "(queue it with that arch, or run it where such GPUs are)"
            )
        self.space.check_problem(job.problem)
        stack = self.runner.stack()
        job = self.store.start_job(job_id, stack)
        state = _Run(self, job, stack, self.proposer_factory(job))
        return state.loop()


class _Run:
    """The state of one job while it runs."""

    def __init__(self, owner: JobLoop, job: JobRecord, stack: Stack, proposer: Proposer) -> None:
        self.o = owner
        self.job = job
        self.stack = stack
        self.proposer = proposer
        self.done = job.trials_done
        self.deadline = None if job.time_budget_s is None else time.monotonic() + job.time_budget_s
        self.seen: dict[Config, Feedback] = {}
        self.waiting: dict[Config, list[int]] = {}  # duplicate trials of configs still in flight
        self.idle_asks = 0
        self.best: MeasurementRecord | None = None
        self.remeasured: tuple[RemeasurementRecord, ...] = ()
        self.choice: BestChoice | None = None
        self._recall()

    def _recall(self) -> None:
        """A resumed job: what it recorded before answers those configs if they are asked again
        (a trial told to the database but not to Optuna before a crash is asked once more)."""
        recalled = self.o.store.recall(self.job.id)
        for row in reversed(recalled.rows):  # oldest first, so the newest record of a config wins
            self.seen[row.config] = _feedback(-1, row)
        self.done, self.best = recalled.trials_done, recalled.best

    def remaining(self) -> int:
        return self.job.max_trials - self.done

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def loop(self) -> JobSummary:
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tirtune-build")
        gpu = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tirtune-measure")
        # Batches asked and handed to the builder, oldest first: up to `ahead` of them while the
        # GPUs measure another, so asking (seconds: TPE's samples mostly break a rule and are
        # repaired), building and measuring overlap; each batch is told when its results arrive.
        # A batch's measurement is queued on the GPUs when it is asked, to start as soon as its
        # builds are done and the batch before it is measured: the GPUs do not wait for this
        # thread to record and tell the batch before (on two GPUs that wait, with the asking, left
        # each GPU idle half the time: bench/loop_overhead.py).
        pending: deque[tuple[list[tuple[Proposal, Candidate]], Future[list[BuildResult]], Future[list[RunResult]]]]
        pending = deque()

        def measured_when_built(built: Future[list[BuildResult]]) -> list[RunResult]:
            runnable = [b for b in built.result() if b.ok]
            return self.o.runner.run(runnable) if runnable else []

        def refill(measuring: int) -> None:
            while len(pending) < self.o.ahead and not self.out_of_time() and self.idle_asks < MAX_IDLE_ASKS:
                in_flight = measuring + sum(len(c) for c, _, _ in pending)
                if self.remaining() - in_flight <= 0:
                    return
                batch = self._next_batch(pool, in_flight=in_flight)
                if batch is None:
                    return
                candidates, built = batch
                pending.append((candidates, built, gpu.submit(measured_when_built, built)))

        try:
            refill(0)
            while pending:
                candidates, built, runs = pending.popleft()
                builds = built.result()
                refill(len(candidates))
                self._measure(candidates, builds, runs)
                if not pending:  # what was asked is measured; ask again while budget is left
                    refill(0)
        finally:
            gpu.shutdown(wait=True, cancel_futures=True)
            pool.shutdown(wait=True, cancel_futures=True)
            self.proposer.abandon()
        self._remeasure_top()
        rows = self._name_best()
        failed = why_nothing_ran(rows)
        if failed is not None:  # every candidate failed: the job says why, in one line
            return JobSummary(self.job.id, "FAILED", self.done, None, failed, self.remeasured, None)
        return JobSummary(
            self.job.id, "DONE", self.done, self.best, self._stop_reason(), self.remeasured, self.choice
        )

    def _remeasure_top(self) -> None:
        """Re-measure the top trials interleaved, so that the best is named from figures taken
        side by side, not from trial figures taken minutes apart under a drifting clock; known
        re-measurements (every top key's, same source) are reused."""
        top = self._top_trials()
        if len(top) < 2:
            return
        known = self.o.store.remeasured([r.key for r in top])
        figures = [known[r.key] for r in top] if all(r.key in known for r in top) else self._remeasure(top)
        self.remeasured = tuple(figures)
        if not any(f.outcome is Outcome.OK for f in figures):
            log.warning("job %d: no top trial survived re-measurement", self.job.id)

    def _name_best(self) -> list[MeasurementRecord]:
        """The job's best is `repo.best_of` over its trials: the re-measured ratio decides.
        Returns all the job's rows."""
        finished = self.o.store.finish(self.job.id, self.job.problem)
        self.choice = finished.choice
        if self.choice is None:
            return finished.rows
        winner, figures = self.choice.best.trial, self.choice.best.figures
        self.best = winner
        log.info(
            "job %d: best %s at %.3fx cuBLAS (%s; trial figure %.3fx): %s",
            self.job.id, winner.config.label(), figures.ratio,
            "re-measured" if figures.confirmed else "not re-measured", winner.ratio or 0.0, self.choice.note,
        )
        return finished.rows

    def _top_trials(self) -> list[MeasurementRecord]:
        """The job's best `remeasure_top` configs by trial ratio, on this stack (one per config)."""
        if self.o.remeasure_top < 2:
            return []
        rows = self.o.store.measurements(self.job.id, Outcome.OK)
        ok = [r for r in rows if r.ratio and r.tflops and not r.stale and r.stack.identity() == self.stack.identity()]
        top: dict[str, MeasurementRecord] = {}
        for r in sorted(ok, key=lambda r: (-(r.ratio or 0.0), r.id)):
            top.setdefault(r.key, r)
        return list(top.values())[: self.o.remeasure_top]

    def _remeasure(self, top: Sequence[MeasurementRecord]) -> list[RemeasurementRecord]:
        builds = self.o.builder.build([Candidate(r.config, r.problem, r.template_version) for r in top])
        results = self.o.runner.remeasure(builds, self.o.remeasure_rounds, self.o.remeasure_processes)
        return self.o.store.record_remeasurements(
            self.job.id, self.o.remeasure_rounds, list(zip(top, results, strict=True))
        )

    def _stop_reason(self) -> str:
        if self.remaining() <= 0:
            return f"trial budget of {self.job.max_trials} reached"
        if self.out_of_time():
            return f"time budget of {self.job.time_budget_s:g}s reached"
        return "search space exhausted: no new configurations proposed"

    def _next_batch(
        self, pool: ThreadPoolExecutor, in_flight: int
    ) -> tuple[list[tuple[Proposal, Candidate]], Future[list[BuildResult]]] | None:
        """Ask until a batch of new, valid candidates is ready; record the rest right away."""
        want = min(self.o.batch_size, max(MIN_BATCH, -(-self.job.max_trials // BUDGET_PARTS)),
                   self.remaining() - in_flight)
        batch: list[tuple[Proposal, Candidate]] = []
        while len(batch) < want and self.idle_asks < MAX_IDLE_ASKS:
            proposals = self.proposer.ask(want - len(batch))
            if not proposals:  # the proposer has nothing new left to offer
                self.idle_asks = MAX_IDLE_ASKS
                break
            for proposal in proposals:
                if proposal.refused is not None:
                    self._record_refusal(proposal.refused)
                candidate = Candidate(proposal.config, self.job.problem, self.o.space.template_version)
                if self._settled_without_gpu(proposal, candidate):
                    continue
                batch.append((proposal, candidate))
                self.seen[proposal.config] = Feedback(proposal.trial, None, PENDING)
            if self.remaining() - in_flight - len(batch) <= 0:
                break
        if not batch:
            return None
        return batch, pool.submit(self.o.builder.build, [c for _, c in batch])

    def _settled_without_gpu(self, proposal: Proposal, candidate: Candidate) -> bool:
        """Duplicates, invalid configs and reusable measurements need no build and no GPU."""
        earlier = self.seen.get(proposal.config)
        if earlier is not None:
            self.idle_asks += 1
            if earlier.outcome == PENDING:  # answered when the first copy's result arrives
                self.waiting.setdefault(proposal.config, []).append(proposal.trial)
            else:
                self.proposer.tell([replace(earlier, trial=proposal.trial)])
            return True
        violations = self.o.space.violations(proposal.config, candidate.problem)
        if violations:
            message = "; ".join(map(str, violations))
            self._record(proposal, candidate, Outcome.INVALID, message, None, None)
            return True
        self.idle_asks = 0
        key = candidate.measurement_key(self.stack)
        previous = self.o.store.measured_before(key)
        if previous is not None:
            self._reuse(proposal, candidate, previous)
            return True
        return False

    def _record_refusal(self, refusal: Refusal) -> None:
        """A sample the proposer refused and replaced: stored as INVALID with its rules (once per
        config), already told to the proposer, so it costs no trial."""
        if refusal.config in self.seen:
            return
        candidate = Candidate(refusal.config, self.job.problem, self.o.space.template_version)
        self.o.store.refuse(
            self.job.id, refusal.trial, candidate, candidate.measurement_key(self.stack), refusal.message
        )
        self.seen[refusal.config] = Feedback(refusal.trial, None, Outcome.INVALID.value, refusal.message)

    def _reuse(self, proposal: Proposal, candidate: Candidate, previous: MeasurementRecord) -> None:
        recorded = self.o.store.reuse(self.job.id, proposal.trial, previous)
        self.done, self.best = recorded.trials_done, recorded.best
        self._after(proposal, recorded.record)

    def _measure(self, batch: Sequence[tuple[Proposal, Candidate]], builds: Sequence[BuildResult],
                 runs: Future[list[RunResult]]) -> None:
        """Record the batch: `runs` is the GPU run of its OK builds (empty when none built)."""
        measured = iter(runs.result())
        for (proposal, candidate), build in zip(batch, builds, strict=True):
            # A failed build is stored with the stack too, so a new toolchain marks it stale.
            result = (
                next(measured)
                if build.ok
                else RunResult.failed(candidate, build.outcome, build.message).with_provenance(
                    Provenance(self.stack, candidate.template_version, source=self.o.source)
                )
            )
            self._record(proposal, candidate, result.outcome, result.message, result, build.seconds)

    def _record(
        self,
        proposal: Proposal,
        candidate: Candidate,
        outcome: Outcome,
        message: str,
        result: RunResult | None,
        build_seconds: float | None,
    ) -> None:
        recorded = self.o.store.record(
            self.job.id, proposal.trial, candidate, candidate.measurement_key(self.stack), outcome, message,
            result, build_seconds,
        )
        self.done, self.best = recorded.trials_done, recorded.best
        self._after(proposal, recorded.record)

    def _after(self, proposal: Proposal, record: MeasurementRecord) -> None:
        """Tell the proposer (and the duplicates waiting on this config); `done` and `best` were
        read back from the job's row, which the repository keeps (db.repo.job_progress)."""
        ok = record.outcome == Outcome.OK.value
        feedback = _feedback(proposal.trial, record)
        self.seen[proposal.config] = feedback
        twins = [replace(feedback, trial=t) for t in self.waiting.pop(proposal.config, [])]
        self.proposer.tell([feedback, *twins])
        if record.outcome == Outcome.INVALID.value:
            self.idle_asks += 1  # refused by a rule: recorded, and the repository spent no trial
            return
        log.info(
            "job %d trial %d: %s %s",
            self.job.id,
            proposal.trial,
            record.outcome.value,
            f"{record.tflops:.1f} TFLOP/s, {record.ratio or 0:.3f}x cuBLAS" if ok and record.tflops
            else record.message[:120],
        )
        if self.o.on_progress is not None:
            self.o.on_progress(Progress(self.job.id, self.done, self.job.max_trials, record, self.best))


def _feedback(trial: int, record: MeasurementRecord) -> Feedback:
    """What the proposer learns from a stored trial: its same-run ratio to cuBLAS when it ran
    correctly (the figure every best is named by), else its outcome and reason."""
    ok = record.outcome is Outcome.OK and record.ratio is not None
    return Feedback(trial, record.ratio if ok else None, record.outcome.value, record.message)


def why_nothing_ran(rows: Sequence[MeasurementRecord]) -> str | None:
    """None if some candidate of the job ran correctly; else one line naming the most common
    failure and its root cause (the first line of its message: for a failed build, the reason
    from TIRx's dispatch table or the compiler's first error, see builder/diagnosis.py), or, when
    every proposed config broke a rule, the rule most often broken."""
    if any(r.outcome is Outcome.OK for r in rows):
        return None
    tried = [r for r in rows if r.outcome is not Outcome.INVALID]
    if not tried:
        rules = Counter(v.split(":", 1)[0].strip() for r in rows for v in r.message.split(";") if v.strip())
        if not rules:
            return None  # nothing was proposed at all: the stop reason says why
        rule, count = rules.most_common(1)[0]
        return f"no valid config: all {len(rows)} proposed broke a rule; most often {rule} ({count})"
    causes = Counter((r.outcome.value, _first_line(r.message)) for r in tried)
    (outcome, cause), count = causes.most_common(1)[0]
    return f"every candidate failed ({len(tried)} of {len(tried)}); {outcome} x{count}: {cause}"


def _first_line(message: str) -> str:
    return next((line.strip() for line in message.splitlines() if line.strip()), "no message")
