"""The production path on one machine: a Ray cluster of two nodes, a head with the CPUs (builders)
and a second node with two (declared) GPUs and no CPUs (runners).

Real Ray, real job loop, real database; the fakes sit at our own seams only: the builder tasks'
compiler writes the candidate as the "module" (no nvcc), and the measuring child answers with
the measurement recorded for that module on the H200 (bench/data). The builder's cache is
deleted before anything is measured, so a result can only come from bytes shipped to the GPU
node, never from a shared path.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster
from stand_in_children import replay_child, replay_compile

from tirtune.builder.tirx_builder import TirxBuilder
from tirtune.core import Candidate, Outcome, Stack
from tirtune.db import repo
from tirtune.db.session import open_database
from tirtune.runner.errors import WorkerError
from tirtune.runner.gpu_runner import GpuRunner, pool_by_model
from tirtune.space import Config, Problem
from tirtune.space.hopper import HOPPER_V1
from tirtune.space.hopper.knobs import KNOBS as HOPPER_KNOBS
from tirtune.tuner.job import JobLoop

TESTS = Path(__file__).resolve().parent
RECORDED = TESTS.parent / "bench" / "data" / "hopper-4096x4096x4096-float16.jsonl"
PROBLEM = Problem(4096, 4096, 4096)


def _recorded() -> dict[Config, dict[str, Any]]:
    rows = [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]
    return {Config.from_json(r["config"], HOPPER_KNOBS): r for r in rows}


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, str]]:
    path = os.pathsep.join([str(TESTS), str(TESTS.parent)])
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    gpu_node = c.add_node(num_cpus=0, num_gpus=2)
    env = {"PYTHONPATH": path, "TIRTUNE_REPLAY": str(RECORDED), "TIRTUNE_REPLAY_DELAY_S": "0.3"}
    ray.init(address=c.address, runtime_env={"env_vars": env}, log_to_driver=False)
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = path  # the builder tasks' own runtime env is derived from it
    try:
        nodes = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
        assert len(nodes) == 2
        yield {"head": c.head_node.node_id, "gpu": gpu_node.node_id}
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
        ray.shutdown()
        c.shutdown()


def test_builds_run_on_the_cpu_node_and_measurements_on_the_gpu_node_from_shipped_bytes(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    recorded = _recorded()
    configs = sorted(HOPPER_V1.valid_configs(PROBLEM))[:8]
    candidates = [Candidate(c, PROBLEM, HOPPER_V1.template_version) for c in configs]
    builder = TirxBuilder(cache_dir=tmp_path / "builder-cache", timeout_s=60, compiler=replay_compile)
    builds = builder.build(candidates)
    assert all(b.ok and b.payload for b in builds)
    assert {json.loads(b.payload or b"")["built_on_pid"] for b in builds} != {os.getpid()}  # in Ray tasks
    shutil.rmtree(tmp_path / "builder-cache")  # no path can be used: only the bytes
    runner = GpuRunner(run_timeout_s=30, child_target=replay_child)
    try:
        assert runner.num_gpus == 2
        usage = runner.usage()
        assert {u.node_id for u in usage} == {cluster["gpu"]}  # the head has no GPU
        assert len({u.gpu_ids for u in usage}) == 2  # one actor per GPU, never two on one
        results = runner.run(builds)
        assert [r.outcome for r in results] == [Outcome.OK] * len(builds)
        for r in results:
            row = recorded[r.candidate.config]
            assert r.time_ms == pytest.approx(row["time_ms"])
            assert r.cublas_ms == pytest.approx(row["cublas_ms"])
        assert {r.extra["runner"] for r in results} == {u.label for u in usage}  # both GPUs took work
        after = runner.usage()
        assert sum(u.candidates for u in after) == len(builds)
        assert all(u.candidates >= 2 and u.busy_s >= 0.3 * u.candidates for u in after)
    finally:
        runner.close()


def test_a_job_keeps_both_gpus_of_the_other_node_busy(cluster: dict[str, str], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cluster.db'}"
    from tirtune.db import migrate

    migrate.upgrade(url)
    sessions = open_database(url)
    with sessions() as s, s.begin():
        job = repo.create_job(s, PROBLEM, HOPPER_V1.arch, 12)
        job_id = job.id
    builder = TirxBuilder(cache_dir=tmp_path / "cache", timeout_s=60, compiler=replay_compile)
    runner = GpuRunner(run_timeout_s=30, child_target=replay_child)
    try:
        summary = JobLoop(sessions, url, HOPPER_V1, builder, runner, batch_size=4, remeasure_top=3).run(job_id)
        assert summary.trials == 12
        with sessions() as s:
            rows = repo.list_measurements(s, job_id=job_id, limit=100)
        ok = [r for r in rows if r.outcome is Outcome.OK]
        assert len(ok) == 12
        recorded = _recorded()
        for r in ok:
            assert r.tflops == pytest.approx(PROBLEM.tflops(recorded[r.config]["time_ms"]))
        assert {r.gpu_name for r in ok} == {"NVIDIA H200"}
        assert all(u.candidates >= 4 for u in runner.usage())  # the work was spread over both GPUs
    finally:
        runner.close()


def test_the_gpus_ray_placed_on_this_machine_are_counted_for_the_builders(cluster: dict[str, str]) -> None:
    """Both nodes run here, so the GPU node's two GPUs share this machine's cores with the builders
    (runtime.local_gpus: the service's cubin builder leaves them their runners' cores)."""
    from tirtune.tuner.runtime import local_gpus

    assert local_gpus() == 2


def test_a_model_the_cluster_lacks_is_refused_and_its_gpus_released(cluster: dict[str, str]) -> None:
    with pytest.raises(WorkerError, match="no GPU of model 'NVIDIA B200'"):
        GpuRunner(run_timeout_s=30, gpu_model="NVIDIA B200", child_target=replay_child)
    runner = GpuRunner(num_gpus=2, run_timeout_s=30, child_target=replay_child)  # the GPUs were given back
    try:
        assert runner.gpu_model == "NVIDIA H200"
    finally:
        runner.close()


def test_more_gpus_than_the_cluster_has_is_a_clear_error(cluster: dict[str, str]) -> None:
    with pytest.raises(WorkerError, match="Ray sees 2 GPU"):
        GpuRunner(num_gpus=3, child_target=replay_child)


def _stack(name: str) -> Stack:
    return Stack(name, "580.159.04", "13.0", "0.27.0")


def test_results_of_one_model_are_pooled_and_other_models_kept_apart() -> None:
    stacks = [
        _stack("NVIDIA H100"),
        _stack("NVIDIA H200"),
        _stack("NVIDIA H200"),
        _stack("NVIDIA H100"),
        _stack("NVIDIA H200"),
    ]
    assert pool_by_model(stacks) == ("NVIDIA H200", [1, 2, 4])  # the model most GPUs are
    assert pool_by_model(stacks, "NVIDIA H100") == ("NVIDIA H100", [0, 3])
    assert pool_by_model([_stack("B"), _stack("A")]) == ("A", [1])  # a tie: by name, so it is stable
    with pytest.raises(WorkerError, match="no GPU of model 'X'"):
        pool_by_model(stacks, "X")
