"""Shared fixtures: a real PostgreSQL with the migrations applied, the app over ASGI, tokens."""

import asyncio
import os
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.auth import create_token
from backend.embedded_db import EmbeddedPostgres
from backend.main import create_app
from backend.migrations import migrate
from backend.services.outbox.hub import FORGET_CHANNEL
from backend.settings import Settings, normalize_database_url
from tests import pgbouncer
from tests.fake_openai import FakeOpenAI

# The `browser` fixture (Chromium) of the modules that drive the page.
pytest_plugins = ("tests.browser",)

# Modules of few tests that take long (servers, replicas killed, a wheel installed, a fuzzer,
# a real browser or CalDAV client). pytest-xdist would hand out the modules with the most
# tests first, leaving these to the end, where one keeps its worker busy long after the
# others ran out (`make test` passes `--no-loadscope-reorder`, so modules go out in the
# order collected here). They go first instead, each beside one of the rest (those with
# the most tests first), so that a module that mostly waits runs beside one that computes.
# Longest first, as a run measured them.
_LONG_FEW_TESTS = (
    "test_package.py",
    "test_handover.py",
    "test_ai_sdk.py",
    "test_fuzz.py",
    "test_webhooks.py",
    "test_caldav_clients.py",
    "test_drain.py",
    "test_events_replicas.py",
    "test_chaos.py",
    "test_idle.py",
    "test_notify_replicas.py",
    "test_web_push_firefox.py",
    "test_caldav_server_tester.py",
    "test_typescript_client.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules in the order above, one long one between each two of the rest."""
    tests = Counter(item.path.name for item in items)
    long = [name for name in _LONG_FEW_TESTS if name in tests]
    rest = sorted((name for name in tests if name not in long), key=lambda name: -tests[name])
    order: list[str] = []
    for index in range(max(len(long), len(rest))):
        order += rest[index : index + 1] + long[index : index + 1]
    rank = {name: index for index, name in enumerate(order)}
    items.sort(key=lambda item: rank[item.path.name])


TEST_SECRET = "test-secret-" + "x" * 40
TEST_MCP_STATE_SECRET = "test-mcp-state-secret-" + "x" * 40
TEST_VAPID_PRIVATE_KEY = (
    "mG3fwAVhopr9SwpRc1AV2N1n6g0KAfv6-TSZVlh_vkk"  # a P-256 key, base64url (tests only)
)
# Empties what `TRUNCATE events, agent_messages, agent_sessions, tasks, idempotency_keys,
# users, identity_webhook_messages RESTART IDENTITY CASCADE` would (those tables and every
# table that refers to them, however far), with their sequences back at the start, in one
# statement. Rows are deleted as a replica applies changes (no trigger fires, no foreign key
# is checked: every table concerned is emptied): on the few rows a test leaves this takes a
# few milliseconds, where TRUNCATE makes every table and index anew, half a second for the
# twenty-odd tables. The commit need not wait for the disk: a crash loses only a test run.
_EMPTY_TABLES = text(
    """
DO $$
DECLARE
    reached regclass[];
    name regclass;
BEGIN
    WITH RECURSIVE referring(id) AS (
        SELECT unnest(ARRAY[
            'events', 'agent_messages', 'agent_sessions', 'tasks', 'idempotency_keys', 'users',
            'identity_webhook_messages'
        ]::regclass[])
        UNION
        SELECT constraints.conrelid::regclass
        FROM pg_constraint constraints JOIN referring ON constraints.confrelid = referring.id
        WHERE constraints.contype = 'f'
    )
    SELECT array_agg(id) INTO reached FROM referring;
    PERFORM set_config('session_replication_role', 'replica', true);
    PERFORM set_config('synchronous_commit', 'off', true);
    FOREACH name IN ARRAY reached LOOP
        EXECUTE format('DELETE FROM %s', name);
    END LOOP;
    PERFORM setval(sequences.seqrelid, sequences.seqstart, false)
    FROM pg_sequence sequences
    JOIN pg_depend owner ON owner.objid = sequences.seqrelid AND owner.deptype IN ('a', 'i')
    WHERE owner.refobjid = ANY (reached);
END $$
"""
)

# The service reads these from the environment; a developer's shell must not leak into tests.
for _name in list(os.environ):
    if _name.startswith(
        ("OPENAI_", "JWT_", "AGENT_", "CHAT_", "CORS_", "MCP_", "EMBEDDINGS_")
    ) or _name in (
        "DATABASE_URL",
        "DATABASE_DIRECT_URL",
        "ENVIRONMENT",
        "PUBLIC_BASE_URL",
    ):
        del os.environ[_name]


def _per_worker(url: str) -> str:
    """Under pytest-xdist each worker gets a database of its own on the same server (created
    here when missing), since each drops and migrates its schema and truncates per test."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return url
    base, _, rest = url.rpartition("/")
    name, mark, query = rest.partition("?")
    own = f"{name}_{worker}"

    async def create() -> None:
        connection = await asyncpg.connect(url.replace("+asyncpg", ""))
        try:
            if not await connection.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", own):
                await connection.execute(f'CREATE DATABASE "{own}"')
        finally:
            await connection.close()

    asyncio.run(create())
    return f"{base}/{own}{mark}{query}"


# TEST_THROUGH_PGBOUNCER=1 (the Makefile's second run): the service under test, its settings
# and its `todo-agent serve` processes, reaches the database through a real PgBouncer in
# transaction mode, with DATABASE_DIRECT_URL past it. The tests' own engine (the schema,
# arranging and inspecting) stays direct.
THROUGH_PGBOUNCER = os.environ.get("TEST_THROUGH_PGBOUNCER") == "1"
_POOLED: dict[str, str] = {}  # a test database's URL -> its PgBouncer's


def service_database(database_url: str) -> dict[str, str]:
    """The service's `database_url` (and `database_direct_url`) for the test database."""
    pooled = _POOLED.get(database_url)
    if pooled is None:
        return {"database_url": database_url}
    return {"database_url": pooled, "database_direct_url": database_url}


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """TEST_DATABASE_URL when set, else an embedded PostgreSQL for this run."""
    if env_url := os.environ.get("TEST_DATABASE_URL"):
        url = normalize_database_url(_per_worker(env_url))
    else:
        # Outside pytest's private tmp tree (PostgreSQL runs as its own user); it stops by
        # itself when the test process exits.
        url = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="todo-agent-test-"))).start()
    if not THROUGH_PGBOUNCER:
        yield url
        return
    if not pgbouncer.available():
        missing = f"TEST_THROUGH_PGBOUNCER=1 and {pgbouncer.PGBOUNCER} is missing"
        if os.environ.get("CI") == "true":
            pytest.fail(missing + " (CI installs Debian's pgbouncer: .ci/run)")
        print(f"\n*** {missing}: the tests through PgBouncer are SKIPPED ***", file=sys.stderr)
        pytest.skip(missing + " (apt-get install pgbouncer)")
    with pgbouncer.PgBouncer(url) as pooler:
        _POOLED[url] = pooler.url
        yield url


@pytest.fixture(scope="session")
def outage_db() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of our own that a test may stop and start (not migrated here)."""
    embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="todo-agent-outage-")))
    embedded.start()
    yield embedded
    embedded.start()  # leave it running; it stops with the test process


@asynccontextmanager
async def migrated_engine(url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on a freshly migrated schema (Alembic, exactly as `todo-agent migrate`)."""
    engine = create_async_engine(url)
    async with engine.begin() as connection:
        await connection.execute(text("DROP SCHEMA public CASCADE"))
        await connection.execute(text("CREATE SCHEMA public"))
    await migrate(engine)
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on the test database, freshly migrated."""
    async with migrated_engine(database_url) as engine:
        yield engine


@pytest.fixture(autouse=True)
async def clean_tables(request: pytest.FixtureRequest) -> None:
    """Each test starts from empty tables (only for tests that touch the database)."""
    if "engine" not in request.fixturenames:
        return
    engine: AsyncEngine = request.getfixturevalue("engine")
    # A module's server keeps polling (reminders, deliveries) between tests; emptying the
    # tables can deadlock with one of its statements, and PostgreSQL may pick ours to
    # abort. Then it is simply done again.
    # Its servers also keep the users they have met (KnownUsers): tell them, as an erasure
    # does, that every user is gone, else a user an earlier test made is refused (409) once.
    for attempt in range(5):
        try:
            async with engine.begin() as connection:
                await connection.execute(
                    text("SELECT pg_notify(:channel, id) FROM users"), {"channel": FORGET_CHANNEL}
                )
                await connection.execute(_EMPTY_TABLES)
            return
        except DBAPIError as error:
            cause = error.orig.__cause__ if error.orig else None
            if attempt == 4 or not isinstance(cause, asyncpg.exceptions.DeadlockDetectedError):
                raise


@pytest.fixture(scope="session")
def fake_openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def model(fake_openai_server: FakeOpenAI) -> FakeOpenAI:
    """The scripted OpenAI-compatible server, fresh for each test."""
    fake_openai_server.clear()
    fake_openai_server.latency_s = 0.0
    return fake_openai_server


@pytest.fixture
def make_settings(database_url: str, tmp_path: Path) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            **service_database(database_url),
            "jwt_secret": TEST_SECRET,
            "TODO_AGENT_DATA_DIR": tmp_path / "data",
            "chat_rate_limit_per_minute": 1000,
        }
        values.update(overrides)
        return Settings(_env_file=None, **values)

    return make


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


@pytest.fixture
def model_settings(make_settings: Callable[..., Settings], model: FakeOpenAI) -> Settings:
    """Settings for an app whose model is the scripted server, with quick timeouts."""
    return make_settings(
        openai_api_key="sk-test",
        openai_base_url=model.base_url,
        openai_timeout_s=2.0,
        openai_retry_budget_s=3.0,
    )


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan running, behind an async client over ASGI."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


@pytest.fixture
async def app(settings: Settings, engine: AsyncEngine) -> AsyncIterator[FastAPI]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """The app with no model configured: chat is answered by the stub responder."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


@pytest.fixture
async def agent_client(
    model_settings: Settings, engine: AsyncEngine
) -> AsyncIterator[httpx.AsyncClient]:
    """The app talking to the scripted model server through the real openai SDK."""
    async with serving(model_settings) as client:
        yield client


@asynccontextmanager
async def acting_as(engine: AsyncEngine, user: str) -> AsyncIterator[AsyncSession]:
    """A unit of work as the service runs one: as its role (row-level security holds it),
    acting for `user`, committed at the end."""
    async with AsyncSession(engine, expire_on_commit=False) as session, session.begin():
        connection = await session.connection()
        await connection.execute(_ACTING_AS, {"user": user})
        yield session


_ACTING_AS = text(
    "SELECT set_config('role', 'todo_agent_app', true),"
    " set_config('todo_agent.user_id', :user, true)"
)


@pytest.fixture
async def db(engine: AsyncEngine) -> AsyncIterator[AsyncSession]:
    """A session for arranging and inspecting data directly; commits on success."""
    async with AsyncSession(engine, expire_on_commit=False) as session, session.begin():
        yield session


def server_env(
    database_url: str, model: FakeOpenAI | None = None, **settings: str
) -> dict[str, str]:
    """The environment of a `todo-agent serve` process on the test database (and model)."""
    env = {
        **{name.upper(): url for name, url in service_database(database_url).items()},
        "JWT_SECRET": TEST_SECRET,
        # Else each server would make one in the data dir (./.todo-agent) of the checkout.
        "MCP_STATE_SECRET": TEST_MCP_STATE_SECRET,
        # ... and a Web Push key pair there (docs/notifications.md).
        "VAPID_PRIVATE_KEY": TEST_VAPID_PRIVATE_KEY,
        **settings,
    }
    if model is not None:
        env |= {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": model.base_url}
    return env


def token_for(user_id: str, **claims: Any) -> str:
    return create_token(secret=TEST_SECRET, user_id=user_id, **claims)


def auth(user_id: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_for(user_id)}"}
