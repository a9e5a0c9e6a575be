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

from tirtune import TirtuneError
from tirtune.api.schemas import ErrorBody, ErrorOut
from tirtune.db import DbError, NotFound
from tirtune.space import SpaceError

__all__ = ["ApiError", "error_response", "install_error_handlers"]

log = logging.getLogger(__name__)


class ApiError(TirtuneError):
    """An HTTP-level refusal raised by a route (401, 404 for empty results, ...)."""

    def __init__(
        self, status: int, code: str, message: str, *, detail: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.detail, self.headers = detail, dict(headers or {})


def error_response(
    status: int, code: str, message: str, detail: Any = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    body = ErrorOut(error=ErrorBody(code=code, message=message, detail=detail))
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


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
    fields = [_bad_field(e) for e in exc.errors()]
    summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5])
    return error_response(422, "validation_error", f"invalid request: {summary}", fields)


def _bad_field(error: Mapping[str, Any]) -> dict[str, str]:
    # Only names and messages: the offending input may be large, binary or not JSON-encodable.
    field = ".".join(str(part) for part in error.get("loc", ())) or "request"
    return {"field": field, "message": str(error.get("msg", "")), "type": str(error.get("type", ""))}


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = HTTPStatus(exc.status_code).phrase.lower().replace(" ", "_").replace("-", "_")
    return error_response(exc.status_code, code, str(exc.detail), headers=exc.headers)


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
