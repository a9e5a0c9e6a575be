"""The persistent lowering pool: TVM imported once per process, and a hung or dying lowering is
killed or replaced without failing its neighbours (lowering only, no nvcc)."""

from __future__ import annotations

import pytest

from tirtune.builder.build_pool import LoweringPool
from tirtune.core import Candidate, Outcome, Problem
from tirtune.space import TEMPLATE_VERSION
from tirtune.space.hopper.knobs import config as hopper_config

PROBLEM = Problem(1000, 1000, 1000, "float16")


def test_hung_and_dying_lowerings_are_replaced_and_the_rest_lowered() -> None:
    batch = [
        Candidate(hopper_config(128, 128, 64, 7, 2, True), PROBLEM, "test"),  # hangs
        Candidate(hopper_config(128, 128, 64, 4, 2, True), PROBLEM, "test"),
        Candidate(hopper_config(128, 128, 64, 6, 2, True), PROBLEM, "test"),  # kills its process
        Candidate(hopper_config(128, 128, 64, 2, 2, True), PROBLEM, "test"),
    ]
    with LoweringPool(processes=2, timeout_s=30, template="tests.stand_in_children:misbehaving_template",
                      arch="sm_90a") as pool:
        first = pool.pids()
        results = pool.lower(batch)
        assert [r.outcome for r in results] == [Outcome.TIMEOUT, Outcome.OK, Outcome.COMPILE_ERROR, Outcome.OK]
        assert "timed out" in results[0].message and "died" in results[2].message
        assert pool.replaced == 2 and pool.pids() != first
        ok = results[1]
        assert ok.spec is not None and ok.spec.kernel == "main_kernel" and "__global__" in ok.source
        # A process lowers again: TVM stays imported (its CPU time per lowering is the lowering's only).
        again = pool.lower(batch[1:2])
        assert again[0].outcome is Outcome.OK and again[0].source == ok.source


def test_children_start_together_not_one_import_after_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every child is started before the pool waits for the first one's TVM import."""
    from tirtune.builder import build_pool

    started: list[int] = []
    alive_at_first_wait: list[int] = []
    real_init, real_ready = build_pool._Child.__init__, build_pool._Child.ready

    def init(self: build_pool._Child, *args: object) -> None:
        real_init(self, *args)  # type: ignore[arg-type]
        started.append(self.proc.pid or 0)

    def ready(self: build_pool._Child) -> build_pool._Child:
        if not alive_at_first_wait:
            alive_at_first_wait.append(len(started))
        return real_ready(self)

    monkeypatch.setattr(build_pool._Child, "__init__", init)
    monkeypatch.setattr(build_pool._Child, "ready", ready)
    with build_pool.LoweringPool(processes=2, timeout_s=60) as pool:
        assert len(pool.children) == 2 and len(set(pool.pids())) == 2
    assert alive_at_first_wait == [2]


def test_each_lowering_is_handed_over_as_it_arrives() -> None:
    """`on_result` sees every candidate once, the same Lowered the batch returns, before `lower`
    returns (CubinBuilder compiles the first while the rest still lower)."""
    batch = [Candidate(hopper_config(128, 128, 64, 4, 2, True), PROBLEM, TEMPLATE_VERSION),
             Candidate(hopper_config(64, 128, 64, 4, 1, True), PROBLEM, TEMPLATE_VERSION)]
    seen: dict[int, object] = {}
    with LoweringPool(processes=1, timeout_s=120) as pool:
        lowered = pool.lower(batch, on_result=lambda i, low: seen.setdefault(i, low))
    assert sorted(seen) == [0, 1]
    assert [seen[0], seen[1]] == lowered and all(low.outcome is Outcome.OK for low in lowered)


def test_lowering_processes_run_nicer_than_the_service_so_a_measuring_child_gets_a_core() -> None:
    """A build host's every core lowers or compiles: the pool's processes (and nvcc) run at
    BUILD_NICENESS, so the GPU runner's measuring child is scheduled first."""
    import os
    import shutil

    from tirtune.builder import toolchain

    with LoweringPool(processes=1, timeout_s=30, template="tests.stand_in_children:misbehaving_template",
                      arch="sm_90a") as pool:
        (pid,) = pool.pids()
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        assert int(fields[16]) == max(toolchain.BUILD_NICENESS, os.nice(0))  # field 19: nice
    cmd = toolchain.niced(["nvcc", "--version"])
    assert cmd[-2:] == ["nvcc", "--version"]
    if shutil.which("nice"):
        assert cmd[:3] == [shutil.which("nice"), "-n", str(toolchain.BUILD_NICENESS)]
