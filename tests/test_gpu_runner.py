"""The GPU runner's Ray actor path, end to end on a real local Ray, with a stand-in child.

Ray is told the machine has one GPU, so the actor is placed as on a GPU host; the measuring
child is replaced at our own seam, so no CUDA is needed.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from stand_in_children import misbehaving_child

from tirtune.core import BuildResult, Candidate, Outcome
from tirtune.runner.gpu_runner import GpuRunner
from tirtune.space import HOPPER, Problem
from tirtune.space.hopper.knobs import config as hopper_config

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def runner() -> Iterator[GpuRunner]:
    path = os.pathsep.join([str(TESTS), str(TESTS.parent)])
    # Two GPUs: the module's runner holds one, a test may start a runner of its own on the other.
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        runner = GpuRunner(num_gpus=1, run_timeout_s=5.0, child_target=misbehaving_child)
        yield runner
        runner.close()
    finally:
        ray.shutdown()


def _build(artifact: str, outcome: Outcome = Outcome.OK, epilogue: str = "none") -> BuildResult:
    candidate = Candidate(hopper_config(), Problem(4096, 4096, 4096, "float16", epilogue), HOPPER.template_version)
    return BuildResult(candidate, outcome, artifact=artifact if outcome is Outcome.OK else None,
                       message="" if outcome is Outcome.OK else "ptxas fatal: too much shared memory")


def _shipped(payload: bytes) -> BuildResult:
    """A build that crosses to the actor as bytes, as from a builder on another host."""
    candidate = Candidate(hopper_config(), Problem(4096, 4096, 4096), HOPPER.template_version)
    return BuildResult(candidate, Outcome.OK, artifact="/elsewhere/kernel.so", payload=payload)


def _staged(payload: bytes) -> Path:
    """Where an actor staged `payload` (its content hash names the file)."""
    digest = hashlib.sha256(payload).hexdigest()[:32]
    [path] = Path(tempfile.gettempdir()).glob(f"tirtune-runner-*/{digest}.so")
    return path


def test_an_actors_staging_folder_goes_when_its_runner_closes(runner: GpuRunner) -> None:
    payload = secrets.token_bytes(32)
    own = GpuRunner(num_gpus=1, run_timeout_s=5.0, child_target=misbehaving_child)
    try:
        assert [r.outcome for r in own.run([_shipped(payload)])] == [Outcome.OK]
        folder = _staged(payload).parent
    finally:
        own.close()
    assert not folder.exists()


def test_a_restarted_actor_removes_the_staging_folder_its_dead_predecessor_left(runner: GpuRunner) -> None:
    payload = secrets.token_bytes(32)
    assert [r.outcome for r in runner.run([_shipped(payload)])] == [Outcome.OK]
    folder = _staged(payload).parent
    assert [r.outcome for r in runner.run([_build("kill-actor")])] == [Outcome.LAUNCH_ERROR]  # SIGKILL: no clean-up
    assert not folder.exists()  # the restarted actor swept it: its owner is gone
    assert [r.outcome for r in runner.run([_shipped(payload)])] == [Outcome.OK]  # staged again, in its own folder
    assert _staged(payload).parent != folder


def test_stack_comes_from_the_measuring_process(runner: GpuRunner) -> None:
    stack = runner.stack()
    assert stack.gpu_name == "stand-in"
    assert stack.tvm  # the TVM that built the kernels is part of the identity


def test_every_candidate_gets_its_own_result_in_order(runner: GpuRunner) -> None:
    batch = [_build("ok"), _build("hang"), _build("crash"), _build("", Outcome.COMPILE_ERROR), _build("ok")]
    results = runner.run(batch)
    assert [r.outcome for r in results] == [Outcome.OK, Outcome.TIMEOUT, Outcome.LAUNCH_ERROR,
                                            Outcome.COMPILE_ERROR, Outcome.OK]
    ok = results[0]
    assert ok.time_ms == pytest.approx(1.05) and ok.cublas_ms == pytest.approx(1.2)
    assert ok.ratio == pytest.approx(1.2 / 1.05)
    assert ok.tflops == pytest.approx(Problem(4096, 4096, 4096).tflops(1.05))
    assert ok.provenance is not None and ok.provenance.stack.gpu_name == "stand-in"
    assert "killed" in results[1].message
    assert "exit code 7" in results[2].message
    assert results[3].message.startswith("ptxas")


def test_remeasure_times_the_ok_builds_together_and_passes_failures_through(runner: GpuRunner) -> None:
    batch = [_build("ok"), _build("", Outcome.COMPILE_ERROR), _build("ok")]
    results = runner.remeasure(batch, rounds=3)
    assert [r.outcome for r in results] == [Outcome.OK, Outcome.COMPILE_ERROR, Outcome.OK]
    assert all(r.extra["remeasure"] and r.extra["rounds"] == 3 for r in (results[0], results[2]))
    assert results[0].cublas_ms == pytest.approx(1.2)


def test_remeasure_in_several_processes_pools_their_rounds(runner: GpuRunner) -> None:
    """Each process after the first is a fresh measuring child; the figures pool every process's
    repetitions and the ratio's spread every process's rounds (the stand-in's second round ratio
    is 1.2 + pid % 97 / 1000, so the p90 is the larger of the two processes')."""
    results = runner.remeasure([_build("ok"), _build("ok")], rounds=2, processes=2)
    assert [r.outcome for r in results] == [Outcome.OK, Outcome.OK]
    first = results[0]
    pids = first.extra["pids"]
    assert first.extra["processes"] == 2 and len(set(pids)) == 2, "two measuring processes"
    assert first.repetitions == 4 and first.time_ms == pytest.approx(1.05)
    assert first.ratio_p10 == 1.1 and first.ratio_p90 == pytest.approx(max(1.2 + p % 97 / 1000 for p in pids))
    assert first.provenance is not None and first.provenance.source == "gpu" and first.provenance.measured_at


def test_a_dead_actor_costs_one_candidate_and_the_restarted_actor_goes_on(runner: GpuRunner) -> None:
    [before], deaths = runner.actor_pids(), runner.actor_deaths
    results = runner.run([_build("ok"), _build("kill-actor"), _build("ok")])
    assert [r.outcome for r in results] == [Outcome.OK, Outcome.LAUNCH_ERROR, Outcome.OK]
    assert "actor died" in results[1].message
    assert runner.actor_deaths == deaths + 1
    [after] = runner.actor_pids()
    assert after != before  # Ray restarted it in a new process
    assert [r.outcome for r in runner.run([_build("ok"), _build("hang")])] == [Outcome.OK, Outcome.TIMEOUT]


def test_concurrent_callers_share_the_actor_one_candidate_at_a_time(runner: GpuRunner) -> None:
    """Jobs the service runs at once call `run` (and `remeasure`) from their own threads: each
    gets its own results in order, and the one GPU never holds two candidates, so the seconds it
    was held add up to no more than the wall time (a candidate queued behind another's at the
    actor would count its wait as GPU time)."""
    import threading
    import time

    before = runner.usage()[0]
    out: dict[str, list[Outcome]] = {}

    def job(name: str, batch: list[BuildResult]) -> None:
        out[name] = [r.outcome for r in runner.run(batch)]

    def remeasure() -> None:
        out["re"] = [r.outcome for r in runner.remeasure([_build("ok"), _build("", Outcome.COMPILE_ERROR)], 2)]

    threads = [threading.Thread(target=job, args=("a", [_build("ok")] * 3)),
               threading.Thread(target=job, args=("b", [_build("ok"), _build("crash"), _build("ok")])),
               threading.Thread(target=remeasure)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    wall = time.monotonic() - began
    assert out["a"] == [Outcome.OK] * 3
    assert out["b"] == [Outcome.OK, Outcome.LAUNCH_ERROR, Outcome.OK]
    assert out["re"] == [Outcome.OK, Outcome.COMPILE_ERROR]
    after = runner.usage()[0]
    assert after.candidates - before.candidates == 6
    assert after.busy_s - before.busy_s <= wall


def test_a_fused_problem_reaches_the_child_and_its_result_names_the_baseline(runner: GpuRunner) -> None:
    """The request carries the problem's epilogue (the stand-in names the baseline the real child
    would, from it); a plain problem's result has no "baseline" key, as before epilogues existed."""
    fused, plain = runner.run([_build("ok", epilogue="residual+bias"), _build("ok")])
    assert fused.outcome is Outcome.OK and fused.extra["baseline"] == "torch.addmm(bias) + residual"
    assert plain.outcome is Outcome.OK and "baseline" not in plain.extra
    assert fused.cublas_ms == plain.cublas_ms == pytest.approx(1.2)
    again = runner.remeasure([_build("ok", epilogue="scale_row+bias")], rounds=2, processes=2)
    assert [r.extra["baseline"] for r in again] == ["torch.mm * scale_row + bias"]
    assert "baseline" not in runner.remeasure([_build("ok")], rounds=2, processes=2)[0].extra
