"""Which template branch the workers search: chosen from the GPUs the runner measures on."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tirtune.core import BuildResult, RunResult, Stack
from tirtune.space import HOPPER
from tirtune.space.blackwell import BLACKWELL
from tirtune.tuner.errors import TunerError
from tirtune.tuner.runtime import _space_of


class _On:
    def __init__(self, capability: str) -> None:
        self._stack = Stack("some GPU", "580", "13.0", "0.27", capability)

    def stack(self) -> Stack:
        return self._stack

    def run(self, batch: Sequence[BuildResult]) -> list[RunResult]:
        raise AssertionError("not measured here")

    def remeasure(self, batch: Sequence[BuildResult], rounds: int = 5) -> list[RunResult]:
        raise AssertionError("not measured here")


def test_hopper_gpus_search_the_hopper_space_and_a_b200_the_blackwell_one() -> None:
    assert _space_of(_On("9.0")) is HOPPER
    assert _space_of(_On("10.0")) is BLACKWELL
    assert _space_of(_On("")) is HOPPER  # a runner that cannot tell (replays of old data)


@pytest.mark.parametrize("capability", ["10.3", "8.0", "12.0"])
def test_a_gpu_without_a_branch_is_refused_with_the_reason(capability: str) -> None:
    with pytest.raises(TunerError, match=f"compute capability {capability}"):
        _space_of(_On(capability))
