"""The one middleware every request passes: request id, body size cap, access log, metrics.

Plain ASGI (not BaseHTTPMiddleware, which buffers and slows streamed answers), kept cheap
because it runs on every request: one pass over the headers, no regex, and the access log
line is only built when INFO is enabled.
"""

import json
import logging
import re
import time
from collections.abc import Sequence
from typing import NamedTuple

from prometheus_client import Histogram
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend import metrics
from backend.errors import PayloadTooLarge
from backend.logs import new_request_id, request_id_var, valid_request_id

logger = logging.getLogger("todo_agent.access")

UNMATCHED_ROUTE = "unmatched"
_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_TOO_LARGE_BODY = json.dumps({"detail": PayloadTooLarge.detail}).encode()
_TOO_LARGE_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(_TOO_LARGE_BODY)).encode()),
]


class _BodyTooLarge(HTTPException):
    """Raised from `receive` when a body without Content-Length outgrows the cap. An
    HTTPException so that FastAPI passes it on instead of calling the body malformed."""

    def __init__(self) -> None:
        super().__init__(status_code=413, detail=PayloadTooLarge.detail)


class BodyLimit(NamedTuple):
    """A body cap of its own for the requests of one method whose path matches `path`."""

    method: str
    path: re.Pattern[str]
    max_bytes: int


class RequestMiddleware:
    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, larger_bodies: Sequence[BodyLimit] = ()
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.larger_bodies = larger_bodies
        # The histogram child per (method, route, status): `labels()` costs more than a dict
        # lookup, and the set is small (known methods, route templates, statuses we send).
        self._latency: dict[tuple[str, str, int], Histogram] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id: str | None = None
        content_length: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                given = value.decode("latin-1")
                request_id = given if valid_request_id(given) else None
            elif name == b"content-length":
                content_length = value
        if request_id is None:
            request_id = new_request_id()
        id_header = (b"x-request-id", request_id.encode())
        token = request_id_var.set(request_id)
        status = 500  # what the client gets if the app fails before answering
        limit = self.max_body_bytes
        received = 0
        too_large = False  # the body outgrew the cap while the app read it
        answering = False  # the app's response has started going out

        async def send_with_id(message: Message) -> None:
            nonlocal status, answering
            if too_large and not answering:
                return  # the app's answer to _BodyTooLarge; ours goes out instead
            if message["type"] == "http.response.start":
                answering = True
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), id_header]
            await send(message)

        async def receive_capped() -> Message:
            nonlocal received, too_large, limit
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit and limit == self.max_body_bytes:
                    limit = self._limit_for(scope)
                if received > limit:
                    too_large = True
                    raise _BodyTooLarge()
            return message

        try:
            if content_length is not None and _exceeds(content_length, limit):
                limit = self._limit_for(scope)
            if content_length is not None and _exceeds(content_length, limit):
                status = 413
                await _send_too_large(send, id_header)
                return
            # With a Content-Length the server delivers exactly that many bytes; only a
            # chunked (or unannounced) body needs counting.
            inner_receive = receive if content_length is not None else receive_capped
            try:
                await self.app(scope, inner_receive, send_with_id)
            except Exception:
                if not too_large or answering:
                    raise
            if too_large and not answering:
                status = 413
                await _send_too_large(send, id_header)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED_ROUTE
            method = scope["method"]
            if method not in _KNOWN_METHODS:
                method = "other"
            elapsed = time.perf_counter() - started
            key = (method, template, status)
            if (latency := self._latency.get(key)) is None:
                latency = self._latency[key] = metrics.HTTP_REQUEST_SECONDS.labels(*key)
            latency.observe(elapsed)
            level = logging.INFO if status < 500 else logging.WARNING
            if logger.isEnabledFor(level):
                logger.log(
                    level,
                    "%s %s %d",
                    method,
                    template,
                    status,
                    extra={
                        "method": method,
                        "route": template,
                        "status": status,
                        "latency_ms": round(elapsed * 1000, 2),
                    },
                )
            request_id_var.reset(token)

    def _limit_for(self, scope: Scope) -> int:
        """The body cap of this request: its route's own, or the default. Looked up only
        for a body over the default, so that other requests pay nothing for it."""
        for larger in self.larger_bodies:
            if scope["method"] == larger.method and larger.path.fullmatch(scope["path"]):
                return larger.max_bytes
        return self.max_body_bytes


def _exceeds(content_length: bytes, limit: int) -> bool:
    try:
        return int(content_length) > limit
    except ValueError:
        return False  # the server rejects a malformed Content-Length before we see it


async def _send_too_large(send: Send, id_header: tuple[bytes, bytes]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [*_TOO_LARGE_HEADERS, id_header, (b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": _TOO_LARGE_BODY})
