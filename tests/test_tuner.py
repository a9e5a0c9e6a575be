"""The job loop end to end, driven by measurements recorded on the H200 (replay runner).

Real database (SQLite and PostgreSQL), real Optuna storage in it, the real search space and
rules; only the GPU is replaced, at our own Runner interface, by recorded results.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tirtune.core import BuildResult, Outcome, RunResult, Source, Stack
from tirtune.db import open_database, repo, transaction
from tirtune.db.records import MeasurementRecord
from tirtune.runner.replay_runner import ReplayBuilder, ReplayRunner
from tirtune.space import HOPPER_V1, Config, Problem
from tirtune.space.hopper.knobs import config as hopper_config
from tirtune.tuner.job import JobLoop, Progress
from tirtune.tuner.proposer import Feedback, Proposal

DATA = Path(__file__).resolve().parents[1] / "bench" / "data" / "hopper-4096x4096x4096-float16.jsonl"
P = Problem(4096, 4096, 4096, "float16")
RULES = {rule.__name__ for rule in HOPPER_V1.config_rules}


def recorded_tflops() -> dict[str, float]:
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    return {json.dumps(r["config"], sort_keys=True): P.tflops(r["time_ms"]) for r in rows if r["outcome"] == "OK"}


def tune(
    db_url: str,
    runner: ReplayRunner,
    trials: int,
    *,
    time_budget_s: float | None = None,
    progress: list[Progress] | None = None,
) -> tuple[int, list[MeasurementRecord]]:
    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, HOPPER_V1.arch, trials, time_budget_s)
        repo.claim_job(s, job.id)
    loop = JobLoop(
        sessions,
        db_url,
        HOPPER_V1,
        ReplayBuilder(),
        runner,
        batch_size=4,
        on_progress=None if progress is None else progress.append,
    )
    summary = loop.run(job.id)
    with transaction(sessions) as s:
        repo.finish_job(s, job.id, "DONE", summary.message)
        rows = repo.list_measurements(s, job_id=job.id, limit=10_000)
    sessions.kw["bind"].dispose()
    return job.id, rows


def trials_of(rows: Sequence[MeasurementRecord]) -> list[MeasurementRecord]:
    return [r for r in rows if r.outcome is not Outcome.INVALID]


def test_a_job_spends_exactly_its_budget_on_distinct_valid_configs(db_url: str) -> None:
    runner = ReplayRunner([DATA])
    progress: list[Progress] = []
    job_id, rows = tune(db_url, runner, 24, progress=progress)
    trials = trials_of(rows)
    assert len(trials) == 24 and runner.calls == 24
    assert len({r.config for r in trials}) == 24, "no config is measured twice in one job"
    assert all(r.outcome is Outcome.OK and r.gpu_name == "NVIDIA H200" for r in trials)
    assert all(HOPPER_V1.is_valid(r.config, P) for r in trials)
    for invalid in (r for r in rows if r.outcome is Outcome.INVALID):
        assert not HOPPER_V1.is_valid(invalid.config, P)
        assert invalid.message.split(":")[0] in RULES  # the named rule, then its reason
    assert progress[-1].trials_done == 24
    with transaction(open_database(db_url)) as s:
        job = repo.get_job(s, job_id)
    # The replay's re-measurement repeats the recorded figures: the best is the highest trial ratio.
    best = max(trials, key=lambda r: r.ratio or 0)
    assert job.trials_done == 24 and job.best_measurement_id == best.id
    assert progress[-1].best == max(trials, key=lambda r: r.ratio or 0)


def test_the_optuna_study_lives_in_the_same_database_and_is_closed(db_url: str) -> None:
    job_id, rows = tune(db_url, ReplayRunner([DATA]), 12)
    with transaction(open_database(db_url)) as s:
        study_name = repo.get_job(s, job_id).study_name
    study = optuna.load_study(study_name=study_name, storage=db_url)
    states = {t.state for t in study.get_trials(deepcopy=False)}
    assert TrialState.RUNNING not in states
    ok = [t for t in study.trials if t.user_attrs.get("outcome") == "OK"]
    assert len({json.dumps(t.params, sort_keys=True) for t in ok}) == 12
    # The objective is the same-run ratio, the figure every best is named by.
    assert max(t.value for t in ok) == pytest.approx(max(r.ratio or 0 for r in rows))


def test_tpe_finds_a_config_near_the_recorded_optimum(db_url: str) -> None:
    _, rows = tune(db_url, ReplayRunner([DATA]), 40)
    best_found = max(r.tflops or 0 for r in trials_of(rows))
    assert best_found >= 0.95 * max(recorded_tflops().values())


def test_a_second_tune_on_the_same_stack_reuses_measurements(db_url: str) -> None:
    _, first = tune(db_url, ReplayRunner([DATA]), 16)
    second_runner = ReplayRunner([DATA])
    _, second = tune(db_url, second_runner, 16)
    first_keys = {r.key for r in trials_of(first)}
    reused = [r for r in trials_of(second) if r.key in first_keys]
    assert reused, "the seeded start configs at least are known"
    assert second_runner.calls == 16 - len(reused), "a known measurement costs no GPU work"


class OtherDriver(ReplayRunner):
    """The same recordings seen through a newer driver: a changed stack."""

    def stack(self) -> Stack:
        return replace(super().stack(), driver="999.99")

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        return [
            r if r.provenance is None else replace(r, provenance=replace(r.provenance, stack=self.stack()))
            for r in super().run(batch)
        ]


def test_a_changed_toolchain_marks_old_results_stale_and_measures_again(db_url: str) -> None:
    _, first = tune(db_url, ReplayRunner([DATA]), 8)
    runner = OtherDriver([DATA])
    _, second = tune(db_url, runner, 8)
    assert runner.calls == 8, "nothing measured on the old driver is reused"
    with transaction(open_database(db_url)) as s:
        old = [repo.get_measurement(s, r.id) for r in trials_of(first)]
    assert all(r.stale for r in old)
    assert not any(r.stale for r in trials_of(second))


class SlowReplay(ReplayRunner):
    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        time.sleep(0.2 * len(batch))
        return super().run(batch)


def test_a_time_budget_stops_the_job_early(db_url: str) -> None:
    began = time.monotonic()
    _, rows = tune(db_url, SlowReplay([DATA]), 100, time_budget_s=1.0)
    assert 0 < len(trials_of(rows)) < 100
    assert time.monotonic() - began < 30


def test_start_points_are_seeded_only_into_spaces_that_hold_them() -> None:
    from tirtune.space import HOPPER
    from tirtune.space.branches import HOPPER_START as START_WITH
    from tirtune.space.hopper import HOPPER_V2

    v3_pingpong, v3_cooperative, v2_best, *v1_points = START_WITH
    assert all(HOPPER.holds(c) and HOPPER.is_valid(c, P) for c in START_WITH)
    assert not any(HOPPER_V2.holds(c) for c in (v3_pingpong, v3_cooperative)), "never cut down to a v2 config"
    assert HOPPER_V2.holds(v2_best) and not HOPPER_V1.holds(v2_best)
    assert all(HOPPER_V1.holds(c) and HOPPER.holds(c) for c in v1_points)


def test_a_study_of_the_current_space_starts_from_the_best_known_point(tmp_path: Path) -> None:
    from tirtune.space import HOPPER
    from tirtune.space.branches import HOPPER_START as START_WITH
    from tirtune.tuner.optuna_proposer import OptunaProposer

    proposer = OptunaProposer(f"sqlite:///{tmp_path / 'o.db'}", "s", HOPPER, start_with=START_WITH)
    assert [p.config for p in proposer.ask(len(START_WITH))] == list(START_WITH)


def test_the_proposer_offers_only_valid_configs_and_tells_tpe_what_it_refused(tmp_path: Path) -> None:
    from tirtune.space import HOPPER
    from tirtune.tuner.optuna_proposer import OptunaProposer

    url = f"sqlite:///{tmp_path / 'o.db'}"
    proposer = OptunaProposer(url, "s", HOPPER, seed=3, problem=P)
    configs = [p.config for p in proposer.ask(30)]
    assert all(HOPPER.is_valid(c, P) for c in configs)
    assert len(set(configs)) == 30, "a repair never lands on a config already proposed"
    assert sum(proposer.refused.values()) > 0 and set(proposer.refused) <= set(RULES)
    refused = [t for t in proposer.study.trials if t.user_attrs.get("outcome") == "INVALID"]
    assert len(refused) == sum(proposer.refused.values())
    assert all(t.state is TrialState.COMPLETE and t.system_attrs["constraints:works"] == 1.0 for t in refused)
    assert all(not HOPPER.is_valid(hopper_config(**t.params), P) for t in refused)


def test_the_study_writes_sqlite_in_wal_mode_without_a_sync_per_parameter(tmp_path: Path) -> None:
    """Optuna commits every suggested parameter: its SQLite connections run WAL with
    synchronous=NORMAL (1), not the default FULL (2), and what they wrote is read back by a
    fresh storage (a restarted service resumes the study)."""
    from tirtune.space import HOPPER
    from tirtune.tuner.optuna_proposer import OptunaProposer, _storage

    url = f"sqlite:///{tmp_path / 'o.db'}"
    proposer = OptunaProposer(url, "s", HOPPER, seed=3, problem=P)
    asked = [p.config for p in proposer.ask(4)]
    with proposer.study._storage._backend.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    again = optuna.load_study(study_name="s", storage=_storage(url))
    assert len(again.trials) >= len(asked)


def test_a_job_over_a_small_space_stops_when_every_valid_config_was_tried(db_url: str) -> None:
    from tirtune.space.hopper.rules import CONFIG_RULES, PROBLEM_RULES
    from tirtune.space.space import SearchSpace

    tiny = SearchSpace(
        arch="sm_90a",
        template_version=HOPPER_V1.template_version,
        knobs={"blk_m": (64, 128, 256), "blk_n": (128, 256), "stages": (4, 6), "consumers": (1, 2)},
        table=HOPPER_V1.table,
        problem_rules=PROBLEM_RULES,
        config_rules=CONFIG_RULES,
    )
    valid = tiny.valid_configs(P)
    assert 0 < len(valid) < len(tiny.knobs["blk_m"]) * 2 * 2 * 2  # some points of the product are refused
    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, tiny.arch, 50)
    summary = JobLoop(sessions, db_url, tiny, ReplayBuilder(), ReplayRunner([DATA]), batch_size=4).run(job.id)
    assert summary.trials == len(valid)
    assert "exhausted" in summary.message
    with transaction(sessions) as s:
        rows = repo.list_measurements(s, job_id=job.id, limit=1000)
    refused = [r for r in rows if r.outcome is Outcome.INVALID]
    assert refused, "the samples the proposer refused are stored, with their rules"
    assert len({r.config for r in refused}) == len(refused)  # once per config
    for r in refused:
        assert not tiny.is_valid(r.config, P) and r.message.split(":")[0] in RULES
    assert len(trials_of(rows)) == len(valid)  # refusals cost no trial


def test_a_job_for_another_arch_is_refused_by_workers_of_this_one(db_url: str) -> None:
    from tirtune.tuner.errors import TunerError

    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, "sm_100a", 4)
    loop = JobLoop(sessions, db_url, HOPPER_V1, ReplayBuilder(), ReplayRunner([DATA]))
    with pytest.raises(TunerError, match="asks for sm_100a kernels, but this worker's GPUs take sm_90a"):
        loop.run(job.id)


def test_a_refused_sample_is_repaired_to_a_nearest_unproposed_valid_config(tmp_path: Path) -> None:
    from tirtune.tuner.optuna_proposer import OptunaProposer

    proposer = OptunaProposer(f"sqlite:///{tmp_path / 'o.db'}", "s", HOPPER_V1, seed=5, problem=P)
    valid = HOPPER_V1.valid_configs(P)
    proposer._proposed.update(valid[::2])  # half of them already proposed

    def distance(a: Config, b: Config) -> int:
        return sum(getattr(a, k) != getattr(b, k) for k in HOPPER_V1.knobs)

    refused_samples = [c for c in list(HOPPER_V1.configs())[::37] if not HOPPER_V1.is_valid(c, P)]
    assert len(refused_samples) >= 5
    for refused in refused_samples:
        repaired = proposer._nearest_valid(refused)
        assert repaired is not None and HOPPER_V1.is_valid(repaired, P) and repaired not in proposer._proposed
        assert distance(repaired, refused) == min(distance(c, refused) for c in valid[1::2])
    proposer._proposed.update(valid)
    assert proposer._nearest_valid(hopper_config(stages=6, blk_m=256, blk_n=256)) is None  # nothing left: exhausted


def test_a_replay_of_a_sample_proposes_only_recorded_configs(db_url: str, tmp_path: Path) -> None:
    """A recorded sample of a big space (bench/data holds 300 of ~14,000 valid hopper-gemm/3
    configs) is a finite sub-space: the job measures only recorded configs, never 'not recorded'."""
    from tirtune.tuner.optuna_proposer import OptunaProposer

    lines = DATA.read_text().splitlines()
    sample = tmp_path / "sample.jsonl"
    sample.write_text("\n".join(lines[::5]) + "\n")  # every fifth of the 156 recorded configs
    runner = ReplayRunner([sample])
    space = runner.restrict(HOPPER_V1)
    recorded = runner.configs(P)
    assert space.valid_configs(P) == recorded and len(recorded) == len(lines[::5])
    unrecorded = next(c for c in HOPPER_V1.valid_configs(P) if c not in recorded)
    assert [v.rule for v in space.violations(unrecorded, P)] == ["recorded"]
    assert space.valid_configs(Problem(2048, 2048, 2048)) == []  # a problem nobody recorded

    # The repair of a refused sample lands on the nearest recorded config, found without the rings.
    proposer = OptunaProposer(f"sqlite:///{tmp_path / 'o.db'}", "s", space, seed=1, problem=P)
    repaired = proposer._nearest_valid(unrecorded)
    assert repaired in recorded
    knobs = list(HOPPER_V1.knobs)
    far = [sum(getattr(c, k) != getattr(unrecorded, k) for k in knobs) for c in recorded]
    assert sum(getattr(repaired, k) != getattr(unrecorded, k) for k in knobs) == min(far)

    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, space.arch, 20)
    summary = JobLoop(sessions, db_url, space, ReplayBuilder(), runner, batch_size=4).run(job.id)
    with transaction(sessions) as s:
        rows = repo.list_measurements(s, job_id=job.id, limit=1000)
    measured = trials_of(rows)
    assert summary.trials == 20 and len(measured) == 20
    assert all(r.outcome is Outcome.OK and r.config in recorded for r in measured)
    assert runner.calls == 20


def test_the_full_recording_loses_nothing_when_restricted() -> None:
    runner = ReplayRunner([DATA])
    assert runner.restrict(HOPPER_V1).valid_configs(P) == HOPPER_V1.valid_configs(P)


class TimedReplay(ReplayRunner):
    """Records when each GPU run starts and ends."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.spans: list[tuple[float, float]] = []

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        began = time.monotonic()
        time.sleep(0.3)
        results = super().run(batch)
        self.spans.append((began, time.monotonic()))
        return results


def slow_asks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float]]:
    """OptunaProposer.ask made slow (0.3 s, as TPE's repaired samples are); the list it returns
    fills with each ask's (start, end)."""
    from tirtune.tuner.optuna_proposer import OptunaProposer

    asks: list[tuple[float, float]] = []
    real_ask = OptunaProposer.ask

    def slow_ask(self: OptunaProposer, n: int) -> list:  # type: ignore[type-arg]
        began = time.monotonic()
        time.sleep(0.3)
        proposals = real_ask(self, n)
        asks.append((began, time.monotonic()))
        return proposals

    monkeypatch.setattr(OptunaProposer, "ask", slow_ask)
    return asks


def test_the_gpus_measure_a_batch_while_the_next_is_proposed(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Asking is slow (TPE's samples mostly break a rule and are repaired): the GPUs must not
    wait for it. Some ask runs inside some GPU run."""
    asks = slow_asks(monkeypatch)
    runner = TimedReplay([DATA])
    _, rows = tune(db_url, runner, 16)
    assert len(trials_of(rows)) == 16 and len(runner.spans) >= 3
    assert any(a0 < r1 and r0 < a1 for a0, a1 in asks for r0, r1 in runner.spans)


class TimedBuilder(ReplayBuilder):
    """Records when each build runs (slow, as a batch of nvcc calls is)."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []

    def build(self, batch: Sequence[object]) -> list[BuildResult]:
        began = time.monotonic()
        time.sleep(0.3)
        results = super().build(batch)
        self.spans.append((began, time.monotonic()))
        return results


@pytest.mark.parametrize("ahead", [1, 2])
def test_with_two_batches_ahead_asking_overlaps_building(
    db_url: str, monkeypatch: pytest.MonkeyPatch, ahead: int
) -> None:
    """ahead=2: the next batch is asked while the one before it builds (and the GPUs measure a
    third), so a batch's cycle is the slowest of asking, building and measuring, not asking plus
    building. ahead=1 (the GPUs measure while one batch is asked, then it builds): no ask runs
    inside a build. Either way the job spends exactly its budget."""
    asks = slow_asks(monkeypatch)
    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, HOPPER_V1.arch, 16)
        repo.claim_job(s, job.id)
    builder, runner = TimedBuilder(), TimedReplay([DATA])
    loop = JobLoop(sessions, db_url, HOPPER_V1, builder, runner, batch_size=4, ahead=ahead)
    summary = loop.run(job.id)
    with transaction(sessions) as s:
        rows = repo.list_measurements(s, job_id=job.id, limit=10_000)
    sessions.kw["bind"].dispose()
    assert summary.trials == 16 and len(trials_of(rows)) == 16
    overlapped = any(a0 < b1 and b0 < a1 for a0, a1 in asks for b0, b1 in builder.spans)
    assert overlapped is (ahead == 2)


class InstantProposer:
    """Valid configs in order, asked at once (a stand-in at our Proposer interface: the test is
    about the loop, not about how fast TPE asks on a loaded machine); telling a measured batch
    trial takes 0.1 s, as recording and telling one does on the loop's thread."""

    def __init__(self, configs: Sequence[Config]) -> None:
        self.configs = list(configs)
        self.asked = 0
        self.tells: list[tuple[float, float]] = []

    def ask(self, n: int) -> list[Proposal]:
        taken, self.configs = self.configs[:n], self.configs[n:]
        self.asked += len(taken)
        return [Proposal(self.asked - len(taken) + i, c) for i, c in enumerate(taken)]

    def tell(self, feedback: Sequence[Feedback]) -> None:
        began = time.monotonic()
        if any(f.outcome == Outcome.OK.value for f in feedback):
            time.sleep(0.1)
            self.tells.append((began, time.monotonic()))

    def abandon(self) -> None:
        pass


def test_the_gpus_measure_the_next_batch_while_the_last_is_recorded_and_told(db_url: str) -> None:
    """Recording a measured batch and telling the proposer takes the loop's thread a while (0.1 s
    a trial here: 0.4 s a batch, more than the batch's 0.3 s on the GPU); the next batch, already
    asked and built, must not wait for it on the GPUs: a GPU run starts as the one before it ends.
    (Before, a batch's measurement was started only after the batch before it was told, at least
    0.1 s later here: on two H200s each GPU idled half the time.)"""
    proposer = InstantProposer(HOPPER_V1.valid_configs(P))
    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, HOPPER_V1.arch, 16)
        repo.claim_job(s, job.id)
    runner = TimedReplay([DATA])
    summary = JobLoop(
        sessions,
        db_url,
        HOPPER_V1,
        ReplayBuilder(),
        runner,
        batch_size=4,
        remeasure_top=0,
        proposer_factory=lambda _job: proposer,
    ).run(job.id)
    sessions.kw["bind"].dispose()
    assert summary.trials == 16 and len(runner.spans) == 4 and len(proposer.tells) == 16
    gaps = [later[0] - earlier[1] for earlier, later in zip(runner.spans, runner.spans[1:], strict=False)]
    assert min(gaps) < 0.05, gaps


def test_a_batch_is_asked_knowing_every_result_but_the_batch_before_its_own(db_url: str) -> None:
    """Two batches are asked before any result; each later one only once the batch two before it
    is told, so a 32-trial job in quarters asks half its trials knowing results. (Before, the next
    batch was asked as soon as the last one was built: the third of four knew nothing, and in a
    draw every job asked 25 of its 34 proposals before its first result.)"""

    class CountingProposer(InstantProposer):
        def __init__(self, configs: Sequence[Config]) -> None:
            super().__init__(configs)
            self.told = 0
            self.told_at_ask: list[int] = []

        def ask(self, n: int) -> list[Proposal]:
            self.told_at_ask.append(self.told)
            return super().ask(n)

        def tell(self, feedback: Sequence[Feedback]) -> None:
            self.told += len(feedback)

    proposer = CountingProposer(HOPPER_V1.valid_configs(P))
    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, HOPPER_V1.arch, 32)
        repo.claim_job(s, job.id)
    summary = JobLoop(
        sessions, db_url, HOPPER_V1, ReplayBuilder(), TimedReplay([DATA]), batch_size=8, remeasure_top=0,
        proposer_factory=lambda _job: proposer,
    ).run(job.id)
    sessions.kw["bind"].dispose()
    assert summary.trials == 32
    assert proposer.told_at_ask == [0, 0, 8, 16]


@pytest.mark.parametrize(
    ("trials", "batch", "sizes"), [(32, 16, [8, 8, 8, 8]), (64, 16, [16] * 4), (10, 16, [4, 4, 2])]
)
def test_a_job_asks_at_most_a_quarter_of_its_budget_at_once(
    db_url: str, trials: int, batch: int, sizes: list[int]
) -> None:
    """With two batches asked ahead, a batch of half the budget would ask a whole job before its
    first result: batches are at most a quarter of the budget (at least 4), the last what is left."""

    class SizedBuilder(ReplayBuilder):
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def build(self, batch: Sequence[object]) -> list[BuildResult]:
            self.sizes.append(len(batch))
            return super().build(batch)

    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, HOPPER_V1.arch, trials)
        repo.claim_job(s, job.id)
    builder = SizedBuilder()
    summary = JobLoop(
        sessions, db_url, HOPPER_V1, builder, ReplayRunner([DATA]), batch_size=batch, remeasure_top=0
    ).run(job.id)
    sessions.kw["bind"].dispose()
    assert summary.trials == trials and builder.sizes == sizes


class FusedAsPlainReplay(ReplayRunner):
    """A stand-in at our Runner interface for a fused problem nobody recorded: it answers each
    candidate with the recorded figures of the same config on the plain GEMM, relabelled to the
    candidate it was given, and keeps every candidate it was handed."""

    def __init__(self, paths: Sequence[Path]) -> None:
        super().__init__(paths)
        self.seen: list[Problem] = []

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        self.seen += [b.candidate.problem for b in batch]
        plain = [replace(b, candidate=replace(b.candidate, problem=P)) for b in batch]
        return [replace(r, candidate=b.candidate) for r, b in zip(super().run(plain), batch, strict=True)]

    def remeasure(self, batch: Sequence[BuildResult], rounds: int = 5, processes: int = 1) -> list[RunResult]:
        self.seen += [b.candidate.problem for b in batch]
        plain = [replace(b, candidate=replace(b.candidate, problem=P)) for b in batch]
        again = super().remeasure(plain, rounds, processes)
        return [replace(r, candidate=b.candidate) for r, b in zip(again, batch, strict=True)]


def test_a_fused_job_passes_its_problem_through_and_files_its_trials_under_it(db_url: str) -> None:
    """The loop hands the runner the job's problem, epilogue included, and every trial is stored
    under it: the fused problem gets a best of its own and the plain GEMM of its shape none."""
    fused = Problem.parse("4096x4096x4096", "float16", "bias+residual")
    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, fused, HOPPER_V1.arch, 8)
        repo.claim_job(s, job.id)
    runner = FusedAsPlainReplay([DATA])
    summary = JobLoop(sessions, db_url, HOPPER_V1, ReplayBuilder(), runner, batch_size=4).run(job.id)
    with transaction(sessions) as s:
        rows = repo.list_measurements(s, job_id=job.id, limit=10_000)
        fused_best = repo.best_of(s, fused, source=Source.REPLAY)
        plain_best = repo.best_of(s, P, source=Source.REPLAY)
    sessions.kw["bind"].dispose()
    assert summary.trials == 8 and runner.seen and set(runner.seen) == {fused}
    assert {r.epilogue for r in rows} == {"bias+residual"} and all(r.problem == fused for r in rows)
    assert fused_best is not None and fused_best.best.trial.job_id == job.id and plain_best is None


def test_a_study_resumed_after_a_knob_gained_values_goes_on_in_a_continuation_study(tmp_path: Path) -> None:
    """Optuna refuses a categorical parameter whose choices changed within a study; a job resumed
    after the knob table grew carries its trials into `name~digest` and goes on from them."""
    from tirtune.space import HOPPER
    from tirtune.tuner.optuna_proposer import OptunaProposer, _storage

    url = f"sqlite:///{tmp_path / 'o.db'}"
    narrow = replace(HOPPER, knobs={**HOPPER.knobs, "blk_n": tuple(v for v in HOPPER.knobs["blk_n"] if v != 112)})
    before = OptunaProposer(url, "s", narrow, seed=3, problem=P)
    asked = before.ask(6)
    before.tell([Feedback(p.trial, 0.9 + 0.01 * i, "OK") for i, p in enumerate(asked[:4])])
    before.study.enqueue_trial({k: getattr(asked[0].config, k) for k in narrow.knobs} | {"stages": 3})
    after = OptunaProposer(url, "s", HOPPER, seed=3, problem=P)
    assert after.study.study_name.startswith("s~")
    told = {p.config for p in asked[:4]}
    assert told <= after._proposed, "what the first study measured is not proposed again"
    assert max(after._best.values())[0] == pytest.approx(0.93)
    again = after.ask(4)
    assert all(HOPPER.is_valid(p.config, P) and p.config not in told for p in again)
    # The original study is untouched; a second resume opens the same continuation.
    assert len(optuna.load_study(study_name="s", storage=_storage(url)).trials) == len(before.study.trials)
    assert OptunaProposer(url, "s", HOPPER, seed=3, problem=P).study.study_name == after.study.study_name
