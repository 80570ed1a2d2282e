"""The FastAPI application factory."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from backend.context import AppContext
from backend.errors import install_error_handlers
from backend.routers import chat, health, metrics, sessions, tasks
from backend.settings import Settings, load_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        context = AppContext.create(settings)
        app.state.context = context
        try:
            yield
        finally:
            await context.close()

    app = FastAPI(
        title="todo-agent",
        version="0.1.0",
        description="Manage todos in plain language: a multi-tenant chat agent service.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PATCH", "PUT", "DELETE", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "X-Request-ID"],
            expose_headers=["Retry-After", "X-Request-ID"],
            max_age=600,
        )
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(chat.router)
    app.include_router(sessions.router)
    app.include_router(tasks.router)
    return app
