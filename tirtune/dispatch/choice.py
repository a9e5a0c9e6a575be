"""Which config serves a problem on a GPU model: the best that was tuned, from the local database
or a running service's `GET /best` (one answer: `tirtune.db.best`'s ranking either way)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from tirtune.core import Config, Problem
from tirtune.db import repo, transaction
from tirtune.dispatch.errors import DispatchError
from tirtune.dispatch.http import Http
from tirtune.space.branches import branch_for_version

__all__ = ["BestFinder", "Chosen", "LocalBest", "ServiceBest"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Chosen:
    """The best verified config of `problem` on `gpu_name`: what to build or fetch."""

    problem: Problem
    gpu_name: str
    config: Config
    template_version: str
    key: str  # the measurement's identity key: GET /kernels/{key} serves its module
    ratio: float  # its same-run ratio to cuBLAS (re-measured when confirmed)
    cublas_tflops: float | None = None  # the same-run cuBLAS figure beside that ratio, when known
    ratio_p10: float | None = None  # the tenth percentile of its per-round ratios, when known


class BestFinder(Protocol):
    def best(self, problem: Problem, gpu_name: str) -> Chosen | None:
        """The best GPU-measured config of `problem` on `gpu_name`; None when nobody tuned it."""
        ...


class LocalBest:
    """The best from a database this process can open (DATABASE_URL): `repo.best_of`."""

    def __init__(self, factory: sessionmaker[Session]) -> None:
        self.factory = factory

    def best(self, problem: Problem, gpu_name: str) -> Chosen | None:
        with transaction(self.factory) as s:
            choice = repo.best_of(s, problem, gpu_name=gpu_name)
        if choice is None:
            return None
        trial = choice.best.trial
        figures = choice.best.figures
        return Chosen(
            problem,
            gpu_name,
            trial.config,
            trial.template_version,
            trial.key,
            figures.ratio,
            figures.cublas_tflops,
            figures.ratio_p10,
        )


class ServiceBest:
    """The best from a running service's `GET /best` (TIRTUNE_URL); `queue_untuned` also asks it
    to tune a problem it has nothing for (`POST /tune`)."""

    def __init__(self, http: Http, *, queue_untuned: bool = False) -> None:
        self.http = http
        self.queue_untuned = queue_untuned

    def best(self, problem: Problem, gpu_name: str) -> Chosen | None:
        query = {"shape": problem.shape, "dtype": problem.dtype, "gpu": gpu_name, "predict": "false"}
        if not problem.epilogue.is_none:
            query["epilogue"] = str(problem.epilogue)
        reply = self.http.get("/best", query)  # a prediction is no tuned kernel
        if reply.status == 404:
            if self.queue_untuned:
                self._queue(problem)
            return None
        if reply.status != 200:
            raise DispatchError(
                f"GET /best for {problem.shape} {problem.dtype} answered {reply.status}: {reply.body[:300]!r}"
            )
        body = reply.json()
        cublas, p10 = body.get("cublas_tflops"), body.get("ratio_p10")
        return Chosen(
            problem,
            gpu_name,
            Config.from_json(body["config"], branch_for_version(body["provenance"]["template_version"]).knobs),
            body["provenance"]["template_version"],
            body["key"],
            float(body["ratio"]),
            None if cublas is None else float(cublas),
            None if p10 is None else float(p10),
        )

    def _queue(self, problem: Problem) -> None:
        body: dict[str, object] = {"m": problem.m, "n": problem.n, "k": problem.k, "dtype": problem.dtype}
        if not problem.epilogue.is_none:
            body["epilogue"] = str(problem.epilogue)
        reply = self.http.post("/tune", body)
        if reply.status in (200, 202):
            log.info("queued a tuning job for %s %s (job %s)", problem.shape, problem.dtype, reply.json().get("id"))
        else:
            log.warning(
                "could not queue a tuning job for %s %s: %s %r",
                problem.shape,
                problem.dtype,
                reply.status,
                reply.body[:300],
            )
