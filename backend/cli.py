"""`todo-agent serve | migrate | token`."""

import argparse
import asyncio
import os
import sys

from backend.settings import ConfigError, Settings, load_settings


def _database_url(settings: Settings) -> str:
    """DATABASE_URL, or in development an embedded PostgreSQL under the data dir."""
    if settings.database_url:
        return settings.database_url
    if settings.is_production:
        raise ConfigError("ENVIRONMENT=production needs DATABASE_URL.")
    from backend.embedded_db import EmbeddedPostgres

    url = EmbeddedPostgres(settings.data_dir).start()
    print(f"todo-agent: embedded PostgreSQL under {settings.data_dir}/pgdata", file=sys.stderr)
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


def serve(args: argparse.Namespace) -> None:
    import uvicorn

    settings = load_settings()
    url = _database_url(settings)
    # Workers build their own settings from the environment; they must find the same database.
    os.environ["DATABASE_URL"] = url
    _migrate(url)
    if not settings.openai_api_key:
        print("todo-agent: no OPENAI_API_KEY; answering with the stub responder", file=sys.stderr)
    uvicorn.run(
        "backend.main:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        proxy_headers=True,
        timeout_graceful_shutdown=int(settings.shutdown_grace_s),
    )


def migrate(_: argparse.Namespace) -> None:
    settings = load_settings()
    _migrate(_database_url(settings))
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
            audience=settings.jwt_audience,
        )
    )


def main(argv: list[str] | None = None) -> None:
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
    token_parser.set_defaults(run=token)

    args = parser.parse_args(argv)
    try:
        args.run(args)
    except ConfigError as error:
        print(f"todo-agent: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
