"""The job loop: propose -> check -> build -> measure -> record -> tell.

Each stage is a method of `_JobRun`, the state of one running job: `_propose` asks the proposer;
`_check` settles what needs no GPU (a duplicate is answered from the first copy's result, a
refusal the proposer carries and a config that breaks a rule are stored INVALID with the rules it
broke, a config measured before on the same stack is reused, not measured again); `_build` hands a
batch to the builder; `_measure` runs its OK builds on the GPUs; `_record` stores each result
through the job's `JobStore` (tirtune/tuner/job_store.py, the loop's one door to the database);
`_tell` tells the proposer. Builds of the next batch overlap the measurement of the current one
(`_fill`), so the GPU waits on nvcc only at the start. Every candidate ends as one stored
measurement (OK or a failure with its reason). A resumed job answers configs it already recorded
from its rows, so no config is measured twice in a job. The best so far is the trial with the
highest same-run ratio (not the most TFLOP/s). When the budget is spent, the top trials by that
ratio are re-measured interleaved, in `remeasure_processes` measuring processes, and the job's best
is chosen from those figures by `repo.best_of`, the rule every surface uses (tirtune.db.best;
docs/design.md, "One best, by the same-run ratio"; docs/measurement.md).
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TypeAlias

from sqlalchemy.orm import Session, sessionmaker

from tirtune.builder.builder import Builder
from tirtune.core import BuildResult, Candidate, Config, Outcome, Provenance, RunResult, Source, Stack
from tirtune.db.best import BestChoice
from tirtune.db.records import JobRecord, MeasurementRecord, RemeasurementRecord
from tirtune.model.guide import Guide
from tirtune.model.keeper import ModelKeeper
from tirtune.model.learner import CostModel
from tirtune.runner.runner import Runner
from tirtune.space.branches import branch
from tirtune.space.space import SearchSpace
from tirtune.tuner.errors import TunerError
from tirtune.tuner.job_store import JobStore, Recorded
from tirtune.tuner.optuna_proposer import OptunaProposer
from tirtune.tuner.proposer import Feedback, Proposal, Proposer, Refusal
from tirtune.tuner.start import guided_starts, start_sources

__all__ = ["JobLoop", "JobSummary", "LoopSettings", "Progress", "why_nothing_ran"]

log = logging.getLogger(__name__)

PENDING = "PENDING"
MAX_IDLE_ASKS = 200  # consecutive proposals that add nothing new: the space is exhausted
# A job asks at most a quarter of its trial budget at once (and at least 4): with two batches
# asked ahead, a 32-trial job in 16-wide batches asked everything before its first result, and its
# search (the local search around the best so far) never saw one. In quarters, half of a job's
# trials are asked knowing some results.
BUDGET_PARTS = 4
MIN_BATCH = 4

Trial: TypeAlias = tuple[Proposal, Candidate]  # a proposal that passed the check, and what to build


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


@dataclass(frozen=True, slots=True)
class LoopSettings:
    """How a job loop runs; `JobLoop`'s arguments of the same names say what each means."""

    batch_size: int = 4
    ahead: int = 2
    remeasure_top: int = 5
    remeasure_rounds: int = 5
    remeasure_processes: int = 2
    local_share: float | None = None  # None: the proposer's default (with or without a cost model)


@dataclass(frozen=True, slots=True)
class _Batch:
    """A batch asked and handed to the builder, its measurement queued on the GPUs."""

    trials: list[Trial]
    built: Future[list[BuildResult]]
    runs: Future[list[RunResult]]  # the GPU run of its OK builds (empty when none built)


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
        local_share: float | None = None,
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
        self.settings = LoopSettings(
            batch_size=max(1, batch_size),
            ahead=max(1, ahead),
            remeasure_top=remeasure_top,
            remeasure_rounds=remeasure_rounds,
            remeasure_processes=max(1, remeasure_processes),
            local_share=local_share,
        )
        self.on_progress = on_progress
        self.proposer_factory = proposer_factory or self._optuna
        self.models = models
        self.source = Source(runner.source)
        self.store = JobStore(sessions, self.source)

    def _optuna(self, job: JobRecord) -> Proposer:
        # Transfer from the nearest tuned problems, then the configs of the job's shape class: with
        # a cost model, seeds of its ranking; without, the starts themselves, transferred from
        # problems of the job's own shape class only (tuner/start.py).
        arch = branch(job.arch)
        model = self._model(job, arch.version_prefix)
        near, own = start_sources(
            self.sessions, arch, job.problem, gpu_name=job.gpu_name, source=self.source, same_class=model is None
        )
        guide = None if model is None else self._guide(job, model, (*near, *own))
        start_with = guided_starts(guide, near) if guide is not None else (*near, *own)
        return OptunaProposer(
            self.storage_url,
            job.study_name,
            self.space,
            seed=job.id,
            start_with=start_with,
            problem=job.problem,
            local_share=self.settings.local_share,
            guide=guide,
            budget=job.max_trials,
        )

    def _model(self, job: JobRecord, version_prefix: str) -> CostModel | None:
        """The cost model for this job, or None (no keeper, an FP8 problem, too little to learn from)."""
        if self.models is None:
            return None
        if job.problem.is_fp8:  # the model learns from 16-bit GEMMs only (repo.training_samples)
            log.info("job %d: an FP8 problem, searched without the cost model", job.id)
            return None
        return self.models.model(job.gpu_name, version_prefix, self.source)

    def _guide(self, job: JobRecord, model: CostModel, seeds: Sequence[Config]) -> Guide:
        """The cost model's ranking at this job's problem, `seeds` among its candidates."""
        guide = Guide(model, self.space, job.problem, seeds=seeds, rng=random.Random(job.id))
        log.info(
            "job %d: cost model %s (%d samples, %d problems) ranks %d configs; its pick %s predicted %.3fx",
            job.id,
            model.digest,
            model.samples,
            model.problems,
            len(guide.ranked),
            guide.ranked[0][0].label() if guide.ranked else "-",
            guide.ranked[0][1] if guide.ranked else 0.0,
        )
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
        proposer = self.proposer_factory(job)
        return _JobRun(
            job,
            stack,
            proposer,
            store=self.store,
            space=self.space,
            builder=self.builder,
            runner=self.runner,
            settings=self.settings,
            on_progress=self.on_progress,
        ).run()


class _JobRun:
    """The state of one job while it runs: its stages are the methods `_propose`, `_check`,
    `_build`, `_measure`, `_record` and `_tell`; `_fill` keeps batches in flight through them."""

    def __init__(
        self,
        job: JobRecord,
        stack: Stack,
        proposer: Proposer,
        *,
        store: JobStore,
        space: SearchSpace,
        builder: Builder,
        runner: Runner,
        settings: LoopSettings,
        on_progress: Callable[[Progress], None] | None,
    ) -> None:
        self.job = job
        self.stack = stack
        self.proposer = proposer
        self.store = store
        self.space = space
        self.builder = builder
        self.runner = runner
        self.settings = settings
        self.on_progress = on_progress
        self.source = store.source
        self.deadline = None if job.time_budget_s is None else time.monotonic() + job.time_budget_s
        self.seen: dict[Config, Feedback] = {}
        self.waiting: dict[Config, list[int]] = {}  # duplicate trials of configs still in flight
        self.idle_asks = 0
        self.remeasured: tuple[RemeasurementRecord, ...] = ()
        self.choice: BestChoice | None = None
        # Batches asked and handed to the builder, oldest first: up to `ahead` of them while the
        # GPUs measure another, so asking (seconds: TPE's samples mostly break a rule and are
        # repaired), building and measuring overlap; each batch is told when its results arrive.
        # A batch's measurement is queued on the GPUs when it is asked, to start as soon as its
        # builds are done and the batch before it is measured: the GPUs do not wait for this
        # thread to record and tell the batch before (on two GPUs that wait, with the asking, left
        # each GPU idle half the time: bench/loop_overhead.py).
        self.pending: deque[_Batch] = deque()
        self.builds = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tirtune-build")
        self.gpus = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tirtune-measure")
        self.done, self.best = self._recall()

    def _recall(self) -> tuple[int, MeasurementRecord | None]:
        """A resumed job: what it recorded before answers those configs if they are asked again
        (a trial told to the database but not to Optuna before a crash is asked once more).
        Returns the job's progress: (trials done, best so far)."""
        recalled = self.store.recall(self.job.id)
        for row in reversed(recalled.rows):  # oldest first, so the newest record of a config wins
            self.seen[row.config] = _feedback(-1, row)
        return recalled.trials_done, recalled.best

    def remaining(self) -> int:
        return self.job.max_trials - self.done

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def run(self) -> JobSummary:
        try:
            self._search()
        finally:
            self.gpus.shutdown(wait=True, cancel_futures=True)
            self.builds.shutdown(wait=True, cancel_futures=True)
            self.proposer.abandon()
        self._remeasure_top()
        failed = why_nothing_ran(self._name_best())
        if failed is not None:  # every candidate failed: the job says why, in one line
            return JobSummary(self.job.id, "FAILED", self.done, None, failed, self.remeasured, None)
        return JobSummary(self.job.id, "DONE", self.done, self.best, self._stop_reason(), self.remeasured, self.choice)

    # --- the search: batches through propose -> check -> build -> measure -> record -> tell ------

    def _search(self) -> None:
        """Record and tell each batch as its measurement arrives, then ask the next: a batch is
        asked knowing the results of every batch but the one before it (which the GPUs measure
        meanwhile, already built), so half of a 32-trial job's trials are asked knowing results.
        Asking the next batch as soon as the last one was built, before its results, left three
        quarters of a job asked blind: in a draw on an H100 every job asked 25 of its 34
        proposals before its first result, and its local search centred on the cost model's first
        picks instead of the best measured (docs/perf-notes.md, "Asked before any result")."""
        self._fill()
        while self.pending:
            batch = self.pending.popleft()
            builds = batch.built.result()
            self._record_batch(batch, builds)
            self._fill()

    def _fill(self) -> None:
        """Ask, build and queue for measurement up to `ahead` batches, while budget is left beyond
        the trials in flight (every batch pending: none is popped before it is recorded)."""
        while len(self.pending) < self.settings.ahead and not self.out_of_time() and self.idle_asks < MAX_IDLE_ASKS:
            in_flight = sum(len(b.trials) for b in self.pending)
            if self.remaining() - in_flight <= 0:
                return
            trials = self._next_trials(in_flight)
            if not trials:
                return
            built = self._build(trials)
            self.pending.append(_Batch(trials, built, self.gpus.submit(self._measure, built)))

    def _next_trials(self, in_flight: int) -> list[Trial]:
        """Propose and check until a batch of new, valid candidates is ready; what needs no GPU
        is settled (and recorded) on the way."""
        want = min(
            self.settings.batch_size,
            max(MIN_BATCH, -(-self.job.max_trials // BUDGET_PARTS)),
            self.remaining() - in_flight,
        )
        trials: list[Trial] = []
        while len(trials) < want and self.idle_asks < MAX_IDLE_ASKS:
            proposals = self._propose(want - len(trials))
            if not proposals:  # the proposer has nothing new left to offer
                self.idle_asks = MAX_IDLE_ASKS
                break
            for proposal in proposals:
                candidate = self._check(proposal)
                if candidate is not None:
                    trials.append((proposal, candidate))
            if self.remaining() - in_flight - len(trials) <= 0:
                break
        return trials

    def _propose(self, n: int) -> list[Proposal]:
        return self.proposer.ask(n)

    def _check(self, proposal: Proposal) -> Candidate | None:
        """The candidate to build, or None when the proposal needs no build and no GPU: a
        duplicate, a config that breaks a rule, a config measured before on this stack. A refusal
        the proposal carries is recorded first."""
        if proposal.refused is not None:
            self._record_refusal(proposal.refused)
        candidate = Candidate(proposal.config, self.job.problem, self.space.template_version)
        if self._answered_by_earlier(proposal) or self._breaks_a_rule(proposal, candidate):
            return None
        self.idle_asks = 0  # a new, valid config
        if self._reused(proposal, candidate):
            return None
        self.seen[proposal.config] = Feedback(proposal.trial, None, PENDING)
        return candidate

    def _answered_by_earlier(self, proposal: Proposal) -> bool:
        """A config proposed before is answered from its first copy's result (when it arrives)."""
        earlier = self.seen.get(proposal.config)
        if earlier is None:
            return False
        self.idle_asks += 1
        if earlier.outcome == PENDING:  # answered when the first copy's result arrives
            self.waiting.setdefault(proposal.config, []).append(proposal.trial)
        else:
            self.proposer.tell([replace(earlier, trial=proposal.trial)])
        return True

    def _breaks_a_rule(self, proposal: Proposal, candidate: Candidate) -> bool:
        """A config that breaks a rule of the space is stored INVALID with the rules it broke."""
        violations = self.space.violations(proposal.config, candidate.problem)
        if not violations:
            return False
        message = "; ".join(map(str, violations))
        self._tell(proposal, self._record(proposal, candidate, Outcome.INVALID, message, None, None))
        return True

    def _reused(self, proposal: Proposal, candidate: Candidate) -> bool:
        """A config measured before on this stack is stored again as this trial, not measured."""
        previous = self.store.measured_before(candidate.measurement_key(self.stack))
        if previous is None:
            return False
        self._tell(proposal, self.store.reuse(self.job.id, proposal.trial, previous))
        return True

    def _record_refusal(self, refusal: Refusal) -> None:
        """A sample the proposer refused and replaced: stored as INVALID with its rules (once per
        config), already told to the proposer, so it costs no trial."""
        if refusal.config in self.seen:
            return
        candidate = Candidate(refusal.config, self.job.problem, self.space.template_version)
        self.store.refuse(self.job.id, refusal.trial, candidate, candidate.measurement_key(self.stack), refusal.message)
        self.seen[refusal.config] = Feedback(refusal.trial, None, Outcome.INVALID.value, refusal.message)

    def _build(self, trials: Sequence[Trial]) -> Future[list[BuildResult]]:
        """The batch's builds, on the build thread."""
        return self.builds.submit(self.builder.build, [candidate for _, candidate in trials])

    def _measure(self, built: Future[list[BuildResult]]) -> list[RunResult]:
        """On the GPU thread: the batch's OK builds measured, once they are built."""
        runnable = [b for b in built.result() if b.ok]
        return self.runner.run(runnable) if runnable else []

    def _record_batch(self, batch: _Batch, builds: Sequence[BuildResult]) -> None:
        """Record and tell each trial of the batch: its measurement, or why its build failed."""
        measured = iter(batch.runs.result())
        for (proposal, candidate), build in zip(batch.trials, builds, strict=True):
            # A failed build is stored with the stack too, so a new toolchain marks it stale.
            result = (
                next(measured)
                if build.ok
                else RunResult.failed(candidate, build.outcome, build.message).with_provenance(
                    Provenance(self.stack, candidate.template_version, source=self.source)
                )
            )
            self._tell(
                proposal, self._record(proposal, candidate, result.outcome, result.message, result, build.seconds)
            )

    def _record(
        self,
        proposal: Proposal,
        candidate: Candidate,
        outcome: Outcome,
        message: str,
        result: RunResult | None,
        build_seconds: float | None,
    ) -> Recorded:
        return self.store.record(
            self.job.id,
            proposal.trial,
            candidate,
            candidate.measurement_key(self.stack),
            outcome,
            message,
            result,
            build_seconds,
        )

    def _tell(self, proposal: Proposal, recorded: Recorded) -> None:
        """Tell the proposer (and the duplicates waiting on this config), then report progress:
        `done` and `best` as read back from the job's row, which the repository keeps
        (db.repo.job_progress)."""
        self.done, self.best = recorded.trials_done, recorded.best
        record = recorded.record
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
            f"{record.tflops:.1f} TFLOP/s, {record.ratio or 0:.3f}x cuBLAS"
            if ok and record.tflops
            else record.message[:120],
        )
        if self.on_progress is not None:
            self.on_progress(Progress(self.job.id, self.done, self.job.max_trials, record, self.best))

    # --- when the budget is spent: re-measure the top trials, name the best ---------------------

    def _remeasure_top(self) -> None:
        """Re-measure the top trials interleaved, so that the best is named from figures taken
        side by side, not from trial figures taken minutes apart under a drifting clock; known
        re-measurements (every top key's, same source) are reused."""
        top = self._top_trials()
        if len(top) < 2:
            return
        known = self.store.remeasured([r.key for r in top])
        figures = [known[r.key] for r in top] if all(r.key in known for r in top) else self._remeasure(top)
        self.remeasured = tuple(figures)
        if not any(f.outcome is Outcome.OK for f in figures):
            log.warning("job %d: no top trial survived re-measurement", self.job.id)

    def _top_trials(self) -> list[MeasurementRecord]:
        """The job's best `remeasure_top` configs by trial ratio, on this stack (one per config)."""
        if self.settings.remeasure_top < 2:
            return []
        rows = self.store.measurements(self.job.id, Outcome.OK)
        ok = [r for r in rows if r.ratio and r.tflops and not r.stale and r.stack.identity() == self.stack.identity()]
        top: dict[str, MeasurementRecord] = {}
        for r in sorted(ok, key=lambda r: (-(r.ratio or 0.0), r.id)):
            top.setdefault(r.key, r)
        return list(top.values())[: self.settings.remeasure_top]

    def _remeasure(self, top: Sequence[MeasurementRecord]) -> list[RemeasurementRecord]:
        builds = self.builder.build([Candidate(r.config, r.problem, r.template_version) for r in top])
        results = self.runner.remeasure(builds, self.settings.remeasure_rounds, self.settings.remeasure_processes)
        return self.store.record_remeasurements(
            self.job.id, self.settings.remeasure_rounds, list(zip(top, results, strict=True))
        )

    def _name_best(self) -> list[MeasurementRecord]:
        """The job's best is `repo.best_of` over its trials: the re-measured ratio decides (named
        on the job's row by `JobStore.finish`). Returns all the job's rows."""
        finished = self.store.finish(self.job.id, self.job.problem)
        self.choice = finished.choice
        if self.choice is None:
            return finished.rows
        winner, figures = self.choice.best.trial, self.choice.best.figures
        self.best = winner
        log.info(
            "job %d: best %s at %.3fx cuBLAS (%s; trial figure %.3fx): %s",
            self.job.id,
            winner.config.label(),
            figures.ratio,
            "re-measured" if figures.confirmed else "not re-measured",
            winner.ratio or 0.0,
            self.choice.note,
        )
        return finished.rows

    def _stop_reason(self) -> str:
        if self.remaining() <= 0:
            return f"trial budget of {self.job.max_trials} reached"
        if self.out_of_time():
            return f"time budget of {self.job.time_budget_s:g}s reached"
        return "search space exhausted: no new configurations proposed"


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
