"""CubinBuilder end to end on CPU: lowered in a persistent process, compiled in one nvcc batch,
published in the cache as a self-contained artifact (launch spec + cubin), found there again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tirtune.builder import toolchain
from tirtune.builder.cubin_builder import ARTIFACT, CubinBuilder
from tirtune.core import Candidate, Outcome, Problem
from tirtune.core.artifacts import BUILD_MARK, DIGEST_FIELD, sha256_hex
from tirtune.core.launch import unbundle
from tirtune.space import TEMPLATE_VERSION
from tirtune.space.hopper.knobs import config as hopper_config


@pytest.mark.nvcc
def test_builds_a_batch_and_serves_it_from_the_cache(tmp_path: Path) -> None:
    batch = [
        Candidate(hopper_config(128, 128, 64, 4, 2, True, persistent=True, raster_group=8, epilogue="tma", cluster=2),
                  Problem(1000, 1024, 200, "float16"), TEMPLATE_VERSION),
        Candidate(hopper_config(128, 128, 64, 4, 2, True), Problem(1000, 1000, 1000, "bfloat16"), TEMPLATE_VERSION),
    ]
    builder = CubinBuilder(cache_dir=tmp_path, timeout_s=300, processes=1, batch=4)
    try:
        first = builder.build(batch)
        assert [r.outcome for r in first] == [Outcome.OK, Outcome.OK]
        for result in first:
            assert result.artifact is not None and result.artifact.endswith(ARTIFACT)
            spec, cubin = unbundle(result.payload or b"")
            assert spec.kernel == "tirtune_" + result.candidate.build_key()
            # Checked by GET /kernels and tirtune.gemm like a .so: the bundle's digest is recorded.
            record = json.loads((Path(result.artifact).parent / BUILD_MARK).read_text())
            assert record[DIGEST_FIELD] == sha256_hex(Path(result.artifact).read_bytes())
            # One nvcc call built both: each artifact's cubin holds its own entry and its neighbour's.
            sass = toolchain.sass(Path(result.artifact).with_name("kernel.cubin"))
            assert sass.count("Function : tirtune_") == 2 and f"Function : {spec.kernel}" in sass
        assert unbundle(first[0].payload or b"")[0].cluster == (2, 1, 1)
        again = builder.build(batch)
        assert all(r.cached and r.ok and r.payload == f.payload for r, f in zip(again, first, strict=True))
    finally:
        builder.close()


@pytest.mark.parametrize(
    ("kernels", "processes", "batch", "size"),
    [
        (16, 16, 6, 1),  # a 16-core host, 16 misses: one nvcc each, all at once
        (32, 16, 6, 2),
        (100, 4, 6, 6),  # few cores: full batches
        (7, 2, 6, 4),
        (2, 1, 4, 2),
        (1, 8, 6, 1),
    ],
)
def test_nvcc_calls_fill_the_cores_before_they_batch(kernels: int, processes: int, batch: int, size: int) -> None:
    from tirtune.builder.cubin_builder import batch_size

    assert batch_size(kernels, processes, batch) == size


@pytest.mark.parametrize(
    ("cpus", "gpus", "processes"),
    [
        (16, 1, 14),  # one H200 host: two cores left to its runner (scaling/2026-12-01-cold-study-16cores.md)
        (32, 2, 28),
        (2, 0, 2),  # a machine that only builds keeps every core
        (2, 1, 1),  # never none
        (4, 8, 1),
    ],
)
def test_the_builders_leave_each_local_gpu_its_runners_cores(cpus: int, gpus: int, processes: int) -> None:
    from tirtune.builder.cubin_builder import build_processes

    assert build_processes(cpus, gpus) == processes


def test_a_warm_builder_starts_its_lowering_processes_before_the_first_build(tmp_path: Path) -> None:
    """The service makes it while the GPU actors start: its processes import TVM meanwhile; closed
    while still warming, it waits for them and ends them (no child left behind)."""
    import time

    builder = CubinBuilder(cache_dir=tmp_path, processes=1, warm=True)
    deadline = time.monotonic() + 120
    while builder._pool is None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    pids = builder._pool.pids()
    builder.close()
    assert pids and builder._pool is None
    for pause in (0.0, 0.2):  # closed before the warming thread runs, and while it imports TVM
        quick = CubinBuilder(cache_dir=tmp_path, processes=1, warm=True)
        time.sleep(pause)
        quick.close()
        assert quick._warming is not None
        quick._warming.join(120)
        assert quick._pool is None  # the warming thread left no pool behind
