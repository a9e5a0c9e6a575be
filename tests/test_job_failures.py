"""A job whose every candidate fails says why in one line: the root cause of the most
common failure, in the job's message, its state FAILED, the CLI's stop line and the dashboard.

Real database, the real job loop; the builder is a stand-in at our Builder seam that fails each
build with the message the real builder stores (recorded TIRx output, see test_diagnosis.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from test_job_remeasure import DATA, FixedProposer, _configs

from tirtune.builder.diagnosis import root_cause
from tirtune.builder.tirx_builder import failure_message
from tirtune.core import BuildResult, Candidate, Outcome
from tirtune.db import open_database, repo, transaction
from tirtune.runner.replay_runner import ReplayRunner
from tirtune.space import HOPPER_V1, Problem
from tirtune.tuner.job import JobLoop, why_nothing_ran

P = Problem(4096, 4096, 4096, "float16")
TIRX_FAILURE = (Path(__file__).parent / "data" / "diagnosis" / "tirx_dispatch_tma_stride.txt").read_text()


class FailingBuilder:
    """Every build fails as a lowering that TIRx's dispatch refused (the real builder's message)."""

    def build(self, batch: Sequence[Candidate]) -> list[BuildResult]:
        message = failure_message("lowering", f"tirtune-root-cause: {root_cause(TIRX_FAILURE)}\n{TIRX_FAILURE}")
        return [BuildResult(c, Outcome.COMPILE_ERROR, message=message) for c in batch]


def test_a_job_whose_every_candidate_fails_ends_failed_naming_the_root_cause(db_url: str) -> None:
    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, HOPPER_V1.arch, 6)
        repo.claim_job(s, job.id)
    loop = JobLoop(sessions, db_url, HOPPER_V1, FailingBuilder(), ReplayRunner([DATA]), batch_size=3,
                   proposer_factory=lambda _job: FixedProposer(_configs(6)))
    summary = loop.run(job.id)
    assert summary.state == "FAILED" and summary.best is None and summary.trials == 6
    assert summary.message.startswith("every candidate failed (6 of 6); COMPILE_ERROR x6: lowering failed: ")
    assert "TIRx could not dispatch tirx.tile.copy_async" in summary.message
    assert "globalStrides[0]=2 must be a multiple of 16B" in summary.message and "\n" not in summary.message
    sessions.kw["bind"].dispose()


def test_a_job_with_one_good_candidate_is_not_a_failure(db_url: str) -> None:
    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, HOPPER_V1.arch, 4)
        repo.claim_job(s, job.id)
    loop = JobLoop(sessions, db_url, HOPPER_V1, _HalfFailing(), ReplayRunner([DATA]), batch_size=4,
                   proposer_factory=lambda _job: FixedProposer(_configs(4)))
    summary = loop.run(job.id)
    with transaction(sessions) as s:
        rows = repo.list_measurements(s, job_id=job.id)
    assert summary.state == "DONE" and why_nothing_ran(rows) is None
    sessions.kw["bind"].dispose()


class _HalfFailing(FailingBuilder):
    def build(self, batch: Sequence[Candidate]) -> list[BuildResult]:
        failed = super().build(batch)
        return [BuildResult(c, Outcome.OK) if i == 0 else f for i, (c, f) in enumerate(zip(batch, failed, strict=True))]


def test_when_every_proposal_breaks_a_rule_the_rule_is_named(db_url: str) -> None:
    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, HOPPER_V1.arch, 2)
        for i in range(3):
            c = Candidate(_configs(1)[0], P, HOPPER_V1.template_version)
            repo.record_measurement(s, job_id=job.id, trial_number=i, key=f"k{i}", candidate=c,
                                    outcome=Outcome.INVALID, message="smem_fits: too much; tiles_divide: no",
                                    result=None)
        rows = repo.list_measurements(s, job_id=job.id)
    assert why_nothing_ran(rows) == "no valid config: all 3 proposed broke a rule; most often smem_fits (3)"
    sessions.kw["bind"].dispose()
