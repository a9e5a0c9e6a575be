"""timed_events (the measuring child's timing loop) against a recording stand-in for torch: the
launches are queued behind a sleeping kernel held longer than the queueing takes, and a block whose
queueing outlasted its hold is timed again with twice the hold; and the protocol's settings a host
sets by environment."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from tirtune.runner import measure


class _Event:
    def __init__(self, log: list[Any], enable_timing: bool) -> None:
        self.log = log

    def record(self) -> None:
        self.log.append("event")

    def elapsed_time(self, other: Any) -> float:
        return 0.5


class _Cuda:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def _sleep(self, cycles: int) -> None:
        self.log.append(("sleep", cycles))

    def synchronize(self) -> None:
        self.log.append("sync")

    def Event(self, enable_timing: bool = False) -> _Event:  # noqa: N802 (torch's name)
        return _Event(self.log, enable_timing)


class _Torch:
    def __init__(self) -> None:
        self.log: list[Any] = []
        self.cuda = _Cuda(self.log)


class _Flush:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def zero_(self) -> None:
        self.log.append("flush")


def test_every_launch_is_queued_behind_a_hold_longer_than_the_queueing() -> None:
    torch = _Torch()
    times = measure.timed_events(torch, lambda: torch.log.append("launch"), _Flush(torch.log), 20)
    assert times == [0.5] * 20
    log = torch.log
    # warm-up, sync, then the hold before the first timed rep, one sync at the end
    assert log[:2] == ["launch", "sync"] and log[2][0] == "sleep" and log[-1] == "sync"
    hold_ms = max(measure.HOLD_MIN_MS, 20 * measure.HOLD_MS_PER_REP)
    assert log[2][1] == int(hold_ms * 1e-3 * measure.SLEEP_CLOCK_HZ)
    assert log[3:-1] == ["flush", "event", "launch", "event"] * 20


def test_a_block_whose_queueing_outlasted_its_hold_is_timed_again_with_twice_the_hold() -> None:
    torch = _Torch()
    slow = {"left": 2}  # the first block's launches are slow to queue (a preempted thread)

    def launch() -> None:
        torch.log.append("launch")
        if slow["left"] and len([x for x in torch.log if isinstance(x, tuple)]) == 1:
            time.sleep(0.002)

    times = measure.timed_events(torch, launch, _Flush(torch.log), 2)
    sleeps = [x[1] for x in torch.log if isinstance(x, tuple)]
    assert len(sleeps) == 2 and sleeps[1] == 2 * sleeps[0]  # 1 ms held, 4 ms queued: again at 2 ms
    assert times == [0.5, 0.5]


def test_a_larger_hold_per_launch_and_a_sample_taken_while_the_block_runs() -> None:
    """A launch that queues many kernels asks a longer first hold; `while_running` runs once the
    block is queued, before the wait for it (the GPU is running it then)."""
    torch = _Torch()
    measure.timed_events(torch, lambda: torch.log.append("launch"), _Flush(torch.log), 20, hold_ms_per_rep=0.5,
                         while_running=lambda: torch.log.append("sample"))
    log = torch.log
    assert log[2] == ("sleep", int(20 * 0.5 * 1e-3 * measure.SLEEP_CLOCK_HZ))
    assert log[-2:] == ["sample", "sync"] and log.count("sample") == 1


# --- the protocol's settings, by environment --------------------------------------------------------


def test_the_protocol_keeps_its_defaults_unless_the_environment_sets_them() -> None:
    from tirtune.runner.measure import HOLD_MS_PER_REP, L2_FLUSH_BYTES, MAX_REPS, Protocol

    default = Protocol.from_env({})
    assert (default.max_reps, default.hold_ms_per_rep, default.flush_l2) == (MAX_REPS, HOLD_MS_PER_REP, None)
    assert default.flush_bytes(50 << 20) == L2_FLUSH_BYTES and "256 MiB" in default.describe()
    cheap = Protocol.from_env({"TIRTUNE_MEASURE_MAX_REPS": "60", "TIRTUNE_MEASURE_HOLD_MS_PER_REP": "0.08",
                               "TIRTUNE_MEASURE_FLUSH_L2": "2", "TIRTUNE_MEASURE_OTHER": "x"})
    assert (cheap.max_reps, cheap.hold_ms_per_rep, cheap.flush_l2) == (60, 0.08, 2.0)
    assert cheap.flush_bytes(50 << 20) == 100 << 20
    assert cheap.describe() == "flush 2x L2, <= 60 launches a block, hold 0.08 ms a launch"
    assert Protocol.from_env({"TIRTUNE_MEASURE_MAX_REPS": " "}).max_reps == MAX_REPS


@pytest.mark.parametrize("env, message", [
    ({"TIRTUNE_MEASURE_MAX_REPS": "many"}, "TIRTUNE_MEASURE_MAX_REPS='many' is not a number"),
    ({"TIRTUNE_MEASURE_MAX_REPS": "1"}, "at least 2 launches"),
    ({"TIRTUNE_MEASURE_HOLD_MS_PER_REP": "0"}, "a positive hold"),
    ({"TIRTUNE_MEASURE_FLUSH_L2": "0.5"}, "at least the L2"),
])
def test_a_protocol_setting_out_of_range_is_named(env: dict[str, str], message: str) -> None:
    from tirtune.runner.measure import Protocol

    with pytest.raises(ValueError, match=re.escape(message)):
        Protocol.from_env(env)
