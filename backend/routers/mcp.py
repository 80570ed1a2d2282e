"""The MCP server at /mcp (Streamable HTTP, stateless, JSON responses), as an OAuth
resource server: a bearer token verified like the API's, and the RFC 9728 metadata that
tells a client which authorization server issues those tokens."""

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, Request
from fastapi.security.utils import get_authorization_scheme_param
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from backend.context import AppContext
from backend.deps import Context
from backend.errors import DomainError, InvalidToken, error_response
from backend.models.mcp import ProtectedResourceMetadata
from backend.services.mcp import IDENTITY_KEY, TodoMcp
from backend.settings import Settings

logger = logging.getLogger("todo_agent.mcp")

PATH = "/mcp"
METADATA_PATH = "/.well-known/oauth-protected-resource" + PATH
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
# What a browser-based MCP client sends and must be able to read (Streamable HTTP).
CORS_REQUEST_HEADERS = ("Mcp-Session-Id", "Mcp-Protocol-Version", "Mcp-Method", "Mcp-Name")
CORS_RESPONSE_HEADERS = ("Mcp-Session-Id", "WWW-Authenticate")

router = APIRouter(tags=["mcp"])


def _base_url(settings: Settings, request: Request) -> str:
    # Without PUBLIC_BASE_URL only loopback hosts get through to /mcp, so the request's
    # own address is the one its client used.
    return settings.public_base_url or str(request.base_url).rstrip("/")


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """Host and Origin allowlists (DNS-rebinding protection): loopback on any port, and
    PUBLIC_BASE_URL's host; browser origins: CORS_ORIGINS and the public URL."""
    hosts = [f"{host}:*" for host in _LOOPBACK] + list(_LOOPBACK)
    origins = [f"http://{host}:*" for host in _LOOPBACK] + [f"http://{h}" for h in _LOOPBACK]
    origins += settings.cors_origins
    if settings.public_base_url:
        scheme, _, rest = settings.public_base_url.partition("://")
        host = rest.split("/", 1)[0]
        default_port = {"http": "80", "https": "443"}.get(scheme)
        hosts += [host, f"{host}:{default_port}"] if default_port and ":" not in host else [host]
        origins.append(f"{scheme}://{host}")
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


class McpEndpoint:
    """The ASGI app at /mcp: Host and Origin checked, the bearer token verified (its
    audience the MCP resource when audiences are configured), then the SDK's transport
    with the caller's identity on the request."""

    def __init__(self, settings: Settings) -> None:
        if settings.is_production and not settings.public_base_url:
            logger.warning("no PUBLIC_BASE_URL: /mcp answers only requests to loopback hosts")
        self._settings = settings
        self._security = transport_security(settings)
        self._guard = TransportSecurityMiddleware(self._security)
        self._manager: StreamableHTTPSessionManager | None = None

    @asynccontextmanager
    async def run(self, context: AppContext) -> AsyncIterator[None]:
        """Serve while the block runs (in the app's lifespan: a mounted app's own lifespan
        never runs). A session manager runs once, so each run makes its own."""
        mcp = TodoMcp(settings=self._settings, database=context.database, semantic=context.semantic)
        manager = StreamableHTTPSessionManager(
            app=mcp.server,
            json_response=True,
            stateless=True,  # any replica or worker can answer any request
            security_settings=self._security,
            max_request_body_size=self._settings.max_request_bytes,
        )
        started, stop = asyncio.Event(), asyncio.Event()

        async def serve() -> None:
            async with manager.run():
                started.set()
                await stop.wait()

        # The manager's task group must be left by the task that entered it, and a lifespan
        # may be entered and left by different tasks (test fixtures do): it gets its own.
        serving = asyncio.create_task(serve(), name="mcp-session-manager")
        waiting = asyncio.create_task(started.wait())
        await asyncio.wait({serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if serving.done():
            serving.result()  # it failed to start: raise why
        self._manager = manager
        try:
            yield
        finally:
            self._manager = None
            stop.set()
            await serving

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        refused = await self._guard.validate_request(request)
        if refused is not None:
            await refused(scope, receive, send)
            return
        if scope["method"] == "GET":
            # Stateless: there is nothing to push, and the SDK would hold the stream open.
            await JSONResponse({"detail": "Method Not Allowed."}, 405, headers={"Allow": "POST"})(
                scope, receive, send
            )
            return
        if self._manager is None:  # the app is not running (or shutting down)
            await JSONResponse({"detail": "Not serving."}, 503)(scope, receive, send)
            return
        context: AppContext = request.app.state.context
        base = _base_url(self._settings, request)
        token = _bearer(request)
        try:
            scope[IDENTITY_KEY] = await context.verifier.verify(
                token, audience=self._audience(base)
            )
        except InvalidToken as invalid:
            await _unauthorized(invalid, base, token_sent=bool(token))(scope, receive, send)
            return
        except DomainError as failure:  # the identity provider is down: 503, Retry-After
            await error_response(failure)(scope, receive, send)
            return
        except Exception:  # a token we cannot check is refused, never a 500
            logger.exception("token verification failed")
            await _unauthorized(InvalidToken(), base, token_sent=True)(scope, receive, send)
            return
        await self._manager.handle_request(scope, receive, send)

    def _audience(self, base: str) -> str | None:
        """MCP_JWT_AUDIENCE, else the resource's URL, once audiences are in use at all: a
        token minted for the web frontend is then refused here."""
        if self._settings.mcp_jwt_audience:
            return self._settings.mcp_jwt_audience
        return base + PATH if self._settings.jwt_audience else None


def _bearer(request: Request) -> str:
    scheme, token = get_authorization_scheme_param(request.headers.get("authorization"))
    return token if scheme.lower() == "bearer" else ""


def _unauthorized(invalid: InvalidToken, base: str, *, token_sent: bool) -> JSONResponse:
    """401 pointing at the metadata (RFC 9728 section 5.1), so a client can find out
    where to get a token; with RFC 6750's error code when a token came and failed."""
    challenge = f'Bearer resource_metadata="{base}{METADATA_PATH}"'
    if token_sent:
        challenge += f', error="invalid_token", error_description="{invalid.detail}"'
    return JSONResponse({"detail": invalid.detail}, 401, headers={"WWW-Authenticate": challenge})


class _McpRoute(Route):
    """A Route, not a Mount: a Mount answers /mcp with a redirect to /mcp/. It names
    itself in the scope as FastAPI's routes do, for the access log and metrics."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self
        await super().handle(scope, receive, send)


def routes(endpoint: McpEndpoint) -> list[Route]:
    return [_McpRoute(PATH, endpoint)]


@router.get(METADATA_PATH, operation_id="mcpResourceMetadata", response_model_exclude_none=True)
async def resource_metadata(context: Context, request: Request) -> ProtectedResourceMetadata:
    """RFC 9728 metadata of the MCP server at /mcp: who issues its tokens."""
    settings = context.settings
    return ProtectedResourceMetadata(
        resource=_base_url(settings, request) + PATH,
        authorization_servers=[settings.jwt_issuer] if settings.jwt_issuer else None,
    )
