"""CalDAV (docs/caldav.md): `/.well-known/caldav` and everything under `/dav/`, signed in
with HTTP Basic and an app password. Plain Starlette routes: the methods are WebDAV's, and
none of it belongs in the OpenAPI document."""

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

from backend.context import AppContext
from backend.errors import DomainError, PayloadTooLarge
from backend.services.caldav import passwords
from backend.services.caldav.server import (
    ALLOW,
    ROOT,
    DavResponse,
    Server,
    options_headers,
    refusal,
)
from backend.services.caldav.server import Request as DavRequest

METHODS = [method.strip() for method in ALLOW.split(",")]


async def well_known(request: Request) -> Response:
    """Where a client looks first: the DAV root (RFC 6764)."""
    return RedirectResponse(ROOT, status_code=301)


async def _body(request: Request, limit: int) -> bytes:
    """The request's body, refused past `limit` bytes (DAV_MAX_BYTES)."""
    received = bytearray()
    async for chunk in request.stream():
        received += chunk
        if len(received) > limit:
            raise PayloadTooLarge(f"The body is over {limit} bytes (DAV_MAX_BYTES).")
    return bytes(received)


async def dav(request: Request) -> Response:
    """Every DAV method on every DAV resource."""
    context: AppContext = request.app.state.context
    answer: DavResponse
    if request.method == "OPTIONS":
        answer = DavResponse(200, headers=options_headers())
    else:
        try:
            grant = await passwords.verify(
                context.database, authorization=request.headers.get("authorization")
            )
            body = await _body(request, context.settings.dav_max_bytes)
        except DomainError as error:
            answer = refusal(error)
        else:
            server = Server(context.database, max_bytes=context.settings.dav_max_bytes)
            path = request.path_params.get("path", "")
            dav_request = DavRequest(request.method, path, request.headers, body)
            answer = await server.handle(dav_request, grant)
    return Response(answer.body, answer.status, headers=answer.headers)


class _PropfindOnly(Route):
    """A route that other methods do not see at all: GET / stays the page's, or a 404 where
    there is no page, rather than this route's 405."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope.get("method") != "PROPFIND":
            return Match.NONE, {}
        return super().matches(scope)


routes: list[BaseRoute] = [
    Route("/.well-known/caldav", well_known, methods=["GET", "HEAD", "PROPFIND", "OPTIONS"]),
    # A client given only the server's address asks its root first (the page keeps GET).
    _PropfindOnly("/", well_known, methods=["PROPFIND"]),
    Route("/dav", dav, methods=METHODS),
    Route("/dav/{path:path}", dav, methods=METHODS),
]
