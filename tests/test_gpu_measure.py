"""The real measuring child on a Hopper GPU: small kernels built by the service's builder, verified
(tirtune.runner.verify) and timed against cuBLAS by `tirtune.runner.measure`, through the
supervisor and through the GPU runner's Ray actor.

Marked `gpu`: skipped without a compute capability 9.x GPU (tests/conftest.py). On a GPU host with
`pip install -e '.[gpu,test]'` and nvcc 13 on the PATH:

    python -m pytest -q -m gpu

Builds need TVM and nvcc; a build cache made elsewhere serves instead when
TIRTUNE_GPU_TEST_CACHE names it (builds are content-addressed: a hit needs neither).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tirtune.builder.tirx_builder import compile_candidate
from tirtune.core import BuildResult, Candidate, Config, Outcome, Problem
from tirtune.runner.measure import MeasureReply, MeasureRequest, RemeasureReply, RemeasureRequest
from tirtune.runner.supervisor import ChildSupervisor
from tirtune.runner.verify import TOLERANCE
from tirtune.space import HOPPER
from tirtune.space.hopper.knobs import config as hopper_config

pytestmark = pytest.mark.gpu

SMALL = Problem(256, 128, 64, "float16")
MEDIUM = Problem(2048, 2048, 1024, "float16")
TINY = hopper_config(blk_m=64, blk_n=64, blk_k=64, stages=2, consumers=1, warp_specialized=False)
WS = hopper_config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2, warp_specialized=True)


def _fault(kind: str) -> Config:
    from bench.faults import kernels  # imports the template (TVM): only when a fault is built

    return kernels.FAULTS[kind].config


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("TIRTUNE_GPU_TEST_CACHE")
    return Path(given) if given else tmp_path_factory.mktemp("gpu-builds")


def _build(cache: Path, config: Config, problem: Problem, template: str | None = None) -> BuildResult:
    candidate = Candidate(config, problem, HOPPER.template_version if template is None else f"fault:{template}")
    kwargs = {} if template is None else {"template": template}
    build = compile_candidate(candidate, str(cache), 900.0, **kwargs)
    assert build.ok and build.artifact, build.message
    return build


@pytest.fixture(scope="module")
def child() -> Iterator[ChildSupervisor]:
    supervisor = ChildSupervisor(run_timeout_s=120.0)
    try:
        yield supervisor
    finally:
        supervisor.close()


def _request(build: BuildResult, dtype: str | None = None) -> MeasureRequest:
    p = build.candidate.problem
    return MeasureRequest(build.artifact or "", p.m, p.n, p.k, dtype or p.dtype, seed=3)


@pytest.mark.parametrize("config, problem", [(TINY, SMALL), (WS, MEDIUM)], ids=["tiny", "warp-specialized"])
def test_a_built_kernel_is_verified_then_timed_against_cublas(
    cache: Path, child: ChildSupervisor, config: Config, problem: Problem
) -> None:
    build = _build(cache, config, problem)
    info = child.start()
    assert info["compute_capability"].startswith("9.") and info["gpu_name"]
    reply = child.measure(_request(build))
    assert isinstance(reply, MeasureReply)
    assert reply.outcome == "OK", reply.message
    assert reply.rel_error is not None and 0 < reply.rel_error <= TOLERANCE[problem.dtype]
    assert reply.times_ms and all(t > 0 for t in reply.times_ms)
    assert reply.cublas_times_ms and all(t > 0 for t in reply.cublas_times_ms)
    # The roofline's bandwidth ceiling, measured in this process: an H200's HBM3e copies at
    # 3-4.8 TB/s (read + write); the SM count comes with it.
    assert 2000 < reply.info["copy_gbs"] < 5000 and reply.info["sm_count"] >= 100


@pytest.mark.parametrize("kind, words", [("wrong_result", "relative error"), ("out_of_bounds", "out-of-bounds write")])
def test_a_wrong_kernel_is_refused_by_the_check_and_never_timed(
    cache: Path, child: ChildSupervisor, kind: str, words: str
) -> None:
    build = _build(cache, _fault(kind), MEDIUM, template=f"bench.faults.kernels:{kind}")
    reply = child.measure(_request(build))
    assert isinstance(reply, MeasureReply)
    assert reply.outcome == "WRONG_RESULT" and words in reply.message, reply.message
    assert reply.times_ms == () and not reply.fatal


def test_a_faulting_kernel_costs_its_child_and_the_next_one_is_measured(cache: Path, child: ChildSupervisor) -> None:
    bad = _build(cache, _fault("illegal_address"), MEDIUM, template="bench.faults.kernels:illegal_address")
    good = _build(cache, WS, MEDIUM)
    restarts = child.restarts
    reply = child.measure(_request(bad))
    assert reply.outcome == "LAUNCH_ERROR" and reply.fatal and child.restarts == restarts + 1
    again = child.measure(_request(good))
    assert again.outcome == "OK", again.message


def test_a_remeasurement_times_verified_kernels_interleaved_with_one_cublas(
    cache: Path, child: ChildSupervisor
) -> None:
    builds = [_build(cache, TINY, MEDIUM), _build(cache, WS, MEDIUM)]
    p = MEDIUM
    reply = child.measure(RemeasureRequest(tuple(b.artifact or "" for b in builds), p.m, p.n, p.k, p.dtype, rounds=3),
                          timeout_s=300.0)
    assert isinstance(reply, RemeasureReply) and len(reply.replies) == 2
    assert all(r.outcome == "OK" for r in reply.replies), [r.message for r in reply.replies]
    assert reply.replies[0].cublas_times_ms == reply.replies[1].cublas_times_ms  # the same cuBLAS rounds


def test_the_gpu_runner_measures_through_its_ray_actor(cache: Path) -> None:
    ray = pytest.importorskip("ray")
    from tirtune.runner.gpu_runner import GpuRunner

    build = _build(cache, WS, MEDIUM)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        runner = GpuRunner(num_gpus=1, run_timeout_s=120.0)
        [result] = runner.run([build])
    finally:
        ray.shutdown()
    assert result.outcome is Outcome.OK, result.message
    assert result.ratio is not None and result.ratio > 0 and result.tflops
    assert result.provenance is not None and result.provenance.stack.compute_capability.startswith("9.")


# A fused epilogue (bias + residual) through the measuring child, on both build paths: a register
# epilogue and a staged (TMA-store) one, each with tails along M and N.
FUSED = Problem.parse("1000x1000x1000", "float16", "bias+residual")
FUSED_CONFIGS = {
    "register": hopper_config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2, warp_specialized=True),
    "tma": hopper_config(blk_m=128, blk_n=128, blk_k=64, stages=4, consumers=2, warp_specialized=True, epilogue="tma"),
}


def _build_on(path: str, cache: Path, config: Config, problem: Problem) -> BuildResult:
    """A build of the `.so` path (tvm-ffi wrapper) or the cubin path (launch spec + launcher)."""
    if path == "so":
        return _build(cache, config, problem)
    from tirtune.builder.cubin_builder import CubinBuilder

    builder = CubinBuilder(cache_dir=cache, timeout_s=900, processes=1)
    try:
        [build] = builder.build([Candidate(config, problem, HOPPER.template_version)])
    finally:
        builder.close()
    assert build.ok and build.artifact, build.message
    return build


@pytest.mark.parametrize("path", ["so", "cubin"])
@pytest.mark.parametrize("epilogue", sorted(FUSED_CONFIGS))
def test_a_fused_kernel_is_verified_against_its_epilogue_and_timed_against_cublas_and_the_ops(
    cache: Path, child: ChildSupervisor, epilogue: str, path: str
) -> None:
    from tirtune.runner.inputs import baseline_label

    build = _build_on(path, cache, FUSED_CONFIGS[epilogue], FUSED)
    p = FUSED
    reply = child.measure(MeasureRequest(build.artifact or "", p.m, p.n, p.k, p.dtype, seed=3, epilogue=p.epilogue))
    assert isinstance(reply, MeasureReply)
    assert reply.outcome == "OK", reply.message
    assert reply.rel_error is not None and 0 < reply.rel_error <= TOLERANCE[p.dtype]
    assert reply.times_ms and reply.cublas_times_ms and all(t > 0 for t in reply.cublas_times_ms)
    assert reply.info["baseline"] == baseline_label(p.epilogue) == "torch.addmm(bias) + residual"
    # The same kernel measured as the plain problem is refused, never timed: on the cubin path its
    # launch spec names operands the plain problem does not give; the `.so` wrapper refuses the count.
    plain = child.measure(MeasureRequest(build.artifact or "", p.m, p.n, p.k, p.dtype, seed=3))
    assert isinstance(plain, MeasureReply) and plain.outcome == "LAUNCH_ERROR" and plain.times_ms == ()
