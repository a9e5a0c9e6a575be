"""One best (docs/design.md, "One best, by the same-run ratio"): ranked by the same-run ratio,
confirmed by re-measurement, with its spread and the runner-up; the same answer on every surface;
replayed figures labelled and kept apart.

Real SQLite and PostgreSQL; the recorded H200 study (bench/data/*.sqlite) and recordings
(bench/data/*.jsonl) through the replay runner at our Runner seam.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tirtune.api import create_app
from tirtune.cli import main
from tirtune.core import Candidate, Outcome, Provenance, RunResult, Source, Stack
from tirtune.db import open_database, repo, transaction, url_of
from tirtune.db.records import MeasurementRecord
from tirtune.runner.replay_runner import ReplayBuilder, ReplayRunner
from tirtune.settings import Settings, get_settings
from tirtune.space import TEMPLATE_VERSION, Problem
from tirtune.space.hopper.knobs import config as hopper_config

Factory = sessionmaker[Session]
ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "bench" / "data" / "h200-tune-4096x4096x4096-float16.sqlite"
V3 = ROOT / "bench" / "data" / "hopper-gemm-3-4096x4096x4096-float16.jsonl"
V1 = ROOT / "bench" / "data" / "hopper-4096x4096x4096-float16.jsonl"
P = Problem(4096, 4096, 4096)
H200 = Stack("NVIDIA H200", "570.1", "12.8", "0.27.0", "9.0")
BEST = {"shape": P.shape, "dtype": "float16", "predict": "false"}  # a measurement or 404, never a prediction


def record(factory: Factory, time_ms: float, cublas_ms: float, *, blk_n: int = 128, stages: int = 4,
           spread: tuple[float, float] | None = None, job_id: int | None = None,
           source: Source = Source.GPU) -> MeasurementRecord:
    """One OK trial of hopper_config(blk_n, stages): its ratio is cublas_ms / time_ms."""
    c = Candidate(hopper_config(blk_n=blk_n, stages=stages), P, TEMPLATE_VERSION)
    low, high = spread or (None, None)
    result = RunResult(c, Outcome.OK, time_ms=time_ms, cublas_ms=cublas_ms, repetitions=50, rel_error=1e-4,
                       provenance=Provenance(H200, TEMPLATE_VERSION, source=source,
                                             recording="r.jsonl sha256:0" if source is Source.REPLAY else None),
                       ratio_p10=low, ratio_p90=high)
    with transaction(factory) as s:
        return repo.record_measurement(s, job_id=job_id, trial_number=0, key=f"{c.build_key()}-{uuid.uuid4().hex}",
                                       candidate=c, outcome=Outcome.OK, message="", result=result)


def remeasure(factory: Factory, trial: MeasurementRecord, time_ms: float, cublas_ms: float, *,
              spread: tuple[float, float] | None = None, outcome: Outcome = Outcome.OK) -> None:
    c = Candidate(trial.config, trial.problem, trial.template_version)
    low, high = spread or (None, None)
    ok = outcome is Outcome.OK
    result = RunResult(c, outcome, time_ms=time_ms if ok else None, cublas_ms=cublas_ms if ok else None,
                       ratio_p10=low, ratio_p90=high, extra={"processes": 2},
                       provenance=Provenance(H200, TEMPLATE_VERSION, source=trial.source))
    with transaction(factory) as s:
        repo.record_remeasurements(s, job_id=trial.job_id, session_id=uuid.uuid4().hex[:32], rounds=5,
                                   pairs=[(trial, result)])


def best_of(factory: Factory, **kwargs: object) -> tuple[int | None, bool | None]:
    with transaction(factory) as s:
        choice = repo.best_of(s, P, **kwargs)  # type: ignore[arg-type]
    return (None, None) if choice is None else (choice.best.trial.id, choice.best.figures.confirmed)


@pytest.fixture
def client(db_url: str, db_factory: Factory) -> Iterator[TestClient]:
    app = create_app(Settings(database_url=db_url, best_cache_check_s=0), session_factory=db_factory,
                     start_workers=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


# --- the ranking ------------------------------------------------------------------------------------


def test_a_higher_same_run_ratio_beats_more_tflops(db_factory: Factory, client: TestClient) -> None:
    """The 48-trial situation: a trial measured while the card ran slow has fewer TFLOP/s but the
    higher ratio to the cuBLAS timed beside it; it is the best, of the job and of the problem."""
    with transaction(db_factory) as s:
        job = repo.create_job(s, P, "sm_90a", 8).id
    slow_card = record(db_factory, 0.200, 0.2086, blk_n=256, job_id=job)  # 1.043x
    fast_card = record(db_factory, 0.190, 0.1949, job_id=job)  # 1.026x, 5% more TFLOP/s
    assert (fast_card.tflops or 0) > (slow_card.tflops or 0) and (slow_card.ratio or 0) > (fast_card.ratio or 0)
    assert best_of(db_factory) == (slow_card.id, False)
    with transaction(db_factory) as s:
        assert repo.get_job(s, job).best_measurement_id == slow_card.id  # the best so far, too
    out = client.get("/best", params=BEST).json()
    assert out["trial"]["measurement_id"] == slow_card.id and out["ratio"] == pytest.approx(1.043)
    assert out["confirmed"] is False and "not re-measured" in out["note"]
    assert out["runner_up"]["measurement_id"] == fast_card.id


def test_the_recorded_48_trial_study_names_its_highest_ratio(tmp_path: Path) -> None:
    """The H200 study of bench/data: trial 0 had the most TFLOP/s (633, 0.891x) and was named
    best; trial 197 had the highest same-run ratio (612 TFLOP/s, 0.895x). Migrating the stored
    database to 0003 keeps every row a GPU row, and the best is now trial 197, unconfirmed."""
    copy = tmp_path / "study.sqlite"
    shutil.copy(STUDY, copy)
    factory = open_database(f"sqlite:///{copy}")
    try:
        with transaction(factory) as s:
            rows = repo.list_measurements(s, limit=10_000)
            choice = repo.best_of(s, P)
        assert {r.source for r in rows} == {Source.GPU} and all(r.measured_at == r.created_at for r in rows)
        most_tflops = max((r for r in rows if r.outcome is Outcome.OK), key=lambda r: r.tflops or 0)
        assert most_tflops.trial_number == 0
        assert choice is not None and choice.best.trial.trial_number == 197
        assert choice.best.trial.ratio == pytest.approx(0.8945, abs=1e-4)
        assert (choice.best.trial.ratio or 0) > (most_tflops.ratio or 0)
        assert choice.best.figures.confirmed is False
        assert choice.runner_up is not None and choice.runner_up.trial.id == most_tflops.id
        assert choice.within_noise_of_runner_up is None and "spread unknown" in choice.note  # stored before 0003
    finally:
        factory.kw["bind"].dispose()


def test_a_remeasurement_overturns_the_trials_and_confirmed_figures_come_first(
    db_factory: Factory, client: TestClient
) -> None:
    """4096x14336x4096 went from 1.026x in its trial to 1.054x re-measured: the re-measured ratio
    decides, and the answer serves the re-measured figures; an unconfirmed trial with a higher
    ratio ranks below every confirmed config."""
    a = record(db_factory, 0.190, 0.1995, blk_n=256)  # trial 1.050x
    b = record(db_factory, 0.200, 0.2052)  # trial 1.026x
    assert best_of(db_factory) == (a.id, False)
    remeasure(db_factory, a, 0.200, 0.2020, spread=(1.000, 1.020))  # 1.010x
    remeasure(db_factory, b, 0.195, 0.2055, spread=(1.045, 1.060))  # 1.054x
    assert best_of(db_factory) == (b.id, True)
    record(db_factory, 0.180, 0.2000, stages=3)  # an unconfirmed 1.111x trial
    out = client.get("/best", params=BEST).json()
    assert out["trial"]["measurement_id"] == b.id and out["confirmed"] is True
    assert out["ratio"] == pytest.approx(0.2055 / 0.195) and out["time_ms"] == 0.195
    assert out["tflops"] == pytest.approx(P.tflops(0.195)) and out["cublas_tflops"] == pytest.approx(P.tflops(0.2055))
    assert (out["ratio_p10"], out["ratio_p90"]) == (1.045, 1.060)
    assert out["trial"]["ratio"] == pytest.approx(1.026) and out["remeasurement"]["processes"] == 2
    assert out["runner_up"]["measurement_id"] == a.id and out["within_noise_of_runner_up"] is False
    assert "ahead of the runner-up" in out["note"]


def test_overlapping_intervals_are_said(db_factory: Factory, client: TestClient) -> None:
    a = record(db_factory, 0.200, 0.2080, blk_n=256)
    b = record(db_factory, 0.200, 0.2060)
    remeasure(db_factory, a, 0.200, 0.2080, spread=(1.020, 1.060))  # 1.040x
    remeasure(db_factory, b, 0.200, 0.2060, spread=(1.010, 1.045))  # 1.030x: overlaps
    out = client.get("/best", params=BEST).json()
    assert out["trial"]["measurement_id"] == a.id and out["within_noise_of_runner_up"] is True
    assert "within noise of the runner-up" in out["note"] and out["runner_up"]["ratio_p90"] == 1.045


def test_a_config_that_fails_its_remeasurement_is_not_served(db_factory: Factory) -> None:
    a = record(db_factory, 0.190, 0.2000, blk_n=256)
    b = record(db_factory, 0.200, 0.2000)
    remeasure(db_factory, a, 0.0, 0.0, outcome=Outcome.WRONG_RESULT)
    assert best_of(db_factory) == (b.id, False)


def test_one_entry_per_config_in_the_ranking(db_factory: Factory) -> None:
    record(db_factory, 0.200, 0.2000)
    again = record(db_factory, 0.190, 0.2000)  # the same config, measured again
    other = record(db_factory, 0.200, 0.1900, blk_n=256)
    with transaction(db_factory) as s:
        ranked = repo.ranked(s, P)
    assert [r.trial.id for r in ranked] == [again.id, other.id]


def test_the_best_cache_is_dropped_by_a_remeasurement(db_url: str, db_factory: Factory) -> None:
    a = record(db_factory, 0.190, 0.2000, blk_n=256)
    b = record(db_factory, 0.200, 0.2000)
    app = create_app(Settings(database_url=db_url, best_cache_check_s=3600), session_factory=db_factory,
                     start_workers=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        from test_api_cache import wait_for_check

        cache = c.app.state.best_cache  # type: ignore[attr-defined]
        c.get("/best", params=BEST)
        wait_for_check(cache)
        assert c.get("/best", params=BEST).json()["trial"]["measurement_id"] == a.id
        remeasure(db_factory, a, 0.200, 0.1900)
        remeasure(db_factory, b, 0.190, 0.2000)
        cache._next_check = float("-inf")
        c.get("/best", params=BEST)
        wait_for_check(cache)
        out = c.get("/best", params=BEST).json()
        assert out["trial"]["measurement_id"] == b.id and out["confirmed"] is True


# --- the job loop --------------------------------------------------------------------------------------


def test_the_job_best_and_its_progress_follow_the_ratio(db_url: str) -> None:
    """A replay of the hopper-gemm/3 recording: its fastest config by TFLOP/s is 0.998x cuBLAS,
    another 1.032x. The best so far during the job and the job's best are the 1.032x one."""
    from test_job_remeasure import FixedProposer

    from tirtune.space import space_for
    from tirtune.tuner.job import JobLoop, Progress

    runner = ReplayRunner([V3])
    configs = runner.configs(P)
    records = {c: runner.recorded(P, c) or {} for c in configs}
    by_tflops = min(configs, key=lambda c: records[c]["time_ms"])
    by_ratio = max(configs, key=lambda c: records[c]["cublas_ms"] / records[c]["time_ms"])
    assert by_tflops != by_ratio
    sessions = open_database(db_url)
    with transaction(sessions) as s:
        job = repo.create_job(s, P, "sm_90a", 2)
        repo.claim_job(s, job.id)
    progress: list[Progress] = []
    loop = JobLoop(sessions, url_of(sessions), space_for(runner.template_version), ReplayBuilder(), runner,
                   on_progress=progress.append, proposer_factory=lambda _: FixedProposer([by_tflops, by_ratio]))
    summary = loop.run(job.id)
    assert progress[-1].best is not None and progress[-1].best.config == by_ratio
    assert summary.best is not None and summary.best.config == by_ratio
    assert summary.choice is not None and summary.choice.best.figures.confirmed
    assert all(r.source is Source.REPLAY for r in summary.remeasured)
    sessions.kw["bind"].dispose()


# --- provenance -------------------------------------------------------------------------------------------


def test_replayed_results_say_so_and_name_their_recording(tmp_path: Path) -> None:
    digest = hashlib.sha256(V1.read_bytes()).hexdigest()[:16]
    runner = ReplayRunner([V1])
    config = runner.configs(P)[0]
    data = runner.recorded(P, config) or {}
    [result] = runner.run(ReplayBuilder().build([Candidate(config, P, runner.template_version)]))
    p = result.provenance
    assert p is not None and p.source is Source.REPLAY and p.recording == f"{V1.name} sha256:{digest}"
    assert p.measured_at is None, "the recording does not say when: unknown, not the replay's time"
    # No per-round figures in it: the kernel's p10/p90 against the recorded cuBLAS median.
    assert result.ratio_p10 == pytest.approx(data["cublas_ms"] / data["time_p90_ms"])
    assert result.ratio_p90 == pytest.approx(data["cublas_ms"] / data["time_p10_ms"])
    dated = tmp_path / "dated.jsonl"
    dated.write_text(json.dumps({**data, "measured_at": "2026-11-29T10:51:25+00:00", "ratio_p10": 0.8,
                                 "ratio_p90": 0.9}) + "\n")
    [again] = ReplayRunner([dated]).run(ReplayBuilder().build([Candidate(config, P, runner.template_version)]))
    assert again.provenance is not None and again.provenance.measured_at is not None
    assert again.provenance.measured_at.isoformat() == "2026-11-29T10:51:25+00:00"
    assert (again.ratio_p10, again.ratio_p90) == (0.8, 0.9)


def test_best_serves_replayed_figures_only_when_asked_and_labelled(db_factory: Factory, client: TestClient) -> None:
    replayed = record(db_factory, 0.190, 0.2000, blk_n=256, source=Source.REPLAY)
    refused = client.get("/best", params=BEST)
    assert refused.status_code == 404
    assert "replayed figures exist" in refused.json()["error"]["message"]
    assert "source=replay" in refused.json()["error"]["message"]
    asked = client.get("/best", params={**BEST, "source": "replay"}).json()
    assert asked["trial"]["measurement_id"] == replayed.id and asked["source"] == "replay"
    assert asked["recording"] == "r.jsonl sha256:0" and asked["provenance"]["source"] == "replay"
    assert asked["measured_at"] is None and asked["branch_status"].startswith("replayed")
    assert "run on" not in asked["branch_status"] and asked["note"].startswith("replayed figures from r.jsonl")
    measured = record(db_factory, 0.200, 0.2000)  # a lower ratio, but measured on a GPU
    assert client.get("/best", params=BEST).json()["trial"]["measurement_id"] == measured.id
    near = client.get("/best", params={"shape": "4096x4096x4000", "fallback": "nearest"}).json()
    assert near["trial"]["measurement_id"] == measured.id and near["fallback"]["used"] is True
    assert client.get("/best", params={**BEST, "source": "guess"}).status_code == 422


def test_a_replay_job_never_reuses_or_stales_gpu_rows(db_url: str) -> None:
    """Told to use the GPU database, a replay still keeps apart: a GPU row of the same key is not
    reused for it, and GPU rows of another driver are not marked stale by the recording's stack."""
    from test_job_remeasure import FixedProposer

    from tirtune.space import HOPPER_V1
    from tirtune.tuner.job import JobLoop

    runner = ReplayRunner([V1])
    config = runner.configs(P)[0]
    candidate = Candidate(config, P, runner.template_version)
    sessions = open_database(db_url)
    [gpu] = runner.run([ReplayBuilder().build([candidate])[0]])
    newer = Stack("NVIDIA H200", "999.1", "13.0", "0.27.0.post1", "9.0")
    with transaction(sessions) as s:
        same_key = repo.record_measurement(
            s, job_id=None, trial_number=0, key=candidate.measurement_key(runner.stack()), candidate=candidate,
            outcome=Outcome.OK, message="", result=gpu.with_provenance(Provenance(runner.stack(), TEMPLATE_VERSION)))
        other_driver = repo.record_measurement(
            s, job_id=None, trial_number=0, key="newer", candidate=candidate, outcome=Outcome.OK, message="",
            result=gpu.with_provenance(Provenance(newer, TEMPLATE_VERSION)))
        job = repo.create_job(s, P, "sm_90a", 1)
        repo.claim_job(s, job.id)
    JobLoop(sessions, url_of(sessions), HOPPER_V1, ReplayBuilder(), runner,
            proposer_factory=lambda _: FixedProposer([config])).run(job.id)
    with transaction(sessions) as s:
        [trial] = repo.list_measurements(s, job_id=job.id)
        assert not repo.get_measurement(s, other_driver.id).stale
    assert runner.calls == 2 and trial.id != same_key.id and trial.source is Source.REPLAY
    assert trial.recording is not None and trial.recording.startswith(V1.name)
    sessions.kw["bind"].dispose()


# --- the replay database and the surfaces ---------------------------------------------------------------


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'main.db'}")
    monkeypatch.setenv("TIRTUNE_REPLAY_DATABASE_URL", f"sqlite:///{tmp_path / 'replay.db'}")
    monkeypatch.setenv("TIRTUNE_CACHE_DIR", str(tmp_path / "cache"))
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def test_a_replay_stores_into_its_own_database_unless_told(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", P.shape, "--trials", "3", "--replay", str(V1)]) == 0
    with transaction(open_database(f"sqlite:///{env / 'main.db'}")) as s:
        assert repo.count_jobs(s) == 0 and repo.count_measurements(s) == 0
    with transaction(open_database(f"sqlite:///{env / 'replay.db'}")) as s:
        assert repo.count_jobs(s) == 1 and {r.source for r in repo.list_measurements(s)} == {Source.REPLAY}
    named = f"sqlite:///{env / 'named.db'}"
    assert main(["tune", P.shape, "--trials", "3", "--replay", str(V1), "--database", named]) == 0
    with transaction(open_database(named)) as s:
        assert repo.count_jobs(s) == 1
    capsys.readouterr()
    assert main(["best", P.shape, "--database", named]) == 1  # replayed figures are not served as measured
    assert "replayed figures exist" in (said := capsys.readouterr().out) and "--source replay" in said
    assert main(["best", P.shape, "--database", named, "--source", "replay"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == "replay"
    settings = Settings(replay=V1)
    assert settings.service_database_url == f"sqlite:///{env / 'replay.db'}"
    assert Settings().service_database_url == f"sqlite:///{env / 'main.db'}"
    app = create_app(settings, start_workers=False)  # the service with TIRTUNE_REPLAY uses the replay database
    with TestClient(app) as c:
        assert c.get("/jobs").json()["total"] == 1
        assert c.get("/best", params=BEST).status_code == 404
        assert c.get("/best", params={**BEST, "source": "replay"}).json()["source"] == "replay"


def test_every_surface_names_the_same_best(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay of the hopper-gemm/3 recording, where the most TFLOP/s (0.998x) is not the best
    ratio (1.032x): the tune summary, table and progress bar, `tirtune best`, GET /best,
    GET /jobs/{id} and the dashboard's JSON name one config with one set of figures."""
    monkeypatch.setenv("COLUMNS", "200")  # rich's width off a terminal: the bar's text is not cut
    # The shape class's starts, which hold the recording's trap in 8 trials; the cost model's picks
    # need not (what it picks is tests/test_model.py's business).
    monkeypatch.setenv("TIRTUNE_COST_MODEL", "false")
    get_settings.cache_clear()
    out = env / "tune.json"
    assert main(["tune", P.shape, "--trials", "8", "--replay", str(V3), "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    bar = capsys.readouterr().err  # the progress bar ends on the best it names
    assert main(["best", P.shape, "--source", "replay"]) == 0
    printed = json.loads(capsys.readouterr().out)
    url = f"sqlite:///{env / 'replay.db'}"
    with transaction(open_database(url)) as s:
        ok = repo.list_measurements(s, job_id=summary["job_id"], outcome=Outcome.OK)
    most_tflops = max(ok, key=lambda r: r.tflops or 0)
    best_ratio = max(ok, key=lambda r: r.ratio or 0)
    assert most_tflops.config != best_ratio.config, "the recording's trap is among the trials"
    app = create_app(Settings(database_url=url, best_cache_check_s=0), start_workers=False)
    with TestClient(app) as c:
        served = c.get("/best", params={**BEST, "source": "replay"}).json()
        job = c.get(f"/jobs/{summary['job_id']}").json()
        dashboard = c.get(f"/studies/{P.shape}/float16/summary").json()
        of_job = c.get(f"/studies/{P.shape}/float16/summary", params={"job_id": summary["job_id"]}).json()
        listed = c.get("/trials", params={"job_id": summary["job_id"], "limit": 500}).json()["items"]
    assert printed == served == summary["best"] == dashboard["best"] == of_job["best"]
    assert served["config"] == best_ratio.config.to_json() == summary["best_config"]
    assert summary["top"][0]["label"] == served["config_label"] == dashboard["top"][0]["config_label"]
    assert summary["ratio"] == served["ratio"] == summary["top"][0]["ratio"] == dashboard["top"][0]["ratio"]
    assert f"best {served['ratio']:.3f}x cuBLAS ({served['ratio_p10']:.3f}-{served['ratio_p90']:.3f})" in bar
    assert job["best"]["id"] == served["trial"]["measurement_id"]
    assert job["best"]["remeasured"]["ratio"] == served["ratio"] and served["confirmed"] is True
    assert next(t for t in listed if t["id"] == job["best"]["id"])["remeasured"] == job["best"]["remeasured"]
    assert dashboard["ranked_source"] == "replay"
    trials = dashboard["trials"]
    assert trials[-1]["best_so_far_ratio"] == max(t["ratio"] or 0 for t in trials)
