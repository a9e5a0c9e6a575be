"""GPU runner: one Ray actor per GPU (num_gpus=1), each measuring through a supervised child.

The actor is a thin shell: the real work happens in `ChildSupervisor`'s child process, so a
candidate that hangs or poisons its CUDA context costs a child, never the actor. Each actor has
one candidate in flight at a time, so if the actor itself dies only that candidate is lost: it
comes back as LAUNCH_ERROR, Ray restarts the actor (max_restarts), the handle waits until the
new one answers and the study goes on. An actor that cannot come back is an infrastructure
fault (WorkerError), not a result.
"""

from __future__ import annotations

import logging
import secrets
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from importlib import metadata
from typing import Any, cast

from tirtune.workers.errors import WorkerError
from tirtune.workers.measure import MeasureReply, MeasureRequest, RemeasureReply, RemeasureRequest
from tirtune.workers.results import BuildResult, Outcome, Provenance, RunResult, Stack
from tirtune.workers.supervisor import ChildSupervisor

__all__ = ["GpuRunner", "reply_to_result", "tvm_version"]

REVIVE_TIMEOUT_S = 300.0  # a restarted actor starts a child that warms the card: allow minutes

log = logging.getLogger(__name__)


def tvm_version() -> str:
    try:
        return metadata.version("apache-tvm")
    except metadata.PackageNotFoundError:
        return "unknown"


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def reply_to_result(build: BuildResult, reply: MeasureReply, stack: Stack, torch_version: str, seed: int) -> RunResult:
    """Turn the child's raw reply into the RunResult value object."""
    provenance = Provenance(stack, build.candidate.template_version, torch_version, reply.sm_clock_mhz, reply.power_w)
    outcome = Outcome(reply.outcome)
    if outcome is not Outcome.OK:
        return RunResult(
            build.candidate,
            outcome,
            reply.message,
            rel_error=reply.rel_error,
            provenance=provenance,
            extra={"seed": seed},
        )
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
        extra={
            "seed": seed,
            "cublas_p10_ms": _percentile(ref, 0.1) if ref else None,
            "cublas_p90_ms": _percentile(ref, 0.9) if ref else None,
        },
    )


class _GpuActor:
    """Lives in a Ray worker that owns one GPU (Ray sets CUDA_VISIBLE_DEVICES)."""

    def __init__(self, run_timeout_s: float, child_target: Callable[[Any], None] | None = None) -> None:
        kwargs = {} if child_target is None else {"target": child_target}
        self.supervisor = ChildSupervisor(run_timeout_s=run_timeout_s, **kwargs)
        info = self.supervisor.start()
        self.torch_version = info.get("torch", "")
        self._stack = Stack(
            info["gpu_name"],
            info.get("driver", ""),
            info.get("cuda", ""),
            tvm_version(),
            info.get("compute_capability", ""),
        )

    def stack(self) -> Stack:
        return self._stack

    def pid(self) -> int:
        import os

        return os.getpid()

    def run_one(self, build: BuildResult) -> RunResult:
        if not build.ok or build.artifact is None:
            return RunResult.failed(build.candidate, build.outcome, build.message)
        p = build.candidate.problem
        seed = secrets.randbits(31)  # fresh inputs for every check
        reply = cast(
            MeasureReply, self.supervisor.measure(MeasureRequest(build.artifact, p.m, p.n, p.k, p.dtype, seed))
        )
        return reply_to_result(build, reply, self._stack, self.torch_version, seed)

    def remeasure(self, builds: Sequence[BuildResult], rounds: int) -> list[RunResult]:
        """Verify and time `builds` interleaved in one child (all OK builds of one problem)."""
        p = builds[0].candidate.problem
        seed = secrets.randbits(31)
        request = RemeasureRequest(tuple(b.artifact or "" for b in builds), p.m, p.n, p.k, p.dtype, seed, rounds)
        reply = self.supervisor.measure(request, timeout_s=self.supervisor.run_timeout_s * (1 + len(builds)))
        replies = reply.replies if isinstance(reply, RemeasureReply) else tuple(reply for _ in builds)
        results = [
            reply_to_result(b, r, self._stack, self.torch_version, seed) for b, r in zip(builds, replies, strict=True)
        ]
        return [replace(r, extra={**r.extra, "remeasure": True, "rounds": rounds}) for r in results]


class GpuRunner:
    """Runner handle over one Ray actor per GPU; the caller has done `ray.init`."""

    def __init__(
        self, num_gpus: int = 1, run_timeout_s: float = 60.0, *, child_target: Callable[[Any], None] | None = None
    ) -> None:
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
        self.actor_deaths = 0

    def stack(self) -> Stack:
        if self._stack is None:
            stacks = self._ray.get([a.stack.remote() for a in self._actors])
            names = {s.gpu_name for s in stacks}
            if len(names) > 1:
                raise WorkerError(f"GPUs of different models cannot share one runner: {sorted(names)}")
            self._stack = stacks[0]
        return self._stack

    def actor_pids(self) -> list[int]:
        """The process of each actor (diagnostics; a restart shows as a new pid)."""
        return list(self._ray.get([a.pid.remote() for a in self._actors]))

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        """One candidate in flight per actor (an actor's death loses one), in input order."""
        results: list[RunResult | None] = [None] * len(batch)
        queue = list(range(len(batch)))
        idle = list(self._actors)
        pending: dict[Any, tuple[int, Any]] = {}
        while queue or pending:
            while queue and idle:
                i, actor = queue.pop(0), idle.pop(0)
                pending[actor.run_one.remote(batch[i])] = (i, actor)
            done, _ = self._ray.wait(list(pending), num_returns=1)
            i, actor = pending.pop(done[0])
            results[i] = self._collect(done[0], actor, [batch[i]])[0]
            idle.append(actor)
        return [r for r in results if r is not None]

    def remeasure(self, batch: Sequence[BuildResult], rounds: int = 5) -> list[RunResult]:
        """Time the OK builds of `batch` again, interleaved round by round in one process with
        cuBLAS, so their figures compare; failed builds come back as their failures, in order."""
        runnable = [b for b in batch if b.ok and b.artifact is not None]
        measured = iter(
            self._collect(self._actors[0].remeasure.remote(runnable, rounds), self._actors[0], runnable)
            if runnable
            else []
        )
        return [
            next(measured) if b.ok and b.artifact is not None else RunResult.failed(b.candidate, b.outcome, b.message)
            for b in batch
        ]

    def _collect(self, future: Any, actor: Any, builds: Sequence[BuildResult]) -> list[RunResult]:
        try:
            result = self._ray.get(future)
            return list(result) if isinstance(result, list) else [result]
        except self._ray.exceptions.RayActorError as exc:
            self.actor_deaths += 1
            log.warning("GPU runner actor died measuring %s: %s", [b.candidate.config.label() for b in builds], exc)
            self._revive(actor)
            message = f"GPU runner actor died while measuring this candidate (restarted): {_first_line(exc)}"
            return [RunResult.failed(b.candidate, Outcome.LAUNCH_ERROR, message) for b in builds]

    def _revive(self, actor: Any) -> None:
        """Wait until Ray has restarted the actor (calls to a restarting actor fail with
        ActorUnavailableError: ask again); WorkerError when it is gone for good."""
        errors = self._ray.exceptions
        deadline = time.monotonic() + REVIVE_TIMEOUT_S
        while True:
            try:
                self._ray.get(actor.stack.remote(), timeout=max(1.0, deadline - time.monotonic()))
                return
            except errors.ActorUnavailableError as exc:
                if time.monotonic() > deadline:
                    raise WorkerError(f"the GPU runner actor did not come back: {_first_line(exc)}") from exc
                time.sleep(0.5)
            except (errors.RayActorError, errors.GetTimeoutError) as exc:  # restarts used up, or stuck
                raise WorkerError(f"the GPU runner actor did not come back after dying: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
