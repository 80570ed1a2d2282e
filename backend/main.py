"""The FastAPI application factory."""

import gc
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import cache

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp

from backend.context import AppContext
from backend.errors import install_error_handlers
from backend.fast_path import ChatFastPath
from backend.logs import configure_logging
from backend.metrics import release_process_metrics
from backend.middleware import BodyLimit, RequestMiddleware
from backend.routers import (
    account,
    app_passwords,
    calendar,
    chat,
    chat_ui,
    dav,
    dev,
    documents,
    events,
    health,
    hooks,
    lists,
    mcp,
    memories,
    metrics,
    notifications,
    sessions,
    tasks,
    trash,
    web,
)
from backend.routers import settings as user_settings
from backend.services.documents import reading
from backend.settings import Settings, load_settings

_IMPORT_PATH = re.compile(r"/api/[^/]+/import")
_DOCUMENTS_PATH = re.compile(r"/api/[^/]+/documents")
_DOCUMENT_PATH = re.compile(r"/api/[^/]+/documents/[^/]+")
_DAV_PATH = re.compile(r"/dav(/.*)?")
# A document's file with the multipart envelope around it (its headers, the form fields).
_MULTIPART_OVERHEAD = 64 * 1024


class _App(FastAPI):
    """FastAPI with RequestMiddleware outside everything, Starlette's server-error handler
    included: a 500 too carries X-Request-ID and is logged and counted with its status."""

    max_request_bytes: int
    larger_bodies: list[BodyLimit]

    def build_middleware_stack(self) -> ASGIApp:
        return RequestMiddleware(
            super().build_middleware_stack(),
            max_body_bytes=self.max_request_bytes,
            larger_bodies=self.larger_bodies,
        )


@cache
def _collect_once() -> None:
    """A full collection, once per process (see `lifespan`)."""
    gc.collect()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings(serving=True)
    configure_logging(settings.log_level)
    mcp_endpoint = mcp.McpEndpoint(settings) if settings.mcp_enabled else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        context = AppContext.create(settings)
        app.state.context = context
        await context.start()
        reading.prepare_reader()
        # Everything built so far (modules, routes, schemas, the OpenAPI models) lives as
        # long as the process: keep the collector from walking it again in every full
        # collection, which otherwise costs a long pause every few hundred turns. The
        # garbage is collected first the first time only: an app started again in the same
        # process (the tests start hundreds) would pay a full collection of everything the
        # process holds each time (0.3 s in a test worker), and unfreezing at shutdown hands
        # what was frozen back to the collector anyway.
        _collect_once()
        gc.freeze()
        # A turn allocates a few thousand short-lived objects (request, SDK and response
        # objects), and CPython's default starts a young collection every 700: collections
        # were 5% of a turn's CPU. Every 20,000 allocations they are rarer, and the objects
        # are garbage by then anyway.
        thresholds = gc.get_threshold()
        gc.set_threshold(20_000, *thresholds[1:])
        try:
            async with AsyncExitStack() as serving:
                if mcp_endpoint is not None:
                    await serving.enter_async_context(mcp_endpoint.run(context))
                yield
        finally:
            await context.close()
            gc.set_threshold(*thresholds)
            gc.unfreeze()
            release_process_metrics()

    app = _App(
        title="todo-agent",
        version="0.1.0",
        description="Manage todos in plain language: a multi-tenant chat agent service.",
        lifespan=lifespan,
    )
    app.max_request_bytes = settings.max_request_bytes
    # An export document brought back is as large as the account it came from.
    document_bytes = settings.document_max_bytes + _MULTIPART_OVERHEAD
    app.larger_bodies = [
        BodyLimit("POST", _IMPORT_PATH, settings.import_max_bytes),
        BodyLimit("POST", _DOCUMENTS_PATH, document_bytes),
        BodyLimit("PUT", _DOCUMENT_PATH, document_bytes),
        *(BodyLimit(method, _DAV_PATH, settings.dav_max_bytes) for method in dav.METHODS),
    ]
    install_error_handlers(app)
    # Added before the CORS middleware, so that it runs inside it: see ChatFastPath.
    app.add_middleware(ChatFastPath)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PATCH", "PUT", "DELETE", "OPTIONS"],
            allow_headers=[
                "Authorization",
                "Last-Event-ID",
                "Content-Type",
                "Idempotency-Key",
                "X-Request-ID",
                *mcp.CORS_REQUEST_HEADERS,
            ],
            expose_headers=["Retry-After", "X-Request-ID", *mcp.CORS_RESPONSE_HEADERS],
            max_age=600,
        )
    for module in (
        health,
        metrics,
        chat,
        chat_ui,
        sessions,
        tasks,
        trash,
        lists,
        documents,
        events,
        calendar,
        user_settings,
        account,
        hooks,
        memories,
        app_passwords,
        notifications,
    ):
        # The routes are complete (prefix, tags, documented errors) once declared; adding
        # them directly spares every request FastAPI's lazy re-resolution of included
        # routers, and the OpenAPI document is the same.
        app.router.routes.extend(module.router.routes)
    app.router.routes.extend(dav.routes)
    if settings.dev_sign_in:
        app.router.routes.extend(dev.router.routes)
    if settings.web_ui_enabled:
        web.install(app, settings)
    if mcp_endpoint is not None:
        app.router.routes.extend([*mcp.router.routes, *mcp.routes(mcp_endpoint)])
    return app
