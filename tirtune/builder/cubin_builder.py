"""CubinBuilder: device code only, several kernels per nvcc call, persistent lowering processes.

The device-only build path, the default (`TIRTUNE_BUILD_PATH=cubin`; TirxBuilder's `.so` path with
`so`; on the H200 both give bitwise the same outputs, bench/results/builds/2026-11-30-build-paths.md): a
`LoweringPool` lowers the misses (TVM imported once per process, a hung lowering killed),
`device_build.compile_batch` compiles them `batch` per
`nvcc -cubin` (failed or hung batches split), and each build lands in the same kind of
content-addressed cache entry as the `.so` path's, under its own key suffix:

    kernel.cu  kernel.cubin  launch.json  kernel.tlaunch  build.json

`kernel.tlaunch` is the artifact: the LaunchSpec and the cubin in one JSON file (base64), so the
shipped bytes (`BuildResult.payload`) are all a runner on another host needs;
`tirtune.runner.launcher.load_bundle` turns them into a callable kernel (the format is
`tirtune.core.launch`'s `bundle`). Like TirxBuilder, only successes are cached, and an entry is
published by renaming a complete directory.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tirtune.builder.build_pool import Lowered, LoweringPool
from tirtune.builder.compile_one import DEFAULT_TEMPLATE
from tirtune.builder.device_build import BatchItem, ItemResult, compile_batch
from tirtune.builder.tirx_builder import BUILD_MARK, _cache_key, shipped
from tirtune.core import BuildResult, Candidate, Outcome
from tirtune.core.artifacts import CUBIN_ARTIFACT, CUBIN_SUFFIX, DIGEST_FIELD, sha256_hex
from tirtune.core.launch import bundle

__all__ = ["ARTIFACT", "RUNNER_CORES", "CubinBuilder", "batch_size", "build_processes"]

logger = logging.getLogger(__name__)

ARTIFACT = CUBIN_ARTIFACT


class CubinBuilder:
    """Builder (`build(batch) -> [BuildResult]`) over a persistent lowering pool and batched nvcc.

    `processes` lowering processes (default: settings.builds_in_flight or the CPU count; the
    service passes `build_processes`, which leaves cores to its GPUs' runners) live as
    long as the builder; `close()` ends them. `batch`: at most this many kernels per nvcc call;
    the nvcc calls of a build run `processes` at a time (`batch_size`), each as soon as its
    kernels are lowered."""

    def __init__(
        self,
        cache_dir: Path | str | None = None,
        timeout_s: float | None = None,
        processes: int | None = None,
        batch: int = 6,
        template: str = DEFAULT_TEMPLATE,
        warm: bool = False,
    ) -> None:
        """`warm`: start the lowering processes now, in the background (each imports TVM for
        seconds), so they are ready by the first build instead of starting inside it."""
        from tirtune.settings import get_settings

        settings = get_settings()
        self.cache_dir = Path(cache_dir if cache_dir is not None else settings.cache_dir)
        self.timeout_s = float(timeout_s if timeout_s is not None else settings.build_timeout_s)
        self.processes = processes or settings.builds_in_flight or os.cpu_count() or 1
        self.batch = max(1, batch)
        self.template = template
        self._pool: LoweringPool | None = None
        self._lock = threading.Lock()  # jobs run at once share the pool: one build at a time uses it
        self._pool_lock = threading.Lock()
        self._closed = False
        self._warming: threading.Thread | None = None
        if warm:
            self._warming = threading.Thread(target=self._warm, name="tirtune-lowering-warm", daemon=True)
            self._warming.start()

    def _key(self, candidate: Candidate) -> Path:
        return self.cache_dir / (_cache_key(candidate, self.template) + CUBIN_SUFFIX)

    def build(self, batch: Sequence[Candidate]) -> list[BuildResult]:
        results: list[BuildResult | None] = [None] * len(batch)
        misses = []
        for i, candidate in enumerate(batch):
            hit = _cached(candidate, self._key(candidate))
            if hit is not None:
                results[i] = shipped(hit)
            else:
                misses.append(i)
        if misses:
            with self._lock:
                built_now = self._build([batch[i] for i in misses])
            for i, built in zip(misses, built_now, strict=True):
                results[i] = shipped(built)
        logger.info("built %d candidates (%d from cache)", len(batch), len(batch) - len(misses))
        return [r for r in results if r is not None]

    def _lowering_pool(self, warming: bool = False) -> LoweringPool | None:
        """The pool, started if it is not; None only when warming a builder already closed."""
        with self._pool_lock:
            if self._pool is None and not (warming and self._closed):
                self._pool = LoweringPool(self.processes, self.timeout_s, self.template)
            return self._pool

    def _warm(self) -> None:
        try:
            self._lowering_pool(warming=True)
        except Exception as exc:  # the first build starts the pool again and reports the failure
            logger.warning("warming the lowering processes failed: %s", exc)

    def _build(self, candidates: list[Candidate]) -> list[BuildResult]:
        """Lower `candidates` in the pool and compile them as they arrive: a chunk of
        `batch_size` lowered kernels goes to nvcc at once (`processes` nvcc calls at a time) while
        the others still lower, so a build's wall time is not all lowering then all nvcc."""
        started = time.perf_counter()
        size = batch_size(len(candidates), self.processes, self.batch)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".tmp-cubin-batch-", dir=self.cache_dir))
        items: dict[int, BatchItem] = {}
        compiled: dict[int, ItemResult] = {}
        pending: list[int] = []
        try:
            with ThreadPoolExecutor(max(1, self.processes)) as nvcc:
                calls: list[Future[None]] = []

                nvcc_s: list[float] = []

                def compile_chunk(n: int, chunk: list[int]) -> None:
                    began = time.perf_counter()
                    results = compile_batch([items[i] for i in chunk], work / f"b{n}", timeout_s=self.timeout_s)
                    compiled.update(zip(chunk, results, strict=True))
                    nvcc_s.append(time.perf_counter() - began)

                def flush() -> None:
                    calls.append(nvcc.submit(compile_chunk, len(calls), list(pending)))
                    pending.clear()

                def arrived(i: int, low: Lowered) -> None:
                    if low.outcome is Outcome.OK and low.spec is not None:
                        items[i] = BatchItem(low.source, low.spec.kernel, f"tirtune_{low.candidate.build_key()}")
                        pending.append(i)
                        if len(pending) >= size:
                            flush()

                pool = self._lowering_pool()
                assert pool is not None
                lowered = pool.lower(candidates, on_result=arrived)
                lowered_s = time.perf_counter() - started
                if pending:
                    flush()
                for call in calls:
                    call.result()
            # Where a build's wall time goes (the first batch of a cold study waits on all of it).
            logger.info(
                "built %d: %.1f s wall; lowered in %.1f s (slowest %.1f s); %d nvcc calls (slowest %.1f s)",
                len(candidates),
                time.perf_counter() - started,
                lowered_s,
                max((low.seconds for low in lowered), default=0.0),
                len(nvcc_s),
                max(nvcc_s, default=0.0),
            )
            return [self._result(low, compiled.get(i), time.perf_counter() - started) for i, low in enumerate(lowered)]
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _result(self, low: Lowered, item: ItemResult | None, seconds: float) -> BuildResult:
        candidate = low.candidate
        if low.outcome is not Outcome.OK or low.spec is None:
            return BuildResult(candidate, low.outcome, message=low.message, seconds=seconds)
        assert item is not None
        if item.error is not None or item.cubin is None:
            outcome = Outcome.TIMEOUT if item.timed_out else Outcome.COMPILE_ERROR
            message = f"nvcc failed: {item.error.root}\n{item.error}" if item.error else "nvcc failed"
            return BuildResult(candidate, outcome, message=message, seconds=seconds)
        return self._publish(candidate, low, item, seconds)

    def _publish(self, candidate: Candidate, low: Lowered, item: ItemResult, seconds: float) -> BuildResult:
        assert low.spec is not None and item.cubin is not None
        final = self._key(candidate)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=self.cache_dir))
        spec = low.spec.renamed(item.item.symbol)
        cubin = item.cubin.read_bytes()
        (tmp / "kernel.cu").write_text(low.source)
        (tmp / "kernel.cubin").write_bytes(cubin)
        (tmp / "launch.json").write_text(spec.dumps())
        artifact = bundle(spec, cubin)
        (tmp / ARTIFACT).write_bytes(artifact)
        record: dict[str, Any] = {
            DIGEST_FIELD: sha256_hex(artifact),
            "config": candidate.config.to_json(),
            "problem": candidate.problem.to_json(),
            "template": self.template,
            "path": "cubin",
            "batch_size": item.batch_size,
            "lower_cpu_s": round(low.cpu_s, 3),
            "nvcc_s_share": round(item.seconds, 3),
            "ptxas": item.resources.to_json() if item.resources else None,
        }
        (tmp / BUILD_MARK).write_text(json.dumps(record, indent=1, sort_keys=True))
        try:
            os.rename(tmp, final)
        except OSError:  # published by another builder first, or a stale incomplete entry
            hit = _cached(candidate, final)
            if hit is not None:
                shutil.rmtree(tmp, ignore_errors=True)
                return hit
            shutil.rmtree(final, ignore_errors=True)
            os.rename(tmp, final)
        return BuildResult(candidate, Outcome.OK, artifact=str(final / ARTIFACT), seconds=seconds)

    def close(self) -> None:
        with self._pool_lock:  # a pool still warming is waited for, then closed
            self._closed = True
            if self._pool is not None:
                self._pool.close()
                self._pool = None


# Cores left to each GPU of this machine: its runner actor and measuring child time kernels with
# CUDA events, and their host side (loading a cubin, launching, checking) slows when every core
# lowers or runs nvcc. Measured on the 16-core H200 host (bench/results/scaling/2026-12-01-cold-study-16cores.md):
# a cold 64-trial 4096^3 study with 16 build processes 45.3, 55.1, 58.7 s wall (0.49-0.63 GPU s a
# candidate), with 14 40.4 and 38.0 s (0.44, 0.41).
RUNNER_CORES = 2


def build_processes(cpus: int, local_gpus: int) -> int:
    """Lowering processes for a machine of `cpus` cores that also measures on `local_gpus` GPUs:
    the cores less RUNNER_CORES a GPU, at least one."""
    return max(1, cpus - RUNNER_CORES * max(0, local_gpus))


def batch_size(kernels: int, processes: int, batch: int) -> int:
    """Kernels per nvcc call: at most `batch`, and few enough that `kernels` make at least
    `processes` calls when there are that many: one kernel alone costs ~1.7 CPU s of nvcc and six
    together ~0.7 s each, so kernels share a call only as far as that still leaves every core one."""
    return max(1, min(batch, -(-kernels // max(1, processes))))


def _cached(candidate: Candidate, final: Path) -> BuildResult | None:
    if (final / BUILD_MARK).exists() and (final / ARTIFACT).exists():
        return BuildResult(candidate, Outcome.OK, artifact=str(final / ARTIFACT), cached=True)
    return None
