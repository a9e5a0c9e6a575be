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

from tirtune.runner.errors import WorkerError
from tirtune.runner.measure import MeasureRequest
from tirtune.runner.supervisor import ChildSupervisor


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


def _prepare_stand_in() -> None:
    os.environ["TIRTUNE_STAND_IN_PREPARED"] = str(os.getpid())


@pytest.fixture
def with_spare() -> Any:
    sup = ChildSupervisor(run_timeout_s=3.0, start_timeout_s=60.0, target=misbehaving_child, spare=True,
                          prepare=_prepare_stand_in)
    yield sup
    sup.close()


def _alive(pid: int) -> bool:
    """Running (a killed child not yet reaped is a zombie: dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_crashed_child_is_replaced_by_the_waiting_spare_and_a_new_spare_waits(with_spare: ChildSupervisor) -> None:
    first = with_spare.measure(_req("ok")).info["pid"]
    spare = with_spare.spare_pid
    assert spare is not None and spare != first and _alive(spare)
    assert with_spare.measure(_req("crash")).outcome == "LAUNCH_ERROR"
    after = with_spare.measure(_req("ok"))
    assert after.outcome == "OK" and after.info["pid"] == spare, "the spare took over"
    assert with_spare.spares_used == 1 and with_spare.restarts == 1
    assert with_spare.spare_pid not in (None, first, spare), "another spare waits"


def test_a_spare_started_with_a_warm_up_gets_it_and_has_prepared(with_spare: ChildSupervisor) -> None:
    with_spare.start()
    assert with_spare.info["warm_s"] is None  # the first child: its own default warm-up
    spare = with_spare.spare_pid
    with_spare.retire()
    info = with_spare.start(warm_s=0.25)
    assert info["pid"] == spare and info["warm_s"] == 0.25
    assert info["prepared"] == str(spare), "the spare ran `prepare` in its own process before it waited"
    assert with_spare.measure(_req("ok")).info["pid"] == spare


def test_a_dead_spare_is_not_used_a_fresh_child_starts_instead(with_spare: ChildSupervisor) -> None:
    with_spare.start()
    spare = with_spare.spare_pid
    assert spare is not None
    os.kill(spare, 9)
    deadline = time.monotonic() + 10
    while _alive(spare) and time.monotonic() < deadline:
        time.sleep(0.05)
    with_spare.retire()
    reply = with_spare.measure(_req("ok"))
    assert reply.outcome == "OK" and reply.info["pid"] != spare
    assert with_spare.spares_used == 0


def test_close_ends_the_child_and_the_spare() -> None:
    sup = ChildSupervisor(run_timeout_s=3.0, target=misbehaving_child, spare=True)
    child = sup.start()["pid"]
    spare = sup.spare_pid
    assert spare is not None
    sup.close()
    assert not _alive(child) and not _alive(spare)
    assert sup.spare_pid is None


def test_the_real_childs_spare_imports_torch_and_no_other_is_guessed() -> None:
    from tirtune.runner.supervisor import _prepare_measuring

    assert ChildSupervisor().prepare is _prepare_measuring
    assert ChildSupervisor(target=misbehaving_child).prepare is None
