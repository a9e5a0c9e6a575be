"""A cap on request bodies: a body over `max_bytes` is answered 413 before it is parsed.

The largest body the API takes is POST /tune's handful of fields (well under 1 KiB); without a
cap a 10 MB `dtype` was read, parsed and validated in full. A declared Content-Length over the cap
is refused before a byte of the body is read; a chunked body is counted as it arrives and refused
at the first chunk past the cap.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["MAX_BODY_BYTES", "BodyLimit", "too_large"]

MAX_BODY_BYTES = 64 * 1024


def too_large(max_bytes: int) -> HTTPException:
    return HTTPException(413, f"request body over {max_bytes} bytes: POST /tune takes a small JSON object")


class BodyLimit:
    """Pure ASGI middleware (no response buffering, nothing done for bodiless requests)."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            # Raised where the route reads its body, so the one error handler shapes the answer.
            await self.app(scope, self._refuse, send)
            return
        await self.app(scope, self._counting(receive), send)

    async def _refuse(self) -> Message:
        raise too_large(self.max_bytes)

    def _counting(self, receive: Receive) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise too_large(self.max_bytes)
            return message

        return counted
