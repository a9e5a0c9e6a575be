"""JobService: the background worker that runs queued jobs for the API (`tirtune serve`)."""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy.orm import Session, sessionmaker

from tirtune.core.errors import TirtuneError
from tirtune.db import repo, transaction, url_of
from tirtune.settings import Settings
from tirtune.tuner.job import JobLoop
from tirtune.tuner.models import model_keeper
from tirtune.tuner.runtime import Workers, make_workers, stop_ray

__all__ = ["JobService", "start_job_service"]

log = logging.getLogger(__name__)


class JobService:
    """`settings.concurrent_jobs` threads that claim QUEUED jobs and run them, sharing one set of
    workers (builders, GPU runners); jobs a dead service left RUNNING resume."""

    def __init__(
        self,
        settings: Settings,
        sessions: sessionmaker[Session],
        *,
        workers: Workers | None = None,
        poll_s: float = 1.0,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self._workers = workers
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._workers_lock = threading.Lock()
        # One cost-model keeper for the service's jobs: each job's measurements retrain it for the next.
        self._models = model_keeper(sessions) if settings.cost_model else None

    def start(self) -> None:
        with transaction(self.sessions) as s:
            resumed = repo.requeue_running(s)
        if resumed:
            log.warning("resuming %d job(s) left RUNNING by a previous service", resumed)
        self._threads = [
            threading.Thread(target=self._serve, name=f"tirtune-jobs-{n}", daemon=True)
            for n in range(self.settings.concurrent_jobs)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop claiming jobs, give running ones `timeout` seconds, then stop the Ray this service
        started (agents included). A job still running is left RUNNING: the next service resumes it."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stop_ray()

    def _serve(self) -> None:
        while not self._stop.is_set():
            with transaction(self.sessions) as s:
                job = repo.claim_next_job(s)
            if job is None:
                self._stop.wait(self.poll_s)
                continue
            self._run(job.id)

    def _run(self, job_id: int) -> None:
        try:
            with self._workers_lock:  # made once, by the first job that needs them
                if self._workers is None:
                    self._workers = make_workers(self.settings)
            loop = JobLoop(
                self.sessions,
                url_of(self.sessions),
                self._workers.space,
                self._workers.builder,
                self._workers.runner,
                batch_size=self._workers.batch_size,
                remeasure_processes=self.settings.remeasure_processes,
                local_share=self.settings.local_share,
                models=self._models,
            )
            summary = loop.run(job_id)
            state, message = summary.state, summary.message
        except Exception as exc:  # the job fails, the service lives on
            if self._stop.is_set():  # e.g. Ray stopped under it: not the job's fault
                log.warning("job %d interrupted by the service stopping; it resumes on the next start", job_id)
                return
            if isinstance(exc, TirtuneError):  # a refusal with its reason (no GPU here, a bad problem)
                log.error("job %d failed: %s", job_id, exc)
            else:
                log.exception("job %d failed", job_id)
            state, message = "FAILED", f"{type(exc).__name__}: {exc}"
        with transaction(self.sessions) as s:
            repo.finish_job(s, job_id, state, message)


def start_job_service(settings: Settings, sessions: sessionmaker[Session]) -> JobService:
    """A started JobService: the job runner the CLI hands to the API (`create_app(job_runner=...)`)."""
    service = JobService(settings, sessions)
    service.start()
    return service
