"""The HTTP API: app factory, routes, Pydantic schemas, and every error handler in one place."""

from __future__ import annotations

from tirtune.api.app import JobRunner, create_app
from tirtune.api.errors import ApiError

__all__ = ["ApiError", "JobRunner", "create_app"]
