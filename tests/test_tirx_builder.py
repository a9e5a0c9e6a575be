"""TirxBuilder against a real local Ray: cache hits, compile errors and timeouts are results."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from contracts import mismatches

from tirtune.builder.builder import Builder
from tirtune.builder.tirx_builder import BUILD_MARK, TirxBuilder
from tirtune.core import Candidate, Outcome
from tirtune.core.artifacts import DIGEST_FIELD, sha256_hex
from tirtune.space import TEMPLATE_VERSION, Problem
from tirtune.space.hopper.knobs import config as hopper_config

ray = pytest.importorskip("ray")

SIMPLE = Candidate(hopper_config(blk_m=64, blk_n=64, blk_k=64, stages=2, consumers=1, warp_specialized=False),
                   Problem(256, 128, 64, "float16"), TEMPLATE_VERSION)
OTHER = Candidate(SIMPLE.config, Problem(128, 256, 64, "float16"), TEMPLATE_VERSION)
# Our own seam: a "template" that returns a KernelPlan instead of a PrimFunc, so lowering fails.
BROKEN_TEMPLATE = "tirtune.kernels.hopper:plan"


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_is_a_builder_and_an_empty_batch_builds_nothing(tmp_path: Path) -> None:
    assert mismatches(TirxBuilder, Builder) == []  # by signature (see tests/contracts.py)
    assert TirxBuilder(cache_dir=tmp_path).build([]) == []
    assert not any(tmp_path.iterdir())  # and touches no cache


@pytest.mark.nvcc
def test_second_build_is_a_cache_hit(tmp_path: Path) -> None:
    builder = TirxBuilder(cache_dir=tmp_path, timeout_s=600)
    first = builder.build([SIMPLE])
    assert [r.outcome for r in first] == [Outcome.OK], first[0].message
    assert not first[0].cached and first[0].seconds > 0
    artifact = Path(first[0].artifact or "")
    assert artifact.name == "kernel.so" and artifact.parent.name == SIMPLE.build_key()
    assert {"kernel.cu", "kernel.so", "build.log", BUILD_MARK} <= {p.name for p in artifact.parent.iterdir()}
    # the digest loaders and GET /kernels check the module against
    assert json.loads((artifact.parent / BUILD_MARK).read_text())[DIGEST_FIELD] == sha256_hex(artifact.read_bytes())
    stamp = artifact.stat().st_mtime_ns

    again = builder.build([SIMPLE])
    assert again[0].outcome is Outcome.OK and again[0].cached
    assert again[0].artifact == first[0].artifact
    assert artifact.stat().st_mtime_ns == stamp  # not rebuilt
    # No temporary build directories are left behind.
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.nvcc
def test_incomplete_cache_entry_is_rebuilt(tmp_path: Path) -> None:
    half = tmp_path / OTHER.build_key()
    half.mkdir()
    (half / "kernel.so").write_bytes(b"truncated")  # no build.json: not a finished build
    [result] = TirxBuilder(cache_dir=tmp_path, timeout_s=600).build([OTHER])
    assert result.outcome is Outcome.OK and not result.cached, result.message
    assert (half / BUILD_MARK).exists() and (half / "kernel.so").stat().st_size > 100_000


def test_compile_error_is_a_result_with_the_cause(tmp_path: Path) -> None:
    builder = TirxBuilder(cache_dir=tmp_path, timeout_s=300, template=BROKEN_TEMPLATE)
    results = builder.build([SIMPLE, OTHER])
    assert [r.outcome for r in results] == [Outcome.COMPILE_ERROR] * 2
    assert [r.candidate for r in results] == [SIMPLE, OTHER]  # input order
    # The message names the stage and keeps the cause (TVM refusing a non-PrimFunc module).
    assert all("lowering failed" in r.message and "IRModule" in r.message for r in results)
    assert all(r.artifact is None for r in results)
    assert not any(p.is_dir() and not p.name.startswith("libcuda") for p in tmp_path.iterdir())


def test_timeout_kills_the_compile(tmp_path: Path) -> None:
    builder = TirxBuilder(cache_dir=tmp_path, timeout_s=0.5)
    [result] = builder.build([SIMPLE])
    assert result.outcome is Outcome.TIMEOUT
    assert result.message == "compile timed out after 0.5s"
    assert result.seconds < 30
    assert not (tmp_path / SIMPLE.build_key()).exists()


def test_workers_can_import_tirtune_from_a_checkout() -> None:
    # The builder must work when tirtune is not installed: the runtime env carries the path.
    from tirtune.builder.tirx_builder import _runtime_env

    env = _runtime_env()
    if env:
        assert os.path.isdir(env["env_vars"]["PYTHONPATH"].split(os.pathsep)[0] + "/tirtune")
