"""The FastAPI application factory.

Serve with `tirtune serve`, or `uvicorn --factory tirtune.cli:service_app`. Handlers never tune:
POST /tune queues a job and the job runner the caller hands in (`job_runner`: the CLI hands the
tuner's JobService, `tirtune.tuner.service.start_job_service`), started in the lifespan, executes
it. The API never imports the tuner: `uvicorn --factory tirtune.api.app:create_app` serves the
API alone.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

from fastapi import FastAPI
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from tirtune.api.cache import ResponseCache
from tirtune.api.dashboard import install_dashboard
from tirtune.api.docs import install_docs
from tirtune.api.errors import install_error_handlers
from tirtune.api.limits import BodyLimit
from tirtune.api.predicted import model_keeper
from tirtune.api.routes import router
from tirtune.core.version import __version__
from tirtune.db import DbError, make_engine, migrate
from tirtune.db import session_factory as make_session_factory
from tirtune.settings import Settings, get_settings
from tirtune.space import SearchSpace

__all__ = ["JobRunner", "RunnerFactory", "create_app"]

log = logging.getLogger(__name__)


class JobRunner(Protocol):
    """What the app needs of `tirtune.tuner.service.JobService(settings, session_factory)`:
    `start()` returns promptly, leaving the workers running in the background; `stop()` blocks
    until they have stopped."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


RunnerFactory = Callable[[Settings, sessionmaker[Session]], JobRunner]


def create_app(
    settings: Settings | None = None,
    *,
    session_factory: sessionmaker[Session] | None = None,
    start_workers: bool = True,
    job_runner: RunnerFactory | None = None,
    replay_space: SearchSpace | None = None,
) -> FastAPI:
    """Build the app. Without `session_factory` one is made from `settings.service_database_url`
    (DATABASE_URL, or the replay database when TIRTUNE_REPLAY is set; its engine is disposed at
    shutdown). Startup migrates an SQLite database, or refuses to start when another database is
    behind. `job_runner` makes the runner that executes queued jobs for the app's lifetime
    (`tirtune.tuner.service.start_job_service`, which the CLI hands in, or one with replay workers
    in tests): it must return a started runner. Without one, or with `start_workers=False`, the app
    only serves (jobs wait for a `tirtune worker`). `replay_space`: when the service replays
    recorded measurements (TIRTUNE_REPLAY), the space of its recordings
    (`tirtune.tuner.runtime.replay_space`, which the CLI hands in): POST /tune refuses a problem
    with no recording (422 `not_recorded`). Without it such a job is queued and fails, saying why."""
    settings = settings or get_settings()
    owned: Engine | None = None
    if session_factory is None:
        if settings.replay is not None:
            log.warning(
                "TIRTUNE_REPLAY is set: replaying %s into the replay database %s, not DATABASE_URL",
                settings.replay,
                settings.replay_database_url,
            )
        owned = make_engine(settings.service_database_url)
        session_factory = make_session_factory(owned)
    factory = session_factory
    runner = job_runner if start_workers else None
    app = FastAPI(
        title="tirtune",
        version=__version__,
        description="Autotuning service for TIRx GEMM kernels: queue tuning jobs, read the best configs.",
        lifespan=_lifespan(settings, factory, owned, runner),
        docs_url=None,
        redoc_url=None,  # tirtune.api.docs serves /docs from the package
    )
    app.state.settings = settings
    app.state.session_factory = factory
    app.state.best_cache = ResponseCache(settings.best_cache_check_s)
    app.state.replay_space = replay_space
    # GET /best's predictions for problems nobody tuned (TIRTUNE_COST_MODEL=false: none).
    app.state.models = model_keeper(factory) if settings.cost_model else None
    install_error_handlers(app)
    app.add_middleware(BodyLimit)
    app.include_router(router)
    install_dashboard(app)
    install_docs(app)
    return app


def _lifespan(
    settings: Settings, factory: sessionmaker[Session], owned: Engine | None, runner: RunnerFactory | None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            await run_in_threadpool(migrate.ensure_ready, _bound_engine(factory))
        except DbError as e:
            log.error("database not ready, the API does not start: %s", e)
            raise
        service = None if runner is None else await run_in_threadpool(runner, settings, factory)
        try:
            yield
        finally:
            if service is not None:
                await run_in_threadpool(service.stop)
            if owned is not None:
                owned.dispose()

    return lifespan


def _bound_engine(factory: sessionmaker[Session]) -> Engine:
    bind = factory.kw.get("bind")
    if not isinstance(bind, Engine):
        raise TypeError("session_factory must be bound to an Engine (see tirtune.db.session_factory)")
    return bind
