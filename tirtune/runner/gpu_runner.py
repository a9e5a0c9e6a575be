"""GPU runner: one Ray actor per GPU (num_gpus=1), each measuring through a supervised child.

With several GPUs (on one host or across the nodes of a Ray cluster) the runner holds one actor
per GPU and hands each the next candidate as soon as it is free, so every GPU stays busy and two
candidates never share a GPU. Results of GPUs of one model are pooled (they share a Stack, so
one measurement identity); GPUs of other models get no actor in this runner: their figures are
not comparable and are kept apart (another runner, another study, by `gpu_model`). Builds cross
as bytes (`BuildResult.payload`); each actor stages them on its own node's disk.

The actor is a thin shell: the real work happens in `ChildSupervisor`'s child process, so a
candidate that hangs or poisons its CUDA context costs a child, never the actor. Each actor has
one candidate in flight at a time, so if the actor itself dies only that candidate is lost: it
comes back as LAUNCH_ERROR, Ray restarts the actor (max_restarts), the handle waits until the
new one answers and the study goes on. An actor that cannot come back is an infrastructure
fault (WorkerError), not a result.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import secrets
import shutil
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, cast

from tirtune.core import BuildResult, Outcome, Provenance, RunResult, Source, SpaceError, Stack
from tirtune.runner.errors import WorkerError
from tirtune.runner.measure import FOLLOWER_WARM_S, MeasureReply, MeasureRequest, RemeasureReply, RemeasureRequest
from tirtune.runner.scratch import owned_folder, sweep
from tirtune.runner.supervisor import ChildSupervisor
from tirtune.space.branches import branch_for_gpu

__all__ = ["ActorUsage", "GpuRunner", "merge_replies", "pool_by_model", "reply_to_result", "tvm_version"]

_POLL_S = 0.05  # how often a caller with queued candidates looks for an actor another caller freed
REVIVE_TIMEOUT_S = 300.0  # a restarted actor starts a child that warms the card: allow minutes
CLOSE_TIMEOUT_S = 10.0  # an actor finishing its candidate before it cleans up; then it is killed as it is
STAGING_PREFIX = "tirtune-runner-"  # each actor's folder of staged modules, in its node's temp dir

log = logging.getLogger(__name__)


def tvm_version() -> str:
    try:
        return metadata.version("apache-tvm")
    except metadata.PackageNotFoundError:
        return "unknown"


def _median_of(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def reply_to_result(build: BuildResult, reply: MeasureReply, stack: Stack, torch_version: str, seed: int) -> RunResult:
    """Turn the child's raw reply into the RunResult value object: medians of every repetition,
    the ratio's p10-p90 over the reply's rounds (None when it has none, e.g. cuBLAS not timed).
    A fused problem's baseline is cuBLAS and its epilogue's ops as separate kernels: `cublas_ms`
    is that baseline's time and `extra["baseline"]` names it (a plain result has no such key)."""
    provenance = Provenance(
        stack,
        build.candidate.template_version,
        torch_version,
        reply.sm_clock_mhz,
        reply.power_w,
        source=Source.GPU,
        measured_at=datetime.now(UTC),
        copy_gbs=reply.info.get("copy_gbs"),
        peak_tflops=_peak_tflops(stack, reply.info.get("sm_count"), reply.sm_clock_mhz, build.candidate.problem.dtype),
    )
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
    times, ref, ratios = reply.times_ms, reply.cublas_times_ms, reply.round_ratios
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
            **({"baseline": reply.info["baseline"]} if "baseline" in reply.info else {}),
        },
        ratio_p10=_percentile(ratios, 0.1) if ratios else None,
        ratio_p90=_percentile(ratios, 0.9) if ratios else None,
    )


def _peak_tflops(stack: Stack, sm_count: int | None, sm_clock_mhz: float | None, dtype: str) -> float | None:
    """The roofline's MMA ceiling at the clock the measurement ran (the stack's branch's rate for
    operands of `dtype`)."""
    if not stack.compute_capability:
        return None
    try:
        return branch_for_gpu(stack.compute_capability).peak_tflops(sm_count, sm_clock_mhz, dtype)
    except SpaceError:
        return None


def merge_replies(replies: Sequence[MeasureReply]) -> MeasureReply:
    """One candidate measured by several processes, as one reply: every repetition and every
    round of all of them (so medians and the ratio's spread cover processes as well as rounds);
    clock and power are the medians of the processes'. Any failure is the answer (the first)."""
    failed = next((r for r in replies if r.outcome != Outcome.OK.value), None)
    if failed is not None or len(replies) == 1:
        return failed or replies[0]
    clocks = [r.sm_clock_mhz for r in replies if r.sm_clock_mhz is not None]
    powers = [r.power_w for r in replies if r.power_w is not None]
    errors = [r.rel_error for r in replies if r.rel_error is not None]
    return MeasureReply(
        "OK",
        times_ms=tuple(t for r in replies for t in r.times_ms),
        cublas_times_ms=tuple(t for r in replies for t in r.cublas_times_ms),
        rel_error=max(errors) if errors else None,
        sm_clock_mhz=statistics.median(clocks) if clocks else None,
        power_w=statistics.median(powers) if powers else None,
        info={
            "processes": len(replies),
            "pids": [r.info.get("pid") for r in replies],
            "copy_gbs": _median_of(r.info.get("copy_gbs") for r in replies),
            "sm_count": replies[0].info.get("sm_count"),
            **({"baseline": replies[0].info["baseline"]} if "baseline" in replies[0].info else {}),
        },
        round_ratios=tuple(x for r in replies for x in r.round_ratios),
    )


@dataclass(frozen=True, slots=True)
class ActorUsage:
    """How one GPU runner actor spent a runner's life: where it ran and how long it measured."""

    label: str  # node id prefix and GPU index, e.g. "3f9a12:gpu0"
    node_id: str
    gpu_ids: tuple[str, ...]
    candidates: int
    busy_s: float  # from handing it a candidate to having the result, summed


class _GpuActor:
    """Lives in a Ray worker that owns one GPU (Ray sets CUDA_VISIBLE_DEVICES)."""

    def __init__(self, run_timeout_s: float, child_target: Callable[[Any], None] | None = None) -> None:
        import ray

        context = ray.get_runtime_context()
        self.node_id = context.get_node_id()
        self.gpu_ids = tuple(str(g) for g in ray.get_gpu_ids())
        self.label = f"{self.node_id[:6]}:gpu{','.join(self.gpu_ids) or '?'}"
        # Staged modules hold every candidate this actor measured: the folder goes with the actor
        # (`close`, or atexit when Ray ends it gracefully), and one whose actor was killed (ray.kill,
        # SIGKILL, the node's Ray stopped) is removed by the next actor that starts on the node.
        sweep(STAGING_PREFIX)
        self.staging = owned_folder(STAGING_PREFIX)
        atexit.register(shutil.rmtree, self.staging, ignore_errors=True)
        # A spare child waits, imported, beside the measuring one: a crashed candidate's
        # replacement and a re-measurement's second process start in about a second, not six.
        self.supervisor = (
            ChildSupervisor(run_timeout_s=run_timeout_s, spare=True)
            if child_target is None
            else ChildSupervisor(run_timeout_s=run_timeout_s, target=child_target, spare=True)
        )
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
        return os.getpid()

    def close(self) -> None:
        """End the measuring children and remove the staging folder (the runner then ends the actor)."""
        self.supervisor.close()
        shutil.rmtree(self.staging, ignore_errors=True)

    def where(self) -> tuple[str, str, tuple[str, ...]]:
        """(label, node id, GPU ids) of this actor."""
        return self.label, self.node_id, self.gpu_ids

    def _local(self, build: BuildResult) -> str:
        """A path on this node holding the build's module: its shipped bytes staged here (by
        content hash, written atomically), else the builder's path (a shared filesystem)."""
        if build.payload is None:
            return build.artifact or ""
        digest = hashlib.sha256(build.payload).hexdigest()[:32]
        # The artifact's kind travels in its suffix: .so (tvm-ffi) or .tlaunch (cubin + launch spec).
        suffix = Path(build.artifact).suffix if build.artifact else ".so"
        path = self.staging / f"{digest}{suffix or '.so'}"
        if not path.exists():
            partial = path.with_suffix(f".{os.getpid()}.part")
            partial.write_bytes(build.payload)
            partial.rename(path)
        return str(path)

    def _tagged(self, result: RunResult) -> RunResult:
        return replace(result, extra={**result.extra, "runner": self.label})

    def run_one(self, build: BuildResult) -> RunResult:
        if not build.ok or (build.artifact is None and build.payload is None):
            return RunResult.failed(build.candidate, build.outcome, build.message)
        p = build.candidate.problem
        seed = secrets.randbits(31)  # fresh inputs for every check
        request = MeasureRequest(self._local(build), p.m, p.n, p.k, p.dtype, seed, epilogue=p.epilogue)
        reply = cast(MeasureReply, self.supervisor.measure(request))
        return self._tagged(reply_to_result(build, reply, self._stack, self.torch_version, seed))

    def remeasure(self, builds: Sequence[BuildResult], rounds: int, processes: int = 1) -> list[RunResult]:
        """Verify and time `builds` interleaved, in `processes` measuring children one after
        another (each after the first is a fresh one, with its own fresh inputs), all OK builds of
        one problem; each build's figures pool every process's rounds."""
        p = builds[0].candidate.problem
        artifacts = tuple(self._local(b) for b in builds)
        seeds = [secrets.randbits(31) for _ in range(max(1, processes))]
        per_process = []
        for i, seed in enumerate(seeds):
            if i:  # a fresh child (the spare) for the next process; the card is warm from this one
                self.supervisor.retire()
                self.supervisor.start(warm_s=FOLLOWER_WARM_S)
            request = RemeasureRequest(artifacts, p.m, p.n, p.k, p.dtype, seed, rounds, epilogue=p.epilogue)
            reply = self.supervisor.measure(request, timeout_s=self.supervisor.run_timeout_s * (1 + len(builds)))
            per_process.append(reply.replies if isinstance(reply, RemeasureReply) else tuple(reply for _ in builds))
        merged = [merge_replies([replies[j] for replies in per_process]) for j in range(len(builds))]
        results = [
            reply_to_result(b, r, self._stack, self.torch_version, seeds[0])
            for b, r in zip(builds, merged, strict=True)
        ]
        extra = {"remeasure": True, "rounds": rounds, "processes": len(seeds)}
        return [
            self._tagged(replace(r, extra={**r.extra, **extra, "pids": m.info.get("pids", [m.info.get("pid")])}))
            for r, m in zip(results, merged, strict=True)
        ]


class GpuRunner:
    """Runner handle over one Ray actor per GPU; the caller has done `ray.init`.

    `num_gpus` actors (None or 0: one per GPU the cluster has now) are placed by Ray wherever
    the GPUs are, on this host or on other nodes of the cluster. When the GPUs are of several
    models, only those of `gpu_model` (default: the model most of them are) keep an actor.
    """

    source = Source.GPU

    def __init__(
        self,
        num_gpus: int | None = None,
        run_timeout_s: float = 60.0,
        *,
        gpu_model: str | None = None,
        child_target: Callable[[Any], None] | None = None,
        start_timeout_s: float = REVIVE_TIMEOUT_S,
    ) -> None:
        """`child_target` replaces the measuring child's entry point (tests only)."""
        import ray

        if not ray.is_initialized():
            raise WorkerError("GpuRunner needs ray.init() first")
        available = int(cast(Any, ray).cluster_resources().get("GPU", 0))
        wanted = num_gpus or available
        if wanted < 1 or available < wanted:
            raise WorkerError(f"Ray sees {available} GPU(s); {max(wanted, 1)} needed")
        # num_cpus=0: the actor waits on its GPU; a node may give all its CPUs to builders.
        # Actor handles are Any here: Ray's stubs do not type `.remote` on an actor's methods.
        actor: Any = ray.remote(num_gpus=1, num_cpus=0, max_restarts=3, max_task_retries=0)(_GpuActor)
        self._ray = ray
        actors: list[Any] = [actor.remote(run_timeout_s, child_target) for _ in range(wanted)]
        try:
            stacks = ray.get([a.stack.remote() for a in actors], timeout=start_timeout_s)
        except ray.exceptions.GetTimeoutError as exc:
            self._end(actors)
            raise WorkerError(
                f"{wanted} GPU runner actor(s) could not start within {start_timeout_s:g}s "
                "(GPUs held by another runner?)"
            ) from exc
        try:
            self.gpu_model, kept = pool_by_model(stacks, gpu_model)
        except WorkerError:
            self._end(actors)
            raise
        self._actors = [actors[i] for i in kept]
        self._end([a for i, a in enumerate(actors) if i not in kept])  # another model: its figures would not compare
        if len(kept) < len(actors):
            log.warning("GPUs of several models in the cluster: measuring on the %d %s only", len(kept), self.gpu_model)
        self._stack: Stack = stacks[kept[0]]
        self._where = {
            id(a): w for a, w in zip(self._actors, ray.get([a.where.remote() for a in self._actors]), strict=True)
        }
        self._busy = dict.fromkeys(map(id, self._actors), 0.0)
        self._count = dict.fromkeys(map(id, self._actors), 0)
        self.actor_deaths = 0
        # The actors free now, shared by every caller (jobs run concurrently by the service): an
        # actor is taken for one candidate and given back, so a GPU never holds two at once.
        self._idle = list(self._actors)
        self._free = threading.Condition()

    def close(self) -> None:
        """Give the GPUs back (the actors clean up and end; the runner is unusable afterwards)."""
        actors, self._actors = self._actors, []
        self._end(actors)
        with self._free:
            self._idle = []
            self._free.notify_all()  # callers waiting for an actor learn there are none

    def _end(self, actors: Sequence[Any]) -> None:
        """Let each actor clean up (its children, its staging folder), then end it; an actor that
        does not answer in time (a candidate still running, an actor that never started) is ended
        as it is, and its folder left to the next actor's sweep."""
        try:
            self._ray.get([a.close.remote() for a in actors], timeout=CLOSE_TIMEOUT_S)
        except self._ray.exceptions.RayError as exc:  # a timeout or a dead actor
            log.warning("GPU runner actor(s) ended without cleaning up: %s", _first_line(exc))
        for a in actors:
            self._ray.kill(a)

    @property
    def num_gpus(self) -> int:
        return len(self._actors)

    def stack(self) -> Stack:
        return self._stack

    def actor_pids(self) -> list[int]:
        """The process of each actor (diagnostics; a restart shows as a new pid)."""
        return list(self._ray.get([a.pid.remote() for a in self._actors]))

    def usage(self) -> list[ActorUsage]:
        """Per actor: where it runs, how many candidates it measured and for how long."""
        usage = []
        for a in self._actors:
            label, node_id, gpu_ids = self._where[id(a)]
            usage.append(ActorUsage(label, node_id, tuple(gpu_ids), self._count[id(a)], self._busy[id(a)]))
        return usage

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        """Each candidate goes to the next free actor (one in flight per actor, so two never
        share a GPU and an actor's death loses one); results come back in input order. Safe to
        call from several threads at once: they share the free actors."""
        results: list[RunResult | None] = [None] * len(batch)
        queue = list(range(len(batch)))
        pending: dict[Any, tuple[int, Any, float]] = {}
        while queue or pending:
            while queue:
                actor = self._take(wait=not pending)
                if actor is None:
                    break
                i = queue.pop(0)
                pending[actor.run_one.remote(batch[i])] = (i, actor, time.monotonic())
            # With candidates still queued, look again for an actor another caller freed.
            done, _ = self._ray.wait(list(pending), num_returns=1, timeout=_POLL_S if queue else None)
            for ref in done:
                i, actor, started = pending.pop(ref)
                try:
                    results[i] = self._collect(ref, actor, [batch[i]])[0]
                    self._busy[id(actor)] += time.monotonic() - started
                    self._count[id(actor)] += 1
                finally:
                    self._give(actor)
        return [r for r in results if r is not None]

    def remeasure(self, batch: Sequence[BuildResult], rounds: int = 5, processes: int = 1) -> list[RunResult]:
        """Time the OK builds of `batch` again, interleaved round by round with cuBLAS in each of
        `processes` measuring processes on one GPU (a free actor's, held for the whole of it), so
        their figures compare and their spread covers rounds and processes; failed builds come
        back as their failures, in order."""
        runnable = [b for b in batch if b.ok and b.artifact is not None]
        measured: Iterator[RunResult] = iter(())
        if runnable:
            actor = self._take(wait=True)
            assert actor is not None
            try:
                measured = iter(self._collect(actor.remeasure.remote(runnable, rounds, processes), actor, runnable))
            finally:
                self._give(actor)
        return [
            next(measured) if b.ok and b.artifact is not None else RunResult.failed(b.candidate, b.outcome, b.message)
            for b in batch
        ]

    def _take(self, wait: bool) -> Any:
        """A free actor, marked taken; None when none is free and `wait` is False."""
        with self._free:
            while not self._idle:
                if not self._actors:
                    raise WorkerError("the GPU runner is closed: it has no actors to measure on")
                if not wait:
                    return None
                self._free.wait()
            return self._idle.pop(0)

    def _give(self, actor: Any) -> None:
        with self._free:
            self._idle.append(actor)
            self._free.notify()

    def _collect(self, future: Any, actor: Any, builds: Sequence[BuildResult]) -> list[RunResult]:
        try:
            result = self._ray.get(future)
            return list(result) if isinstance(result, list) else [result]
        except self._ray.exceptions.RayActorError as exc:
            self.actor_deaths += 1
            log.warning("GPU runner actor died measuring %s: %s", [b.candidate.config.label() for b in builds], exc)
            self._revive(actor)
            self._where[id(actor)] = self._ray.get(actor.where.remote())  # a restart may move it
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


def pool_by_model(stacks: Sequence[Stack], gpu_model: str | None = None) -> tuple[str, list[int]]:
    """(model, indices of `stacks` on that model): `gpu_model`, or the model most GPUs are (ties
    by name). Only same-model GPUs share a runner: their results pool under one Stack."""
    models = Counter(s.gpu_name for s in stacks)
    model = gpu_model or min(models, key=lambda name: (-models[name], name))
    if model not in models:
        raise WorkerError(f"no GPU of model {model!r} in the cluster; found {dict(models)}")
    return model, [i for i, s in enumerate(stacks) if s.gpu_name == model]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
