"""The measuring child's watchdog: hangs are killed, crashes replaced, the next candidate runs.

The child entry point is our own seam: these stand-ins misbehave the way broken kernels do
(hang, kill the process, poison the context) without needing a GPU.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from stand_in_children import dying_child, gpu_less_child, misbehaving_child

from tirtune.workers.errors import WorkerError
from tirtune.workers.measure import MeasureRequest
from tirtune.workers.supervisor import ChildSupervisor


def _req(artifact: str) -> MeasureRequest:
    return MeasureRequest(artifact, 64, 64, 64, "float16")


@pytest.fixture
def supervisor() -> Any:
    sup = ChildSupervisor(run_timeout_s=3.0, start_timeout_s=60.0, target=misbehaving_child)
    yield sup
    sup.close()


def test_a_good_candidate_is_measured_by_one_long_lived_child(supervisor: ChildSupervisor) -> None:
    first = supervisor.measure(_req("ok"))
    second = supervisor.measure(_req("ok"))
    assert first.outcome == second.outcome == "OK"
    assert first.info["pid"] == second.info["pid"]
    assert supervisor.restarts == 0


def test_a_hang_is_killed_as_timeout_and_a_fresh_child_takes_over(supervisor: ChildSupervisor) -> None:
    pid = supervisor.measure(_req("ok")).info["pid"]
    began = time.monotonic()
    reply = supervisor.measure(_req("hang"))
    assert reply.outcome == "TIMEOUT" and "killed" in reply.message
    assert time.monotonic() - began < 30
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the hung child is gone, not left spinning
    after = supervisor.measure(_req("ok"))
    assert after.outcome == "OK" and after.info["pid"] != pid
    assert supervisor.restarts == 1


@pytest.mark.parametrize("artifact,code", [("crash", "7"), ("poison", None)])
def test_a_dead_or_poisoned_child_is_a_launch_error_and_is_replaced(supervisor: ChildSupervisor, artifact: str,
                                                                     code: str | None) -> None:
    reply = supervisor.measure(_req(artifact))
    assert reply.outcome == "LAUNCH_ERROR"
    if code:
        assert f"exit code {code}" in reply.message
    assert supervisor.measure(_req("ok")).outcome == "OK"
    assert supervisor.restarts == 1


def test_a_host_without_gpu_is_an_infrastructure_error_not_a_result() -> None:
    sup = ChildSupervisor(target=gpu_less_child)
    with pytest.raises(WorkerError, match="no CUDA device"):
        sup.start()


def test_a_child_that_dies_while_starting_is_an_infrastructure_error() -> None:
    sup = ChildSupervisor(target=dying_child)
    with pytest.raises(WorkerError, match=r"died while starting \(exit code 4\)"):
        sup.start()
