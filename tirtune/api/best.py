"""The answer to "what is the best config of this problem": one function behind GET /best and
`tirtune best`, so the two print the same JSON and cannot drift.

The choice itself is `repo.best_of` (tirtune.db.best): ranked by the same-run ratio, re-measured
figures first, with the runner-up and whether the two are within noise. Only GPU measurements
are served unless replayed figures are asked for (`source=replay`), and then they say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy.orm import Session

from tirtune.api.nearest import log_distance, nearest
from tirtune.api.schemas import BestOut, FallbackOut
from tirtune.core import Problem, Source
from tirtune.db import repo
from tirtune.db.best import BestChoice
from tirtune.space.branches import branch_for_gpu_name

__all__ = ["NotTuned", "answer", "find_best"]

Fallback = Literal["none", "nearest"]


@dataclass(frozen=True, slots=True)
class NotTuned:
    """Nothing to serve, and what there is instead (replayed figures, when GPU ones were asked for)."""

    problem: Problem
    gpu: str | None
    source: Source
    replayed: bool  # replayed figures exist for this problem: served only when asked for

    def message(self, *, start: str, ask_replayed: str) -> str:
        """For people: `start` says how to tune it, `ask_replayed` how to see replayed figures."""
        where = f" on {self.gpu}" if self.gpu else ""
        what = "tuned" if self.source is Source.GPU else "replayed"
        text = f"nothing {what} for {self.problem}{where} yet; {start}"
        if self.replayed:
            text += (
                f" (replayed figures exist, read back from recordings, not measured here: {ask_replayed} "
                "serves them, labelled)"
            )
        named = branch_for_gpu_name(self.gpu) if self.gpu else None
        if named is not None and not named.measured:
            text += (
                f" (the {named.name} {named.arch} branch is {named.status_text}: results for a {named.name} "
                "GPU come only from runs on one)"
            )
        return text


def find_best(
    s: Session,
    problem: Problem,
    *,
    gpu: str | None = None,
    source: Source = Source.GPU,
    fallback: Fallback = "none",
) -> BestOut | NotTuned:
    """The best of `problem` (on `gpu`) from `source`; with fallback "nearest", the best of the
    nearest tuned shape of the same dtype and epilogue when the shape itself has none (and
    `fallback` says so): a plain GEMM's figures never answer for a fused problem, nor back."""
    served, choice = problem, repo.best_of(s, problem, gpu_name=gpu, source=source)
    if choice is None and fallback == "nearest":
        near = nearest(
            problem, repo.tuned_problems(s, problem.dtype, epilogue=problem.epilogue, gpu_name=gpu, source=source)
        )
        served, choice = (problem, None) if near is None else (near, repo.best_of(s, near, gpu_name=gpu, source=source))
    if choice is None:
        replayed = source is Source.GPU and repo.best_of(s, problem, gpu_name=gpu, source=Source.REPLAY) is not None
        return NotTuned(problem, gpu, Source(source), replayed)
    return answer(choice, problem if fallback == "nearest" else None, served)


def answer(choice: BestChoice, requested: Problem | None = None, served: Problem | None = None) -> BestOut:
    """`choice` as served; with `requested`, the fallback block saying which shape it is for."""
    if requested is None or served is None:
        return BestOut.of(choice)
    used = FallbackOut(
        used=served != requested,
        requested=requested.shape,
        served=served.shape,
        distance=log_distance(requested, served),
    )
    return BestOut.of(choice, used)
