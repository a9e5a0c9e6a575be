"""GPU runner: one Ray actor per GPU (num_gpus=1), each measuring through a supervised child.

The actor is a thin shell: the real work happens in `ChildSupervisor`'s child process, so a
candidate that hangs or poisons its CUDA context costs a child, never the actor. If the actor
itself dies, Ray restarts it (max_restarts) and the batch in flight comes back as LAUNCH_ERROR.
"""

from __future__ import annotations

import logging
import secrets
import statistics
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from tirtune.workers.errors import WorkerError
from tirtune.workers.measure import MeasureReply, MeasureRequest
from tirtune.workers.results import BuildResult, Outcome, Provenance, RunResult, Stack
from tirtune.workers.supervisor import ChildSupervisor

__all__ = ["GpuRunner", "reply_to_result", "tvm_version"]

log = logging.getLogger(__name__)


def tvm_version() -> str:
    try:
        return metadata.version("apache-tvm")
    except metadata.PackageNotFoundError:
        return "unknown"


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def reply_to_result(build: BuildResult, reply: MeasureReply, stack: Stack, torch_version: str,
                    seed: int) -> RunResult:
    """Turn the child's raw reply into the RunResult value object."""
    provenance = Provenance(stack, build.candidate.template_version, torch_version,
                            reply.sm_clock_mhz, reply.power_w)
    outcome = Outcome(reply.outcome)
    if outcome is not Outcome.OK:
        return RunResult(build.candidate, outcome, reply.message, rel_error=reply.rel_error,
                         provenance=provenance, extra={"seed": seed})
    times, ref = reply.times_ms, reply.cublas_times_ms
    return RunResult(
        candidate=build.candidate,
        outcome=Outcome.OK,
        time_ms=statistics.median(times),
        time_p10_ms=_percentile(times, 0.1),
        time_p90_ms=_percentile(times, 0.9),
        repetitions=len(times),
        cublas_ms=statistics.median(ref) if ref else None,
        rel_error=reply.rel_error,
        provenance=provenance,
        extra={"seed": seed, "cublas_p10_ms": _percentile(ref, 0.1) if ref else None,
               "cublas_p90_ms": _percentile(ref, 0.9) if ref else None},
    )


class _GpuActor:
    """Lives in a Ray worker that owns one GPU (Ray sets CUDA_VISIBLE_DEVICES)."""

    def __init__(self, run_timeout_s: float, child_target: Callable[[Any], None] | None = None) -> None:
        kwargs = {} if child_target is None else {"target": child_target}
        self.supervisor = ChildSupervisor(run_timeout_s=run_timeout_s, **kwargs)
        info = self.supervisor.start()
        self.torch_version = info.get("torch", "")
        self._stack = Stack(info["gpu_name"], info.get("driver", ""), info.get("cuda", ""),
                            tvm_version(), info.get("compute_capability", ""))

    def stack(self) -> Stack:
        return self._stack

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        return [self._one(build) for build in batch]

    def _one(self, build: BuildResult) -> RunResult:
        if not build.ok or build.artifact is None:
            return RunResult.failed(build.candidate, build.outcome, build.message)
        p = build.candidate.problem
        seed = secrets.randbits(31)  # fresh inputs for every check
        reply = self.supervisor.measure(MeasureRequest(build.artifact, p.m, p.n, p.k, p.dtype, seed))
        return reply_to_result(build, reply, self._stack, self.torch_version, seed)


class GpuRunner:
    """Runner handle over one Ray actor per GPU; the caller has done `ray.init`."""

    def __init__(self, num_gpus: int = 1, run_timeout_s: float = 60.0, *,
                 child_target: Callable[[Any], None] | None = None) -> None:
        """`child_target` replaces the measuring child's entry point (tests only)."""
        import ray

        if not ray.is_initialized():
            raise WorkerError("GpuRunner needs ray.init() first")
        if ray.cluster_resources().get("GPU", 0) < num_gpus:
            raise WorkerError(f"Ray sees {ray.cluster_resources().get('GPU', 0):g} GPU(s); {num_gpus} needed")
        actor = ray.remote(num_gpus=1, max_restarts=3, max_task_retries=0)(_GpuActor)
        self._ray = ray
        self._actors = [actor.remote(run_timeout_s, child_target) for _ in range(num_gpus)]
        self._stack: Stack | None = None

    def stack(self) -> Stack:
        if self._stack is None:
            stacks = self._ray.get([a.stack.remote() for a in self._actors])
            names = {s.gpu_name for s in stacks}
            if len(names) > 1:
                raise WorkerError(f"GPUs of different models cannot share one runner: {sorted(names)}")
            self._stack = stacks[0]
        return self._stack

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        shards: list[list[int]] = [[] for _ in self._actors]
        for i in range(len(batch)):
            shards[i % len(self._actors)].append(i)
        futures = [(idx, a.run.remote([batch[i] for i in idx])) for a, idx in zip(self._actors, shards, strict=True) if idx]
        results: list[RunResult | None] = [None] * len(batch)
        for idx, future in futures:
            for i, result in zip(idx, self._gather(future, [batch[i] for i in idx]), strict=True):
                results[i] = result
        return [r for r in results if r is not None]

    def _gather(self, future: Any, builds: list[BuildResult]) -> list[RunResult]:
        try:
            return list(self._ray.get(future))
        except self._ray.exceptions.RayActorError as exc:
            log.warning("GPU runner actor died: %s", exc)
            return [RunResult.failed(b.candidate, Outcome.LAUNCH_ERROR, f"GPU runner actor died: {exc}") for b in builds]
