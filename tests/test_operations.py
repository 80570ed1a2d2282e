"""Health, readiness through a database outage, OpenAPI, CORS, configuration and the CLI."""

import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from jose import jwt
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from backend.embedded_db import EmbeddedPostgres
from backend.main import create_app
from backend.migrations import migrate
from backend.settings import ConfigError, Settings
from tests.conftest import TEST_SECRET, auth
from tests.servers import ServerProcess, run_cli


async def test_health_answers_while_the_process_runs(client: httpx.AsyncClient) -> None:
    response = await client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_ready_when_database_is_at_head(client: httpx.AsyncClient) -> None:
    response = await client.get("/ready")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "database": True, "migrations": "at head"}


@pytest.fixture
async def outage_app(
    outage_db: EmbeddedPostgres, make_settings: Callable[..., Settings]
) -> AsyncIterator[FastAPI]:
    """The app serving on an empty schema, its background workers running.

    The schema is emptied before the app starts: dropping tables that the workers are
    reading can deadlock with them (it did in CI), and no operator drops a live schema.
    """
    url = outage_db.start()
    engine = create_async_engine(url)
    async with engine.begin() as connection:
        await connection.execute(text("DROP SCHEMA public CASCADE"))
        await connection.execute(text("CREATE SCHEMA public"))
    await engine.dispose()
    app = create_app(make_settings(database_url=url))
    async with app.router.lifespan_context(app):
        yield app


async def test_ready_is_503_until_migrations_are_applied(
    outage_db: EmbeddedPostgres, outage_app: FastAPI
) -> None:
    engine = create_async_engine(outage_db.start())
    transport = httpx.ASGITransport(app=outage_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        before = await client.get("/ready")
        await migrate(engine)
        after = await client.get("/ready")
    await engine.dispose()
    assert before.status_code == 503
    assert before.json()["migrations"] == "not applied"
    assert after.status_code == 200


async def test_database_outage_answers_503_and_recovers_without_restart(
    outage_db: EmbeddedPostgres, outage_app: FastAPI
) -> None:
    engine = create_async_engine(outage_db.start())
    await migrate(engine)
    await engine.dispose()
    transport = httpx.ASGITransport(app=outage_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        created = await client.post("/api/alice/tasks", json={"title": "a"}, headers=auth("alice"))
        assert created.status_code == 201
        assert (await client.get("/ready")).status_code == 200

        outage_db.stop()
        try:
            ready = await client.get("/ready")
            listing = await client.get("/api/alice/tasks", headers=auth("alice"))
            creating = await client.post(
                "/api/alice/tasks", json={"title": "b"}, headers=auth("alice")
            )
        finally:
            outage_db.start()

        assert ready.status_code == 503
        assert ready.headers["Retry-After"]
        for response in (listing, creating):
            assert response.status_code == 503, response.text
            assert response.headers["Retry-After"]
            assert "unavailable" in response.json()["detail"]

        recovered = [
            (await client.get("/api/alice/tasks", headers=auth("alice"))).status_code
            for _ in range(3)
        ]
        assert recovered[-1] == 200
        assert (await client.get("/ready")).status_code == 200
        listing = await client.get("/api/alice/tasks", headers=auth("alice"))
        assert [task["title"] for task in listing.json()["data"]] == ["a"]


async def test_openapi_has_stable_operation_ids_and_bearer_auth(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    operation_ids = {
        operation["operationId"] for path in schema["paths"].values() for operation in path.values()
    }
    assert {
        "health",
        "ready",
        "chat",
        "chatStream",
        "listSessions",
        "getSession",
        "listSessionMessages",
        "renameSession",
        "deleteSession",
        "listTasks",
        "createTask",
        "getTask",
        "updateTask",
        "replaceTask",
        "completeTask",
        "deleteTask",
    } <= operation_ids
    assert "HTTPBearer" in schema["components"]["securitySchemes"]


async def test_cors_allows_configured_origins_only(
    make_settings: Callable[..., Settings], engine: object
) -> None:
    app = create_app(make_settings(cors_origins="http://localhost:3000,https://app.example"))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            headers = {
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            }
            allowed = await client.options(
                "/api/alice/chat", headers={"Origin": "http://localhost:3000", **headers}
            )
            denied = await client.options(
                "/api/alice/chat", headers={"Origin": "https://evil.example", **headers}
            )
    assert allowed.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "access-control-allow-origin" not in denied.headers


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({}, "DATABASE_URL"),
        ({"DATABASE_URL": "postgresql://x@h/db"}, "JWT_SECRET"),
        ({"DATABASE_URL": "postgresql://x@h/db", "JWT_SECRET": "change-me"}, "JWT_SECRET"),
        ({"DATABASE_URL": "postgresql://x@h/db", "JWT_SECRET": "short"}, "JWT_SECRET"),
        ({"DATABASE_URL": "postgresql://x@h/db", "JWT_SECRET": "s" * 48}, "MCP_STATE_SECRET"),
        (
            {
                "DATABASE_URL": "postgresql://x@h/db",
                "JWT_SECRET": "s" * 48,
                "MCP_STATE_SECRET": "change-me",
            },
            "MCP_STATE_SECRET",
        ),
    ],
)
def test_production_refuses_to_start_without_real_settings(
    environment: dict[str, str], message: str
) -> None:
    settings = Settings(_env_file=None, environment="production", **environment)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message):
        settings.check_production()


def test_production_accepts_real_settings() -> None:
    Settings(
        _env_file=None,
        environment="production",
        database_url="postgresql://x@h/db",
        jwt_jwks_url="https://auth.example/jwks",
        mcp_state_secret="m" * 48,
    ).check_production()
    # Without MCP there is no requestState to seal.
    Settings(
        _env_file=None,
        environment="production",
        database_url="postgresql://x@h/db",
        jwt_jwks_url="https://auth.example/jwks",
        mcp_enabled=False,
    ).check_production()


def test_development_keeps_the_secrets_it_needs_in_the_data_dir(tmp_path: Path) -> None:
    def settings(**values: Any) -> Settings:
        return Settings(_env_file=None, TODO_AGENT_DATA_DIR=tmp_path, **values)

    assert settings().with_development_secret(create=False, serving=True).mcp_state_secret is None
    signing = settings().with_development_secret()  # `todo-agent token`: no MCP key needed
    assert signing.mcp_state_secret is None
    assert not (tmp_path / "mcp_state_secret").exists()
    made = settings().with_development_secret(serving=True)
    assert made.jwt_secret == signing.jwt_secret
    assert made.jwt_secret is not None
    assert made.mcp_state_secret is not None
    assert made.mcp_state_secret != made.jwt_secret
    assert (tmp_path / "mcp_state_secret").stat().st_mode & 0o777 == 0o600
    again = settings(jwt_secret="configured" * 4).with_development_secret(serving=True)
    assert again.mcp_state_secret == made.mcp_state_secret  # the same key, read back
    assert again.jwt_secret is not None
    assert again.jwt_secret.get_secret_value() == "configured" * 4
    assert not again.dev_sign_in  # the JWT secret is not the one made here
    configured = settings(mcp_state_secret="k" * 40).with_development_secret(serving=True)
    assert configured.mcp_state_secret is not None
    assert configured.mcp_state_secret.get_secret_value() == "k" * 40
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jwt_secret", "mcp_state_secret"]
    (tmp_path / "mcp_state_secret").unlink()
    off = settings(mcp_enabled=False).with_development_secret(serving=True)
    assert off.mcp_state_secret is None
    assert not (tmp_path / "mcp_state_secret").exists()


def test_database_urls_are_normalized_to_asyncpg() -> None:
    for url in ("postgres://u@h/d", "postgresql://u@h/d", "postgresql+asyncpg://u@h/d"):
        assert Settings(_env_file=None, database_url=url).database_url == (
            "postgresql+asyncpg://u@h/d"
        )


def test_cli_refuses_in_production_and_says_what_to_set(tmp_path: Path) -> None:
    env = {"ENVIRONMENT": "production", "TODO_AGENT_DATA_DIR": str(tmp_path)}
    serve = run_cli("serve", "--port", "1", env=env)
    token = run_cli("token", "alice", env={**env, "DATABASE_URL": "postgresql://x@h/db"})
    assert serve.returncode == 2
    assert "DATABASE_URL" in serve.stderr
    assert token.returncode == 2
    assert "JWT_SECRET" in token.stderr
    assert not (tmp_path / "jwt_secret").exists()
    assert not (tmp_path / "mcp_state_secret").exists()


def test_commands_in_production_ask_only_for_what_they_use(
    tmp_path: Path, database_url: str, engine: object
) -> None:
    """`token` signs (a JWT secret, no database, no MCP key); `migrate` migrates (a
    database, no secrets): a migration job or a shell that mints a token carries no more."""
    env = {"ENVIRONMENT": "production", "TODO_AGENT_DATA_DIR": str(tmp_path)}
    minted = run_cli("token", "alice", env={**env, "JWT_SECRET": TEST_SECRET})
    migrated = run_cli("migrate", env={**env, "DATABASE_URL": database_url})
    assert minted.returncode == 0, minted.stderr
    claims = jwt.decode(minted.stdout.strip(), TEST_SECRET, algorithms=["HS256"])
    assert claims["sub"] == "alice"
    assert migrated.returncode == 0, migrated.stderr
    assert list(tmp_path.iterdir()) == []  # and production made no secret of its own


def test_serve_on_embedded_postgres_with_a_minted_token(tmp_path: Path) -> None:
    """`make run`'s path: no DATABASE_URL, no secrets; `token` and `serve` agree."""
    data_dir = Path(tempfile.mkdtemp(prefix="todo-agent-serve-"))  # PostgreSQL runs as its own user
    env = {"TODO_AGENT_DATA_DIR": str(data_dir)}
    with ServerProcess(env, log=tmp_path / "serve.log") as server:
        minted = run_cli("token", "alice", "--name", "Alice", env=env)
        assert minted.returncode == 0, minted.stderr
        headers = {"Authorization": f"Bearer {minted.stdout.strip()}"}
        created = httpx.post(
            f"{server.url}/api/alice/tasks", json={"title": "Buy groceries"}, headers=headers
        )
        listing = httpx.get(f"{server.url}/api/alice/tasks", headers=headers)
        ready = httpx.get(f"{server.url}/ready")
        expired = run_cli("token", "alice", "--ttl", "-100", env=env)
        rejected = httpx.get(
            f"{server.url}/api/alice/tasks",
            headers={"Authorization": f"Bearer {expired.stdout.strip()}"},
        )
    assert created.status_code == 201, server.logs()
    assert listing.json()["count"] == 1
    assert ready.status_code == 200
    assert rejected.status_code == 401
    assert (data_dir / "pgdata" / "PG_VERSION").exists()
    assert (data_dir / "mcp_state_secret").exists()  # made by `serve`, not by `token`
    shutil.rmtree(data_dir, ignore_errors=True)
