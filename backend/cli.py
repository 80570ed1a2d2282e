"""`todo-agent serve | migrate | token | chat | users export | users erase`."""

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

from backend.logs import configure_logging
from backend.metrics import MULTIPROC_DIR_ENV
from backend.settings import ConfigError, Settings, load_settings

if TYPE_CHECKING:
    from fastapi import FastAPI

logger = logging.getLogger("todo_agent.cli")
# What requests still open once the turns are drained (a large export, an MCP call) get
# before uvicorn cancels them; event streams were ended by the drain.
REQUESTS_AFTER_DRAIN_S = 5
# How long uvicorn's supervisor waits for a worker to answer its ping before killing it as
# hung. Its 5 s default kills workers still importing the app on a busy machine, again and
# again; a worker truly hung is rare and this only delays its replacement.
WORKER_HEALTHCHECK_S = 60


def _database_url(settings: Settings) -> str:
    """DATABASE_URL, or in development an embedded PostgreSQL under the data dir."""
    if settings.database_url:
        return settings.database_url
    if settings.is_production:
        raise ConfigError("ENVIRONMENT=production needs DATABASE_URL.")
    from backend.embedded_db import EmbeddedPostgres

    url = EmbeddedPostgres(settings.data_dir).start()
    logger.info("embedded PostgreSQL", extra={"pgdata": str(settings.data_dir / "pgdata")})
    return url


def _migrate(url: str) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    from backend.migrations import migrate

    async def run() -> None:
        engine = create_async_engine(url)
        try:
            await migrate(engine)
        finally:
            await engine.dispose()

    asyncio.run(run())


@contextlib.contextmanager
def _metrics_dir(settings: Settings, workers: int) -> Iterator[None]:
    """Worker processes share their metrics through files: in PROMETHEUS_MULTIPROC_DIR when
    configured (it must start empty), else with several workers in a fresh directory that
    goes when they do. Exported before the workers start: prometheus_client reads it when
    it is imported."""
    if settings.prometheus_multiproc_dir is not None:
        settings.prometheus_multiproc_dir.mkdir(parents=True, exist_ok=True)
        os.environ[MULTIPROC_DIR_ENV] = str(settings.prometheus_multiproc_dir)
        yield
        return
    if workers <= 1:
        yield
        return
    path = tempfile.mkdtemp(prefix="todo-agent-metrics-")
    os.environ[MULTIPROC_DIR_ENV] = path
    try:
        yield
    finally:
        del os.environ[MULTIPROC_DIR_ENV]
        shutil.rmtree(path, ignore_errors=True)


def _exit_cleanly(signum: int, _: FrameType | None) -> None:
    raise SystemExit(0)


def serving_app() -> "FastAPI":
    """The app as `serve` runs it (uvicorn's factory, in each worker process): SIGTERM
    drains it before uvicorn hears of the signal. Told at once, uvicorn would close its
    listener (a load balancer would learn from refused connections, not from `/ready`)
    and cut the turns still running at its timeout. uvicorn builds the app inside its own
    signal handling, so the handler found here is uvicorn's, and it is called once the
    drain is over: uvicorn then stops as it always does."""
    # Importing and building the app makes a few hundred thousand objects that live as long
    # as the process (modules, classes, schemas, routes): the collector, left on, walks them
    # again and again as they come, a fifth of the start's CPU. The lifespan collects once
    # and freezes them (backend.main).
    gc.disable()
    try:
        from backend.main import create_app

        app = create_app()
    finally:
        gc.enable()
    uvicorn_stops = signal.getsignal(signal.SIGTERM)
    if not callable(uvicorn_stops):  # not under uvicorn's signal handling: nothing to wrap
        return app
    loop = asyncio.get_running_loop()
    draining: set[asyncio.Task[None]] = set()  # held, so the task is not collected

    async def drain_then_stop(signum: int) -> None:
        try:
            await app.state.context.drain()
        finally:
            uvicorn_stops(signum, None)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, uvicorn_stops)  # a second SIGTERM: stop at once
        context = getattr(app.state, "context", None)
        if context is None:  # still starting: nothing to drain
            uvicorn_stops(signum, frame)
            return
        context.agent.replica.refuse_turns()  # now, not when the loop gets to the drain
        loop.call_soon_threadsafe(lambda: draining.add(loop.create_task(drain_then_stop(signum))))

    signal.signal(signal.SIGTERM, on_sigterm)
    return app


def serve(args: argparse.Namespace) -> None:
    import uvicorn

    settings = load_settings(serving=True)
    configure_logging(settings.log_level)
    url = _database_url(settings)
    # Workers build their own settings from the environment; they must find the same database.
    os.environ["DATABASE_URL"] = url
    _migrate(settings.database_direct_url or url)
    if not settings.openai_api_key:
        logger.warning("no OPENAI_API_KEY; answering with the stub responder")
    with _metrics_dir(settings, args.workers):
        # uvicorn handles SIGTERM / SIGINT while it serves (SIGTERM after the app's drain,
        # see serving_app): it stops accepting, lets in-flight requests finish (up to its
        # graceful timeout), runs the lifespan shutdown (which drains turns still running,
        # after a SIGINT), then raises the signal again for the previous handler. That
        # handler is this one: a graceful stop exits 0, not "killed by signal".
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, _exit_cleanly)
        uvicorn.run(
            "backend.cli:serving_app",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            proxy_headers=True,
            log_config=None,  # ours (backend.logs), set up here and by the app factory
            access_log=False,  # backend.middleware writes one line per request instead
            timeout_graceful_shutdown=REQUESTS_AFTER_DRAIN_S,
            timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
        )


def migrate(_: argparse.Namespace) -> None:
    settings = load_settings()
    configure_logging(settings.log_level)
    # Past any pooler: DDL and the migration lock want the database itself.
    _migrate(settings.database_direct_url or _database_url(settings))
    print("todo-agent: migrations at head", file=sys.stderr)


def token(args: argparse.Namespace) -> None:
    from backend.auth import create_token

    settings = load_settings()
    if settings.jwt_secret is None:
        raise ConfigError("`token` signs with JWT_SECRET, and none is configured.")
    print(
        create_token(
            secret=settings.jwt_secret.get_secret_value(),
            user_id=args.user_id,
            ttl_s=args.ttl,
            email=args.email,
            name=args.name,
            issuer=settings.jwt_issuer,
            audience=args.audience or settings.jwt_audience,
        )
    )


def _users() -> Settings:
    """Settings for a command on DATABASE_URL (in development, the embedded one); it signs
    nothing, so no secret is made for it or asked of it."""
    settings = Settings()
    return settings.model_copy(update={"database_url": _database_url(settings)})


def users_export(args: argparse.Namespace) -> None:
    """The user's export document on stdout, as GET /api/{user_id}/export writes it."""
    from backend.db import Database
    from backend.errors import NotFound
    from backend.services import portability

    settings = _users()

    async def run() -> bool:
        database = Database(settings)
        try:
            async with database.snapshot(as_user=args.user_id) as snapshot:
                try:
                    chunks = await portability.export(snapshot, user=args.user_id)
                except NotFound:
                    return False
                async for chunk in chunks:
                    sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            return True
        finally:
            await database.dispose()

    if not asyncio.run(run()):
        print(f"todo-agent: no user {args.user_id!r} here", file=sys.stderr)
        sys.exit(1)


def users_erase(args: argparse.Namespace) -> None:
    """Erase the user, as DELETE /api/{user_id} does (running servers forget them too)."""
    from backend.db import Database
    from backend.services import erasure

    settings = _users()
    configure_logging(settings.log_level)

    async def run() -> bool:
        database = Database(settings)
        try:
            return await erasure.erase(database, args.user_id)
        finally:
            await database.dispose()

    erased = asyncio.run(run())
    print(
        f"todo-agent: erased {args.user_id!r}"
        if erased
        else f"todo-agent: no user {args.user_id!r} here; nothing to erase",
        file=sys.stderr,
    )


def main(argv: list[str] | None = None) -> None:
    # Here, not at the top: a document reader (services/documents/reading.py) imports this
    # module again as its main one, and needs none of the terminal client's imports.
    from backend import chat_cli

    parser = argparse.ArgumentParser(prog="todo-agent", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve_parser = commands.add_parser("serve", help="serve the API")
    serve_parser.add_argument("--host", default="127.0.0.1")
    serve_parser.add_argument("--port", type=int, default=8000)
    serve_parser.add_argument("--workers", type=int, default=1)
    serve_parser.set_defaults(run=serve)

    migrate_parser = commands.add_parser("migrate", help="apply migrations to DATABASE_URL")
    migrate_parser.set_defaults(run=migrate)

    token_parser = commands.add_parser("token", help="print a JWT this service accepts")
    token_parser.add_argument("user_id")
    token_parser.add_argument("--ttl", type=int, default=3600, help="seconds (default 3600)")
    token_parser.add_argument("--email")
    token_parser.add_argument("--name")
    token_parser.add_argument(
        "--audience", help="the aud claim (default JWT_AUDIENCE); for /mcp: MCP_JWT_AUDIENCE"
    )
    token_parser.set_defaults(run=token)

    chat_parser = commands.add_parser("chat", help="chat with a running service in the terminal")
    chat_cli.add_arguments(chat_parser)
    chat_parser.set_defaults(run=chat_cli.run)

    docs_parser = commands.add_parser("docs", help="documents, on a running service")
    docs_commands = docs_parser.add_subparsers(dest="docs_command", required=True)
    add_parser = docs_commands.add_parser(
        "add", help="upload a file (Markdown, text, HTML, PDF) as a document"
    )
    add_parser.add_argument("file")
    add_parser.add_argument("--list", help="the list's name or id (default: your Inbox)")
    chat_cli.add_arguments(add_parser, chatting=False)
    add_parser.set_defaults(run=chat_cli.add_document)

    users_parser = commands.add_parser("users", help="a user's data: export or erase it")
    users_commands = users_parser.add_subparsers(dest="users_command", required=True)
    export_parser = users_commands.add_parser(
        "export", help="write everything held about the user as JSON on stdout"
    )
    export_parser.add_argument("user_id")
    export_parser.set_defaults(run=users_export)
    erase_parser = users_commands.add_parser(
        "erase", help="erase the user: every row about them, one user.deleted event left"
    )
    erase_parser.add_argument("user_id")
    erase_parser.set_defaults(run=users_erase)

    args = parser.parse_args(argv)
    try:
        args.run(args)
    except ConfigError as error:
        print(f"todo-agent: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
