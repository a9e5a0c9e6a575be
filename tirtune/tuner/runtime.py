"""Wiring: Ray, the builder and the runner chosen by settings. The one place that starts Ray."""

from __future__ import annotations

import logging
import os
import secrets
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tirtune.builder.builder import Builder
from tirtune.runner.runner import Runner
from tirtune.settings import Settings
from tirtune.space.branches import BRANCHES, DEFAULT_ARCH, branch, branch_for_gpu
from tirtune.space.errors import SpaceError
from tirtune.space.hopper import space_for
from tirtune.space.space import SearchSpace
from tirtune.tuner.errors import TunerError
from tirtune.tuner.processes import descendants, multiprocessing_helpers, terminate
from tirtune.tuner.signals import action_kept

__all__ = [
    "SERVICE_REPLAY_HINT",
    "TUNE_REPLAY_HINT",
    "Workers",
    "check_local_gpus",
    "make_workers",
    "no_gpu_reason",
    "replay_space",
    "start_ray",
    "stop_ray",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Workers:
    builder: Builder
    runner: Runner
    batch_size: int
    # The space jobs search with these workers: the current template's, or for a replay the
    # space of the template version the measurements were recorded with.
    space: SearchSpace = BRANCHES[DEFAULT_ARCH].space

    def close(self) -> None:
        """End what the builder and runner hold (lowering processes; GPU actors, each removing its
        staging folder); a part without a `close` holds nothing."""
        for part in (self.runner, self.builder):
            close = getattr(part, "close", None)
            if close is not None:
                close()


# Ray's local processes die with the *thread* that started them (PR_SET_PDEATHSIG), so ray.init
# runs in a thread of its own that lives until stop_ray: a service thread that ends, or a request
# thread, must not take the GCS and raylet with it (the agents then lingered about a minute).
_lock = threading.Lock()
_keeper: threading.Thread | None = None
_release = threading.Event()
# The workers make_workers put on that Ray: stop_ray closes them first, since Ray stopping under
# them kills their actors with no chance to clean up.
_on_ray: list[Workers] = []


def start_ray(settings: Settings) -> int:
    """Join the configured cluster or start a local Ray; return the CPUs builds may use."""
    if not settings.ray_address:
        _own_ray_token(settings.ray_token_file)
    import ray

    global _keeper
    with _lock:
        if not ray.is_initialized():
            _keeper = _init_in_keeper_thread(settings)
    return max(1, int(cast(Any, ray).cluster_resources().get("CPU", 1)))


def local_gpus() -> int:
    """GPUs Ray has on this machine (whose runners share its cores with the builders here)."""
    import ray

    here = cast(Any, ray).util.get_node_ip_address()
    return int(
        sum(
            node["Resources"].get("GPU", 0)
            for node in cast(Any, ray).nodes()
            if node.get("Alive") and node.get("NodeManagerAddress") == here
        )
    )


def _init_in_keeper_thread(settings: Settings) -> threading.Thread:
    import ray

    failed: list[BaseException] = []
    ready = threading.Event()

    def keep() -> None:
        try:
            # Ray's crash handler would take SIGTERM too and print a stack dump before the
            # caller's handler (uvicorn's, tirtune worker's, the default) runs: SIGTERM keeps its own.
            with action_kept(signal.SIGTERM):
                ray.init(
                    # "local": a new Ray of this process, as the setting says. With None, Ray joins
                    # the last cluster `ray start` made on this machine (whoever started it).
                    address=settings.ray_address or "local",
                    num_cpus=None if settings.ray_address else settings.ray_num_cpus,
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                )
        except BaseException as e:  # handed to the caller of start_ray
            failed.append(e)
            return
        finally:
            ready.set()
        _release.wait()

    _release.clear()
    keeper = threading.Thread(target=keep, name="tirtune-ray", daemon=True)
    keeper.start()
    ready.wait()
    if failed:
        raise failed[0]
    return keeper


def _own_ray_token(path: Path) -> None:
    """Token authentication for a new local Ray with a token of tirtune's (`path`, made once, mode
    0600) unless the environment names one or turns authentication off: left to itself, Ray 2.60
    writes ~/.ray/auth_token, readable by everyone, and warns. Set in os.environ, so that the Ray
    processes started from here get it too; Ray reads the mode when it is imported, so a Ray
    imported already re-reads its configuration (as Ray does when it turns the mode on itself)."""
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token":
        return
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(secrets.token_hex(32))
        partial.chmod(0o600)
        partial.replace(path)  # two first runs at once: one token wins, both read a whole one
    os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)})
    if "ray" in sys.modules:
        import ray._raylet

        cast(Any, ray._raylet).Config.initialize("")


def stop_ray(grace_s: float = 3.0) -> None:
    """Shut down the Ray `start_ray` started (or leave the cluster it joined), its agents included.

    `ray.shutdown()` stops the raylet, the GCS and the rest it started, but the raylet's own
    children (the dashboard and runtime-env agents) only notice later, so the processes below this
    one are listed first and whichever of them outlives the shutdown gets SIGTERM, then SIGKILL.
    The workers `make_workers` made on it are closed before."""
    global _keeper
    with _lock:
        made, _on_ray[:] = list(_on_ray), []
        for workers in made:
            workers.close()
        if _keeper is None:
            return  # not ours: a caller that did its own ray.init also shuts it down
        import ray

        started = descendants(os.getpid())
        for pid in multiprocessing_helpers(started):  # ours, not Ray's: their owners end them
            del started[pid]
        ray.shutdown()
        _release.set()
        _keeper.join(grace_s)
        _keeper = None
    left = terminate(started, grace_s)
    if left:
        log.warning("Ray processes still running after SIGKILL: %s", sorted(left))


# What to do without a GPU, said the way each command takes a replay.
SERVICE_REPLAY_HINT = "set TIRTUNE_REPLAY=bench/data to run jobs against recorded measurements"
TUNE_REPLAY_HINT = "use --replay bench/data to tune against recorded measurements"


def no_gpu_reason(settings: Settings) -> str | None:
    """Why a local Ray would have no GPU to measure on (the driver's answer, in milliseconds);
    None when this machine has one, or when TIRTUNE_RAY_ADDRESS names a cluster, whose GPUs may
    be other hosts' (only Ray can tell)."""
    if settings.ray_address:
        return None
    from tirtune.runner.gpu_probe import visible_gpus

    found = visible_gpus()
    return None if found.count else found.reason


def check_local_gpus(settings: Settings, no_gpu_hint: str = SERVICE_REPLAY_HINT) -> None:
    """TunerError, before Ray starts, when a local Ray would have no GPU to measure on."""
    reason = no_gpu_reason(settings)
    if reason is not None:
        raise TunerError(f"{reason}. tirtune measures on an NVIDIA Hopper GPU; without one, {no_gpu_hint}")


def make_workers(
    settings: Settings, *, replay: str | Path | None = None, no_gpu_hint: str = SERVICE_REPLAY_HINT
) -> Workers:
    """GPU runner + TIRx builder on Ray, or the replay pair when `replay` (or the setting
    TIRTUNE_REPLAY) names recorded data; a replay searches the space of the recorded template
    version (replaying hopper-gemm/1 data proposes hopper-gemm/1 configs), cut down to the
    recorded configs (a sample of the space replays only what was measured): a problem with no
    recording breaks its rule `recorded`. `no_gpu_hint` ends the error when there is no GPU."""
    replay = replay if replay is not None else settings.replay
    if replay is not None:
        from tirtune.runner.replay_runner import ReplayBuilder, ReplayRunner

        recorded = ReplayRunner([replay], delay_s=settings.replay_delay_s)
        space = recorded.restrict(space_for(recorded.template_version))
        return Workers(ReplayBuilder(), recorded, batch_size=4, space=space)
    check_local_gpus(settings, no_gpu_hint)
    cpus = start_ray(settings)
    from tirtune.builder.tirx_builder import TirxBuilder
    from tirtune.runner.errors import WorkerError
    from tirtune.runner.gpu_runner import GpuRunner
    from tirtune.space.branches import DEFAULT_ARCH

    builder: Any = None
    processes = cpus
    if settings.build_path == "cubin":
        from tirtune.builder.cubin_builder import CubinBuilder, build_processes

        # This machine's cores, less those its GPUs' runners need while they time kernels.
        processes = settings.builds_in_flight or build_processes(os.cpu_count() or 1, local_gpus())

        def cubin_builder(template: str) -> Any:
            return CubinBuilder(
                cache_dir=settings.cache_dir,
                timeout_s=settings.build_timeout_s,
                template=template,
                processes=processes,
                warm=True,
            )

        # Its lowering processes import TVM while the GPU actors start (seconds each).
        builder = cubin_builder(branch(DEFAULT_ARCH).template)
    try:
        runner = GpuRunner(
            num_gpus=settings.gpus or None, run_timeout_s=settings.run_timeout_s, gpu_model=settings.gpu_model
        )
    except WorkerError as exc:
        if builder is not None:
            builder.close()
        raise TunerError(f"{exc}. tirtune measures on an NVIDIA Hopper GPU; without one, {no_gpu_hint}") from exc
    space = _space_of(runner)
    template = branch(space.arch).template
    if builder is not None and builder.template != template:  # GPUs of another branch than the default
        builder.close()
        builder = cubin_builder(template)
    if builder is None:
        builder = TirxBuilder(cache_dir=settings.cache_dir, timeout_s=settings.build_timeout_s, template=template)
    log.info(
        "measuring on %d %s GPU(s): %s", runner.num_gpus, runner.gpu_model, ", ".join(u.label for u in runner.usage())
    )
    # Enough candidates per batch that every GPU has work while the next batch builds.
    workers = Workers(
        builder, runner, batch_size=settings.builds_in_flight or max(processes, 4 * runner.num_gpus), space=space
    )
    with _lock:
        _on_ray.append(workers)
    return workers


def replay_space(settings: Settings) -> SearchSpace | None:
    """When the service measures with recorded data (TIRTUNE_REPLAY), the space its replay can
    search: the CLI hands it to the API (`create_app(replay_space=...)`), whose POST /tune refuses
    a problem with no recording up front instead of queueing a job that cannot run. None without
    TIRTUNE_REPLAY; WorkerError naming the path (and line) when the recording cannot be read."""
    if settings.replay is None:
        return None
    from tirtune.runner.replay_runner import ReplayRunner

    recorded = ReplayRunner([settings.replay])
    return recorded.restrict(space_for(recorded.template_version))


def _space_of(runner: Runner) -> SearchSpace:
    """The template branch for the runner's GPUs (the registry's: Hopper for 9.x, Blackwell for
    10.0, whose results are then its own: a branch so far only compile-checked is measured only on
    its GPU); the default branch for a runner that cannot tell (replays of old data)."""
    capability = runner.stack().compute_capability
    if not capability:
        return BRANCHES[DEFAULT_ARCH].space
    try:
        return branch_for_gpu(capability).space
    except SpaceError as exc:
        raise TunerError(str(exc)) from exc
