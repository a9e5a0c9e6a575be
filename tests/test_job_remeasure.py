"""The job loop's last step: the top trials re-measured interleaved, the best named from those
figures; known re-measurements reused without GPU work; failed builds carry the stack, so a new
toolchain marks them stale too. Replay runner at our Runner seam, a fixed proposer at ours."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tirtune.core import BuildResult, Candidate, Outcome, RunResult, Stack
from tirtune.db import open_database, repo, transaction
from tirtune.runner.replay_runner import ReplayBuilder, ReplayRunner
from tirtune.space import HOPPER_V1, Config, Problem
from tirtune.tuner.job import JobLoop
from tirtune.tuner.proposer import Feedback, Proposal

DATA = Path(__file__).resolve().parents[1] / "bench" / "data" / "hopper-4096x4096x4096-float16.jsonl"
P = Problem(4096, 4096, 4096, "float16")


class FixedProposer:
    """Proposes the given configs in order (our Proposer seam)."""

    def __init__(self, configs: Sequence[Config]) -> None:
        self.configs = list(configs)
        self.told: list[Feedback] = []
        self.next = 0

    def ask(self, n: int) -> list[Proposal]:
        asked = [Proposal(self.next + i, c) for i, c in enumerate(self.configs[self.next:self.next + n])]
        self.next += len(asked)
        return asked

    def tell(self, feedback: Sequence[Feedback]) -> None:
        self.told += feedback

    def abandon(self) -> None:
        pass


class ReversedRemeasure(ReplayRunner):
    """Re-measurement reverses the trials' ranking: the top trial with the lowest ratio turns out
    the best (each result takes the figures of its mirror in the ratio order)."""

    def remeasure(self, batch: Sequence[BuildResult], rounds: int = 5, processes: int = 1) -> list[RunResult]:
        results = super().remeasure(batch, rounds, processes)
        order = sorted(range(len(results)), key=lambda i: results[i].ratio or 0)
        mirror = dict(zip(order, reversed(order), strict=True))
        return [replace(r, time_ms=results[mirror[i]].time_ms, cublas_ms=results[mirror[i]].cublas_ms,
                        ratio_p10=results[mirror[i]].ratio_p10, ratio_p90=results[mirror[i]].ratio_p90)
                for i, r in enumerate(results)]


def _configs(n: int) -> list[Config]:
    return ReplayRunner([DATA]).configs(P)[:n]


def _tune(db_url: str, runner: ReplayRunner, configs: Sequence[Config], builder: object = None) -> int:
    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, HOPPER_V1.arch, len(configs))
        repo.claim_job(s, job.id)
    loop = JobLoop(sessions, db_url, HOPPER_V1, builder or ReplayBuilder(), runner, batch_size=4,
                   proposer_factory=lambda _job: FixedProposer(configs))
    summary = loop.run(job.id)
    with transaction(sessions) as s:
        repo.finish_job(s, job.id, "DONE", summary.message)
    sessions.kw["bind"].dispose()
    return job.id


def test_the_best_is_named_from_the_interleaved_remeasurement(db_url: str) -> None:
    runner = ReversedRemeasure([DATA])
    job_id = _tune(db_url, runner, _configs(8))
    with transaction(open_database(db_url)) as s:
        job = repo.get_job(s, job_id)
        trials = repo.list_measurements(s, job_id=job_id, outcome=Outcome.OK)
        again = repo.job_remeasurements(s, job_id)
    top = sorted(trials, key=lambda r: -(r.ratio or 0))[:5]  # the top five by same-run ratio
    assert runner.remeasured == 5 and len(again) == 5
    assert len({r.session for r in again}) == 1 and {r.measurement_id for r in again} == {r.id for r in top}
    assert all(r.rounds == 5 and r.outcome is Outcome.OK and r.source == "replay" for r in again)
    # The 5th-best trial re-measured best: it is the job's best, not the trials' winner.
    assert job.best_measurement_id == top[-1].id != top[0].id
    [winner] = [r for r in again if r.measurement_id == top[-1].id]
    assert winner.ratio == max(r.ratio or 0 for r in again) > (top[-1].ratio or 0)


def test_known_remeasurements_are_reused_without_gpu_work(db_url: str) -> None:
    configs = _configs(8)
    _tune(db_url, ReversedRemeasure([DATA]), configs)
    second = ReversedRemeasure([DATA])
    job_id = _tune(db_url, second, configs)
    assert second.calls == 0 and second.remeasured == 0, "a repeated tune on the same stack costs no GPU time"
    with transaction(open_database(db_url)) as s:
        job = repo.get_job(s, job_id)
        best = repo.get_measurement(s, job.best_measurement_id or -1)
        trials = repo.list_measurements(s, job_id=job_id, outcome=Outcome.OK)
    assert best.job_id == job_id
    assert best.config == sorted(trials, key=lambda r: -(r.ratio or 0))[4].config


class FailsWideTiles(ReplayBuilder):
    def build(self, batch: Sequence[Candidate]) -> list[BuildResult]:
        built = super().build(batch)
        return [BuildResult(b.candidate, Outcome.COMPILE_ERROR, message="ptxas: too many resources")
                if b.candidate.config.blk_n == 256 else b for b in built]


class NewDriver(ReplayRunner):
    def stack(self) -> Stack:
        return replace(super().stack(), driver="999.99")

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        return [r if r.provenance is None else replace(r, provenance=replace(r.provenance, stack=self.stack()))
                for r in super().run(batch)]


def test_failed_builds_carry_the_stack_and_go_stale_with_a_new_toolchain(db_url: str) -> None:
    known = ReplayRunner([DATA]).configs(P)
    configs = [c for c in known if c.blk_n == 128][:4] + [c for c in known if c.blk_n == 256][:4]
    first = _tune(db_url, ReplayRunner([DATA]), configs, FailsWideTiles())
    with transaction(open_database(db_url)) as s:
        failed = repo.list_measurements(s, job_id=first, outcome=Outcome.COMPILE_ERROR)
    assert failed and all(r.gpu_name == "NVIDIA H200" and r.driver for r in failed)
    runner = NewDriver([DATA])
    _tune(db_url, runner, configs, FailsWideTiles())
    with transaction(open_database(db_url)) as s:
        assert all(repo.get_measurement(s, r.id).stale for r in failed)
    assert runner.calls == sum(1 for c in configs if c.blk_n != 256), "nothing from the old driver is reused"
