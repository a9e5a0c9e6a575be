"""A cache of encoded answers (GET /best, /trials pages, GET /jobs and /jobs/{id}), dropped
whenever the measurements or the jobs change.

Measurements and jobs are written by job workers that may run in other processes or on other hosts,
so an API process cannot see every write. Instead, at most once per `check_every_s` (per process,
not per key) one request starts a read of the version in the background (it does not wait for it:
tirtune.api.routes): `repo.measurements_version` (the newest id and the number of stale rows: an
index-only read) and `repo.jobs_version` (the jobs' count, newest id and sum of revisions: a scan
of the jobs), and the cache is emptied when it moved. So an answer is never staler than
`check_every_s` plus one query, the database sees two small queries per second per process however
hot the endpoints are, and hits need neither a thread nor a connection.

A miss that raced with an invalidation is not stored (each entry carries the generation it was
read in), so an old answer cannot outlive the check that should have dropped it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

__all__ = ["ResponseCache"]


class ResponseCache:
    """Thread-safe; the oldest entry goes first beyond `max_entries`. `check_every_s <= 0`: off."""

    def __init__(
        self, check_every_s: float, *, max_entries: int = 4096, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.check_every_s = check_every_s
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[Hashable, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self._version: object = None
        self._generation = 0
        self._next_check = float("-inf")
        self._checking = False

    @property
    def enabled(self) -> bool:
        return self.check_every_s > 0

    @property
    def generation(self) -> int:
        return self._generation

    def claim_check(self) -> bool:
        """True for exactly one caller when a version check is due; it must call `checked`."""
        with self._lock:
            if not self.enabled or self._checking or self._clock() < self._next_check:
                return False
            self._checking = True
            return True

    def checked(self, version: object | None) -> None:
        """The version the claimed check read; None when it failed (everything is dropped)."""
        with self._lock:
            if version is None or version != self._version:
                self._entries.clear()
                self._generation += 1
            self._version = version
            self._checking = False
            self._next_check = self._clock() + self.check_every_s if version is not None else float("-inf")

    def get(self, key: Hashable) -> bytes | None:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: Hashable, value: bytes, generation: int) -> None:
        """Store `value`, read during `generation`, unless the cache was invalidated since."""
        with self._lock:
            if not self.enabled or generation != self._generation or self._version is None:
                return
            self._entries[key] = value
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._generation += 1
