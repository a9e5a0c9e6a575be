"""TirxBuilder: compiles candidates as parallel Ray CPU tasks into a content-addressed cache.

Each candidate's build lives in `cache_dir / candidate.build_key()`:

    kernel.cu  kernel.so  build.log  build.json

A build is assembled in a private temporary directory and renamed into place only when it
succeeded, so a crash never leaves a half artifact under a valid key; `build.json` is the
completion mark checked on lookup. Only successful builds are cached: a failure (compile error,
timeout) may be transient (a loaded machine, a killed worker) and is cheap to retry.

Each Ray task compiles in a child process (`python -m tirtune.builder.compile_one`) in its own
process group, so a timeout kills nvcc and ptxas too. The caller owns `ray.init`.

A successful build comes back with the module's bytes (`BuildResult.payload`): in a Ray cluster
the builder task may run on another host than the GPU runner, and the bytes, not the path, are
what crosses (the runner stages them on its own disk). The cache is per node; a shared
filesystem is not needed, only saves rebuilding on another node.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from tirtune.builder.compile_one import DEFAULT_TEMPLATE, EXIT_LOWERING, EXIT_NVCC, ROOT_CAUSE_MARK
from tirtune.builder.diagnosis import root_cause
from tirtune.builder.toolchain import tail
from tirtune.core import BuildResult, Candidate, Outcome
from tirtune.core.artifacts import ARTIFACT, BUILD_MARK, entry_name

__all__ = [
    "BUILD_MARK",
    "Compiler",
    "TirxBuilder",
    "compile_and_ship",
    "compile_candidate",
    "failure_message",
    "shipped",
]

logger = logging.getLogger(__name__)

# The checkout root (the folder holding the tirtune package): workers need it on their path
# when tirtune runs from a source tree rather than an installed wheel.
_SOURCE_ROOT = Path(__file__).resolve().parents[2]


def _cache_key(candidate: Candidate, template: str) -> str:
    # Another template (Blackwell's, a test double, an experiment) never shares the default's entries.
    return entry_name(candidate, template, DEFAULT_TEMPLATE)


# compile_candidate's signature: (candidate, cache_dir, timeout_s, template) -> BuildResult.
Compiler = Callable[[Candidate, str, float, str], BuildResult]


def shipped(result: BuildResult) -> BuildResult:
    """`result` carrying its module's bytes, so it can be measured on a host that cannot see
    this one's disk."""
    if not result.ok or result.artifact is None or result.payload is not None:
        return result
    try:
        return replace(result, payload=Path(result.artifact).read_bytes())
    except OSError as exc:  # evicted under us: a failed build the caller may retry, not a crash
        return BuildResult(
            result.candidate, Outcome.COMPILE_ERROR, message=f"built module unreadable on the builder's node: {exc}"
        )


def compile_and_ship(
    candidate: Candidate,
    cache_dir: str,
    timeout_s: float,
    template: str = DEFAULT_TEMPLATE,
    compiler: Compiler | None = None,
) -> BuildResult:
    """What a builder task runs: build (or find) the candidate, then attach the module's bytes."""
    return shipped((compiler or compile_candidate)(candidate, cache_dir, timeout_s, template))


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(_SOURCE_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def _cached(candidate: Candidate, final: Path, seconds: float = 0.0) -> BuildResult | None:
    if (final / BUILD_MARK).exists() and (final / ARTIFACT).exists():
        return BuildResult(candidate, Outcome.OK, artifact=str(final / ARTIFACT), seconds=seconds, cached=True)
    return None


def _run_child(cmd: list[str], timeout_s: float) -> tuple[int | None, str]:
    """Run `cmd` in a new process group; (None, output) if it ran past `timeout_s` and was killed."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_child_env(), start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        # The child leads its own session: killing the group takes nvcc, cicc and ptxas with it.
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return None, output or ""


def compile_candidate(
    candidate: Candidate, cache_dir: str, timeout_s: float, template: str = DEFAULT_TEMPLATE
) -> BuildResult:
    """Build one candidate into the cache (or find it there). Runs inside a Ray task or anywhere."""
    cache = Path(cache_dir)
    final = cache / _cache_key(candidate, template)
    hit = _cached(candidate, final)
    if hit is not None:
        return hit
    cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=cache))
    try:
        cmd = [
            sys.executable,
            "-m",
            "tirtune.builder.compile_one",
            "--config",
            json.dumps(candidate.config.to_json()),
            "--problem",
            json.dumps(candidate.problem.to_json()),
            "--out",
            str(work),
            "--cache-dir",
            str(cache),
            "--template",
            template,
        ]
        code, output = _run_child(cmd, timeout_s)
        seconds = time.perf_counter() - started
        if code is None:
            return BuildResult(
                candidate, Outcome.TIMEOUT, message=f"compile timed out after {timeout_s:g}s", seconds=seconds
            )
        if code != 0 or not (work / BUILD_MARK).exists():
            stage = {EXIT_LOWERING: "lowering", EXIT_NVCC: "nvcc"}.get(code, f"compiler process (exit {code})")
            message = failure_message(stage, output)
            return BuildResult(candidate, Outcome.COMPILE_ERROR, message=message, seconds=seconds)
        return _publish(candidate, work, final, seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def failure_message(stage: str, output: str) -> str:
    """ "<stage> failed: <root cause>" on the first line (what tables and the dashboard show), the
    output's tail below it. The compiler process names the root cause on a marked line, found
    from its whole output; for anything else (a crash) it is looked for in what there is."""
    lines = output.splitlines()
    marked = [line[len(ROOT_CAUSE_MARK) :] for line in lines if line.startswith(ROOT_CAUSE_MARK)]
    rest = "\n".join(line for line in lines if not line.startswith(ROOT_CAUSE_MARK))
    root = marked[0] if marked else root_cause(output)
    return f"{stage} failed: {root}\n{tail(rest)}"


def _publish(candidate: Candidate, work: Path, final: Path, seconds: float) -> BuildResult:
    try:
        os.rename(work, final)  # atomic on one filesystem; fails if the key is already taken
    except OSError:
        hit = _cached(candidate, final, seconds)
        if hit is not None:
            return hit  # another builder published the same key first
        # An incomplete directory under the key (not ours: we only publish whole builds).
        stale = Path(tempfile.mkdtemp(prefix=f".stale-{final.name}-", dir=final.parent))
        os.rename(final, stale / "old")
        shutil.rmtree(stale, ignore_errors=True)
        os.rename(work, final)
    return BuildResult(candidate, Outcome.OK, artifact=str(final / ARTIFACT), seconds=seconds)


class TirxBuilder:
    """Builder over Ray CPU tasks with a content-addressed cache on a (shared) filesystem.

    `template` ("package.module:function") selects the template; tests point it at something
    broken to exercise the failure paths. `max_in_flight` bounds the tasks submitted at once
    (default: settings.builds_in_flight, or the CPUs Ray reports). `compiler` replaces
    `compile_candidate` inside the tasks (tests of the cluster path use a stand-in that needs
    no nvcc; it runs in the Ray workers, so it must be importable there).
    """

    def __init__(
        self,
        cache_dir: Path | str | None = None,
        timeout_s: float | None = None,
        max_in_flight: int | None = None,
        template: str = DEFAULT_TEMPLATE,
        compiler: Compiler | None = None,
    ) -> None:
        from tirtune.settings import get_settings

        settings = get_settings()
        self.cache_dir = Path(cache_dir if cache_dir is not None else settings.cache_dir)
        self.timeout_s = float(timeout_s if timeout_s is not None else settings.build_timeout_s)
        self.max_in_flight = max_in_flight or settings.builds_in_flight or None
        self.template = template
        self.compiler = compiler

    def build(self, batch: Sequence[Candidate]) -> list[BuildResult]:
        results: list[BuildResult | None] = [None] * len(batch)
        misses: list[int] = []
        for i, candidate in enumerate(batch):
            hit = _cached(candidate, self.cache_dir / _cache_key(candidate, self.template))
            hit = None if hit is None else shipped(hit)
            if hit is not None and hit.ok:
                results[i] = hit
            else:
                misses.append(i)
        if misses:
            self._compile(batch, misses, results)
        logger.info("built %d candidates (%d from cache)", len(batch), len(batch) - len(misses))
        return [r for r in results if r is not None]

    def _compile(self, batch: Sequence[Candidate], misses: list[int], results: list[BuildResult | None]) -> None:
        import ray

        task = _remote_compile().options(runtime_env=_runtime_env())
        limit = self.max_in_flight or max(1, int(cast(Any, ray).available_resources().get("CPU", 1)))
        pending: dict[Any, int] = {}
        queue = list(misses)
        while queue or pending:
            while queue and len(pending) < limit:
                i = queue.pop(0)
                ref = task.remote(batch[i], str(self.cache_dir), self.timeout_s, self.template, self.compiler)
                pending[ref] = i
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i = pending.pop(ref)
                results[i] = self._collect(batch[i], ref)

    @staticmethod
    def _collect(candidate: Candidate, ref: Any) -> BuildResult:
        import ray

        try:
            result: BuildResult = ray.get(ref)
            return result
        except ray.exceptions.RayError as exc:
            # A dead worker or a task error is the infrastructure's fault, but the candidate
            # still gets a result; the message says it was not the kernel.
            logger.warning("build task for %s failed: %s", candidate.config.label(), exc)
            return BuildResult(candidate, Outcome.COMPILE_ERROR, message=f"build task failed: {tail(str(exc))}")


_REMOTE: Any = None


def _remote_compile() -> Any:
    """The Ray remote wrapper, made once and lazily so importing this module needs no Ray."""
    global _REMOTE
    if _REMOTE is None:
        import ray

        # max_retries=0: a compile that crashed its worker would most likely crash it again.
        _REMOTE = ray.remote(num_cpus=1, max_retries=0)(compile_and_ship)
    return _REMOTE


def _runtime_env() -> dict[str, Any]:
    """Put the checkout on the workers' PYTHONPATH when tirtune is not installed there."""
    if "site-packages" in _SOURCE_ROOT.parts or "dist-packages" in _SOURCE_ROOT.parts:
        return {}
    existing = os.environ.get("PYTHONPATH", "")
    paths = [str(_SOURCE_ROOT), *filter(None, existing.split(os.pathsep))]
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}}
