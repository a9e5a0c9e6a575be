"""Every implementation of our interfaces has their methods with their signatures (checked by
signature: a runtime-checkable Protocol's isinstance only looks at the names)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from contracts import mismatches

from tirtune.builder.builder import Builder
from tirtune.builder.cubin_builder import CubinBuilder
from tirtune.builder.tirx_builder import TirxBuilder
from tirtune.core import BuildResult, Candidate
from tirtune.runner.gpu_runner import GpuRunner
from tirtune.runner.replay_runner import ReplayBuilder, ReplayRunner
from tirtune.runner.runner import Runner
from tirtune.tuner.optuna_proposer import OptunaProposer
from tirtune.tuner.proposer import Proposer


@pytest.mark.parametrize(
    "implementation, protocol",
    [(TirxBuilder, Builder), (CubinBuilder, Builder), (ReplayBuilder, Builder), (GpuRunner, Runner),
     (ReplayRunner, Runner),
     (OptunaProposer, Proposer)],
    ids=lambda c: c.__name__,
)
def test_each_implementation_fits_its_interface(implementation: type, protocol: type) -> None:
    assert mismatches(implementation, protocol) == []


class _TakesMore:
    def build(self, batch: Sequence[Candidate], strict: bool) -> list[BuildResult]:
        return []


class _ReturnsOne:
    def build(self, batch: Sequence[Candidate]) -> BuildResult | None:
        return None


class _Renamed:
    def build(self, candidates: Sequence[Candidate]) -> list[BuildResult]:
        return []


def test_the_check_fails_where_isinstance_would_not() -> None:
    for wrong in (_TakesMore, _ReturnsOne, _Renamed):
        assert isinstance(wrong(), Builder)  # the names are there: isinstance is satisfied
        assert mismatches(wrong, Builder), wrong.__name__
    assert mismatches(_TakesMore, Builder) == ["build: extra required parameter 'strict'"]
    assert mismatches(object, Builder) == ["build: missing"]
