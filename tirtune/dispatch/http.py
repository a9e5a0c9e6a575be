"""The dispatcher's one seam to a running service: GET and POST, bytes back (stdlib only)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Http", "Reply", "UrllibHttp"]


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case

    def json(self) -> Any:
        return json.loads(self.body)


class Http(Protocol):
    def get(self, path: str, params: Mapping[str, str] | None = None) -> Reply: ...

    def post(self, path: str, body: Mapping[str, Any]) -> Reply: ...


class UrllibHttp:
    """`Http` over urllib against `base_url` (TIRTUNE_URL), with the API token when there is one.
    An unreachable service raises OSError; an HTTP error status is a Reply like any other."""

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def get(self, path: str, params: Mapping[str, str] | None = None) -> Reply:
        query = "?" + urllib.parse.urlencode(params) if params else ""
        return self._send(urllib.request.Request(self.base_url + path + query))

    def post(self, path: str, body: Mapping[str, Any]) -> Reply:
        data = json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path, data=data, method="POST", headers={"Content-Type": "application/json"}
        )
        return self._send(request)

    def _send(self, request: urllib.request.Request) -> Reply:
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310 (our service)
                return Reply(response.status, response.read(), _lower(response.headers.items()))
        except urllib.error.HTTPError as e:
            return Reply(e.code, e.read(), _lower(e.headers.items()))


def _lower(items: Any) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in items}
