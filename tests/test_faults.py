"""Fault injection without a GPU: the test-only faulty kernels build as intended, and the
builder turns a ptxas failure, a hung compile and a killed build worker into results.

The GPU half (deadlock, out-of-bounds write, wrong result, too much shared memory, measured in
a study of good configs) is bench/fault_study.py, run on the H200.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.faults import kernels
from tirtune.builder import toolchain
from tirtune.builder.tirx_builder import TirxBuilder
from tirtune.core import Candidate, Outcome
from tirtune.space import HOPPER, TEMPLATE_VERSION, Problem
from tirtune.space.hopper.knobs import config as hopper_config

ray = pytest.importorskip("ray")

P = Problem(4096, 4096, 4096, "float16")
TINY = Candidate(hopper_config(blk_m=64, blk_n=64, blk_k=64, stages=2, consumers=1, warp_specialized=False),
                 Problem(128, 128, 64, "float16"), TEMPLATE_VERSION)
ONLY_LOWERED = [k for k in kernels.FAULTS if k != "ptxas_error"]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("kind", sorted(kernels.FAULTS))
def test_each_fault_is_one_edit_of_the_real_kernel(kind: str) -> None:
    fault = kernels.FAULTS[kind]
    sources = kernels.patched_sources(kind)
    real = {path.name: path.read_text() for path in kernels.PACKAGE.glob("*.py")}
    assert sources.keys() == real.keys() and "kernel.py" in real
    edited = {name for name in real if sources[name] != real[name]}
    assert edited == {module for module, _, _ in fault.edits}
    assert all(new in sources[module] for module, _, new in fault.edits)


def test_faults_stay_out_of_the_product_space() -> None:
    assert HOPPER.template_version == TEMPLATE_VERSION
    smem = kernels.FAULTS["smem_overflow"].config
    assert not HOPPER.is_valid(smem, P), "the product's rules refuse what this fault builds"
    assert all(HOPPER.is_valid(f.config, P) for k, f in kernels.FAULTS.items() if k != "smem_overflow")


@pytest.mark.parametrize("kind", ONLY_LOWERED)
def test_faulty_kernels_lower_to_cuda(kind: str) -> None:
    fault = kernels.FAULTS[kind]
    source = toolchain.lower_to_cuda(fault.config, P, getattr(kernels, kind))
    assert "main_kernel" in source
    if kind == "out_of_bounds":
        assert "+ 524288)])" in source  # blk_m=128 rows x N=4096: one tile further down


@pytest.mark.nvcc
def test_a_ptxas_failure_is_a_compile_error_with_the_assembler_message(tmp_path: Path, local_ray: None) -> None:
    builder = TirxBuilder(cache_dir=tmp_path, timeout_s=600, template="bench.faults.kernels:ptxas_error")
    [result] = builder.build([TINY])
    assert result.outcome is Outcome.COMPILE_ERROR
    assert result.message.startswith("nvcc failed") and "ptxas" in result.message
    assert "no_such_instruction" in result.message
    # The first line is the root cause, not the head of the log.
    first_line = result.message.splitlines()[0]
    assert first_line.startswith("nvcc failed: ptxas: Unknown modifier '.no_such_instruction' (PTX line ")


def test_a_hung_compile_is_killed_as_a_timeout(tmp_path: Path, local_ray: None) -> None:
    builder = TirxBuilder(cache_dir=tmp_path, timeout_s=5, template="bench.faults.kernels:hang_lowering")
    [result] = builder.build([TINY])
    assert result.outcome is Outcome.TIMEOUT and result.seconds < 60


def test_a_killed_build_worker_is_a_result_and_the_builder_goes_on(tmp_path: Path, local_ray: None) -> None:
    killer = TirxBuilder(cache_dir=tmp_path, timeout_s=120, template="bench.faults.kernels:kill_build_worker")
    [result] = killer.build([TINY])
    assert result.outcome is Outcome.COMPILE_ERROR
    assert "build task failed" in result.message
    broken = TirxBuilder(cache_dir=tmp_path, timeout_s=120, template="tirtune.kernels.hopper:plan")
    [after] = broken.build([TINY])  # Ray replaced the worker: the next compile runs (and fails on its own)
    assert after.outcome is Outcome.COMPILE_ERROR and "lowering failed" in after.message
