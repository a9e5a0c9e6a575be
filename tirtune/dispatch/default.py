"""The process's dispatcher, made from the settings on first use; `use` swaps in another."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tirtune.core import Problem
from tirtune.db import make_engine, session_factory
from tirtune.dispatch.artifacts import ArtifactStore
from tirtune.dispatch.choice import BestFinder, Chosen, LocalBest, ServiceBest
from tirtune.dispatch.dispatcher import Dispatcher
from tirtune.dispatch.export import ManifestBest
from tirtune.dispatch.http import UrllibHttp
from tirtune.dispatch.loader import TvmFfiLoader
from tirtune.settings import Settings, get_settings

__all__ = ["current", "from_settings", "use"]

_lock = threading.Lock()
_current: Dispatcher | None = None


def from_settings(settings: Settings) -> Dispatcher:
    """TIRTUNE_MANIFEST set: an export's choices and modules only; TIRTUNE_URL set: the service's
    GET /best and GET /kernels (then a local build); else the local database (DATABASE_URL) and
    build cache (TIRTUNE_CACHE_DIR)."""
    http = UrllibHttp(settings.url, settings.api_token) if settings.url else None
    finder: BestFinder
    if settings.manifest is not None:
        finder = ManifestBest(settings.manifest)
        store = ArtifactStore(settings.manifest.parent, build=False)
        return Dispatcher(
            finder, store, TvmFfiLoader(), strict=settings.dispatch_strict, require_lead=not settings.dispatch_unproven
        )
    if http is not None:
        finder = ServiceBest(http, queue_untuned=settings.dispatch_queue_untuned)
    else:
        finder = _LocalOnFirstUse(settings.database_url)
    store = ArtifactStore(
        settings.cache_dir, http=http, build=settings.dispatch_build, build_timeout_s=settings.build_timeout_s
    )
    return Dispatcher(
        finder, store, TvmFfiLoader(), strict=settings.dispatch_strict, require_lead=not settings.dispatch_unproven
    )


class _LocalOnFirstUse:
    """LocalBest on DATABASE_URL, opened when a CUDA problem first asks (a CPU-only user of
    tirtune.nn.Linear never touches a database)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._local: LocalBest | None = None

    def best(self, problem: Problem, gpu_name: str) -> Chosen | None:
        if self._local is None:
            self._local = LocalBest(session_factory(make_engine(self.url)))
        return self._local.best(problem, gpu_name)


def current() -> Dispatcher:
    global _current
    found = _current
    if found is None:
        with _lock:
            if _current is None:
                _current = from_settings(get_settings())
            found = _current
    return found


@contextmanager
def use(dispatcher: Dispatcher) -> Iterator[Dispatcher]:
    """Run tirtune.gemm (and tirtune.nn.Linear) through `dispatcher` inside the block."""
    global _current
    with _lock:
        before, _current = _current, dispatcher
    try:
        yield dispatcher
    finally:
        with _lock:
            _current = before
