"""The db package's root exception and its one refinement."""

from __future__ import annotations

from tirtune.core.errors import TirtuneError

__all__ = ["DbError", "NotFound"]


class DbError(TirtuneError):
    """The database could not do what was asked: unreachable, behind on migrations, or a bad request."""


class NotFound(DbError, LookupError):
    """A row asked for by id does not exist; the message names what was looked for."""
