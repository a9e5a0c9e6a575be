"""The Proposer interface: ask for configurations, tell what became of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tirtune.core import Config

__all__ = ["Feedback", "Proposal", "Proposer", "Refusal"]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A sample the proposer refused by the space's rules (and already told as such)."""

    trial: int
    config: Config
    message: str  # "rule: reason; ..."


@dataclass(frozen=True, slots=True)
class Proposal:
    trial: int  # the proposer's own trial number
    config: Config
    refused: Refusal | None = None  # the sample this proposal replaces, if it broke a rule


@dataclass(frozen=True, slots=True)
class Feedback:
    """What a trial produced: its same-run ratio to cuBLAS (the objective, maximized) when it ran
    correctly, else the outcome and the reason."""

    trial: int
    ratio: float | None
    outcome: str
    message: str = ""


@runtime_checkable
class Proposer(Protocol):
    def ask(self, n: int) -> list[Proposal]: ...

    def tell(self, feedback: Sequence[Feedback]) -> None: ...

    def abandon(self) -> None:
        """Close the trials asked but never told (the job stopped early): none stays open."""
        ...
