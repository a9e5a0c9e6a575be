"""Every error response is made here, in the one ErrorOut shape; status codes are chosen here only."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tirtune.api.schemas import ErrorBody, ErrorOut
from tirtune.core.errors import TirtuneError
from tirtune.db import DbError, NotFound
from tirtune.space import SpaceError

__all__ = ["MAX_ECHO", "MAX_MESSAGE", "ApiError", "bounded", "error_response", "install_error_handlers"]

log = logging.getLogger(__name__)

MAX_ECHO = 64  # characters of a client's own text an error may repeat (a field name, say)
MAX_MESSAGE = 1024
MAX_FIELDS = 20  # invalid fields listed in `detail`; a body of 10,000 bad fields gets 20


class ApiError(TirtuneError):
    """An HTTP-level refusal raised by a route (401, 404 for empty results, ...)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        detail: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.detail, self.headers = detail, dict(headers or {})


def error_response(
    status: int, code: str, message: str, detail: Any = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The one error shape. Every message is cut to MAX_MESSAGE characters: messages may quote what
    the client sent (the reasons do so with a short prefix), and an error body stays small."""
    body = ErrorOut(error=ErrorBody(code=code, message=bounded(message, MAX_MESSAGE), detail=detail))
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def bounded(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters and how many were left out."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(SpaceError, _space_error)
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(DbError, _db_error)
    app.add_exception_handler(Exception, _unexpected)


async def _api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.detail, exc.headers)


async def _invalid_request(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    fields = [_bad_field(e) for e in errors[:MAX_FIELDS]]
    summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5])
    if len(errors) > 5:
        summary += f"; and {len(errors) - 5} more"
    return error_response(422, "validation_error", f"invalid request: {summary}", fields)


def _bad_field(error: Mapping[str, Any]) -> dict[str, str]:
    # Names and messages only, never `input` or `ctx`: the offending input may be large, binary or
    # not JSON-encodable. A location can hold a client's key (an unknown field's name) and a
    # message can quote the input, so both are cut to a short prefix.
    field = ".".join(str(part) for part in error.get("loc", ())) or "request"
    return {
        "field": bounded(field, MAX_ECHO),
        "message": bounded(str(error.get("msg", "")), MAX_ECHO * 4),
        "type": str(error.get("type", "")),
    }


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code) or HTTPStatus(exc.status_code).phrase.lower().replace(" ", "_").replace(
        "-", "_"
    )
    return error_response(exc.status_code, code, str(exc.detail), headers=exc.headers)


# Codes that must not follow Python's phrase of the status (413's changed in Python 3.13).
_HTTP_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}


async def _space_error(_request: Request, exc: Exception) -> JSONResponse:
    return error_response(422, "invalid_problem", str(exc))


async def _not_found(_request: Request, exc: Exception) -> JSONResponse:
    return error_response(404, "not_found", str(exc))


async def _db_error(request: Request, exc: Exception) -> JSONResponse:
    log.error("database error on %s %s: %s", request.method, request.url.path, exc)
    return error_response(503, "database_error", str(exc))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal_error", "internal error; the server log has the details")
