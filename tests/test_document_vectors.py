"""Search by meaning: passages' vectors (pgvector, on an embedded PostgreSQL of this
module's own, migrated) computed in the background through the fake's `/v1/embeddings`,
fused with the words' ranking, by the REST search, the agent's tool, the MCP tool and the
stub alike; and what an embeddings server that fails, a change of model, and a database
without pgvector change for the person (nothing, but "car" finding "vehicle")."""

import asyncio
import logging
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.embedded_db import EmbeddedPostgres
from backend.main import create_app
from backend.migrations import migrate
from backend.settings import Settings
from tests.chat_helpers import chat
from tests.conftest import TEST_SECRET, acting_as, auth, migrated_engine, serving
from tests.fake_openai import (
    FakeOpenAI,
    JSONObject,
    Step,
    call,
    error,
    hang,
    reply,
    tool_calls,
    vectors,
)
from tests.test_mcp import as_alice, structured

GARAGE = """# Garage

## Parking
The vehicle stays in the garage overnight, keys on the hook.

## Tools
The drill and the ladder hang on the back wall.
"""
SHOPPING = """# Shopping

## Groceries
Buy oat milk, bread and apples on Saturday.
"""
WAIT_S = 20.0


@pytest.fixture(scope="module")
def vector_database_url() -> str:
    """An embedded PostgreSQL 16 with pgvector, whatever TEST_DATABASE_URL says (it stops
    with the test process)."""
    return EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="todo-agent-vectors-"))).start()


@pytest.fixture(scope="module")
async def vector_engine(vector_database_url: str) -> AsyncIterator[AsyncEngine]:
    async with migrated_engine(vector_database_url) as engine:
        yield engine


@pytest.fixture
async def vector_db(vector_engine: AsyncEngine) -> AsyncEngine:
    async with vector_engine.begin() as connection:
        await connection.execute(text("TRUNCATE users, events RESTART IDENTITY CASCADE"))
    return vector_engine


@pytest.fixture
def vector_settings(
    vector_database_url: str, model: FakeOpenAI, tmp_path: Path
) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "database_url": vector_database_url,
            "jwt_secret": TEST_SECRET,
            "TODO_AGENT_DATA_DIR": tmp_path / "data",
            "embeddings_model": "embed-a",
            "embeddings_base_url": model.base_url,
            "embeddings_api_key": "sk-test",
            "embeddings_retry_s": 0.1,
            "embeddings_query_timeout_s": 2.0,
        }
        values.update(overrides)
        return Settings(_env_file=None, **values)

    return make


async def _upload(client: httpx.AsyncClient, user: str, title: str, body: str) -> Any:
    response = await client.post(
        f"/api/{user}/documents", json={"title": title, "text": body}, headers=auth(user)
    )
    assert response.status_code == 201, response.text
    return response.json()


async def _search(client: httpx.AsyncClient, user: str, query: str) -> list[str]:
    """The headings found, best first."""
    response = await client.get(
        f"/api/{user}/documents/search", params={"q": query}, headers=auth(user)
    )
    assert response.status_code == 200, response.text
    return [hit["heading"] for hit in response.json()["data"]]


async def _vectors(engine: AsyncEngine, model: str) -> int:
    async with engine.connect() as connection:
        found = await connection.execute(
            text("SELECT count(*) FROM passage_vectors WHERE model = :m AND dims IS NOT NULL"),
            {"m": model},
        )
        return int(found.scalar_one())


async def _passages(engine: AsyncEngine) -> int:
    async with engine.connect() as connection:
        return int((await connection.execute(text("SELECT count(*) FROM passages"))).scalar_one())


async def _embedded(engine: AsyncEngine, model: str) -> None:
    """Wait until every passage has its vector of `model` (the worker runs on its own)."""
    async with asyncio.timeout(WAIT_S):
        while await _vectors(engine, model) < await _passages(engine):
            await asyncio.sleep(0.05)


async def test_car_finds_the_vehicle_only_by_meaning(
    vector_db: AsyncEngine, vector_settings: Callable[..., Settings], model: FakeOpenAI
) -> None:
    async with serving(vector_settings(embeddings_model=None)) as client:
        await _upload(client, "alice", "Garage", GARAGE)
        await _upload(client, "alice", "Shopping", SHOPPING)
        assert await _search(client, "alice", "where is the car") == []
    assert model.embedding_requests == []  # no model: nothing asked, nothing computed
    async with serving(vector_settings()) as client:
        await _embedded(vector_db, "embed-a")
        found = await _search(client, "alice", "where is the car")
        assert found[0] == "Garage \u203a Parking", found
        # Words still count: a passage holding the words comes first.
        assert (await _search(client, "alice", "drill ladder"))[0] == "Garage \u203a Tools"
        # Another person reads none of it, by words or by meaning, nor the vectors
        # themselves (row-level security, as for passages).
        assert await _search(client, "bob", "where is the car") == []
    count = text("SELECT count(*) FROM passage_vectors")
    async with acting_as(vector_db, "bob") as db:
        assert (await db.exec(count)).one()[0] == 0  # type: ignore[call-overload]
    async with acting_as(vector_db, "alice") as db:
        assert (await db.exec(count)).one()[0] == 3  # type: ignore[call-overload]


@asynccontextmanager
async def _app(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The app with its lifespan running (for MCP), and a client over ASGI."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield app, client


async def _agent_finds(client: httpx.AsyncClient, model: FakeOpenAI, user: str) -> list[str]:
    """The headings the scripted model's `search_documents` call for "car" got."""
    model.script(tool_calls(call("search_documents", {"query": "car", "list": None})), reply("OK"))
    answer = await chat(client, "where did I leave the car?", user=user)
    [result] = [r["result"] for r in answer["tool_results"] if r["name"] == "search_documents"]
    return [passage["heading"] for passage in result["passages"]]


async def test_the_agents_tool_searches_by_meaning_too(
    vector_db: AsyncEngine, vector_settings: Callable[..., Settings], model: FakeOpenAI
) -> None:
    chatting = {"openai_api_key": "sk-test", "openai_base_url": model.base_url}
    async with serving(vector_settings(embeddings_model=None, **chatting)) as client:
        await _upload(client, "alice", "Garage", GARAGE)
        await _upload(client, "alice", "Shopping", SHOPPING)
        assert await _agent_finds(client, model, "alice") == []
    async with serving(vector_settings(**chatting)) as client:
        await _embedded(vector_db, "embed-a")
        assert (await _agent_finds(client, model, "alice"))[0] == "Garage \u203a Parking"
        assert await _agent_finds(client, model, "bob") == []  # only what they read
    assert ["car"] in [request.body["input"] for request in model.embedding_requests]


async def test_the_mcp_tool_and_the_stub_search_by_meaning_too(
    vector_db: AsyncEngine, vector_settings: Callable[..., Settings], model: FakeOpenAI
) -> None:
    async def found_over_mcp(app: FastAPI) -> list[str]:
        async with as_alice(app) as alice:
            result = await alice.call_tool("search_documents", {"query": "car", "list": None})
        return [passage["heading"] for passage in structured(result)["passages"]]

    async def stub_says(client: httpx.AsyncClient, user: str = "alice") -> str:
        answer = await chat(client, "search my notes for car", user=user)
        assert answer["using_stub"] is True
        return str(answer["response"])

    async with _app(vector_settings(embeddings_model=None)) as (app, client):
        await _upload(client, "alice", "Garage", GARAGE)
        assert await found_over_mcp(app) == []
        assert "keys on the hook" not in await stub_says(client)
    async with _app(vector_settings()) as (app, client):
        await _embedded(vector_db, "embed-a")
        assert (await found_over_mcp(app))[0] == "Garage \u203a Parking"
        said = await stub_says(client)
        assert said.startswith("From \u201cGarage\u201d \u203a Parking:\n"), said
        assert "keys on the hook" not in await stub_says(client, user="bob")


async def test_an_embeddings_server_that_is_down_changes_nothing_but_meaning(
    vector_db: AsyncEngine, vector_settings: Callable[..., Settings], model: FakeOpenAI
) -> None:
    model.embeddings_default = error(500)
    async with serving(vector_settings()) as client:
        await _upload(client, "alice", "Garage", GARAGE)
        assert (await _search(client, "alice", "garage keys"))[0] == "Garage \u203a Parking"
        assert await _search(client, "alice", "where is the car") == []
        await asyncio.sleep(0.3)  # the worker tries, fails, tries again later
        assert await _vectors(vector_db, "embed-a") == 0
        model.embeddings_default = vectors()
        await _embedded(vector_db, "embed-a")
        assert (await _search(client, "alice", "where is the car"))[0] == "Garage \u203a Parking"


async def test_a_hanging_embeddings_server_does_not_hold_up_a_search(
    vector_db: AsyncEngine, vector_settings: Callable[..., Settings], model: FakeOpenAI
) -> None:
    async with serving(vector_settings(embeddings_query_timeout_s=0.3)) as client:
        await _upload(client, "alice", "Garage", GARAGE)
        await _embedded(vector_db, "embed-a")
        model.embeddings_default = hang()
        assert (await _search(client, "alice", "garage keys"))[0] == "Garage \u203a Parking"


async def test_a_new_model_ignores_the_old_vectors_and_embeds_again(
    vector_db: AsyncEngine, vector_settings: Callable[..., Settings], model: FakeOpenAI
) -> None:
    async with serving(vector_settings()) as client:
        await _upload(client, "alice", "Garage", GARAGE)
        await _embedded(vector_db, "embed-a")

    def only_queries(body: JSONObject) -> Step:
        return vectors() if body["input"] == ["where is the car"] else error(500)

    # The new model answers searches but not the worker yet: embed-a's vectors are there,
    # and must not be compared with embed-b's query.
    model.embeddings_default = only_queries
    model.embedding_dimensions = 32
    async with serving(vector_settings(embeddings_model="embed-b")) as client:
        assert await _search(client, "alice", "where is the car") == []
        asked = [r.body["model"] for r in model.embedding_requests]
        assert asked[-1] == "embed-b"
        model.embeddings_default = vectors()
        await _embedded(vector_db, "embed-b")
        assert (await _search(client, "alice", "where is the car"))[0] == "Garage \u203a Parking"
    assert await _vectors(vector_db, "embed-a") == 0  # replaced, not kept beside


async def test_each_passage_version_is_embedded_once_however_many_replicas(
    vector_db: AsyncEngine, vector_settings: Callable[..., Settings], model: FakeOpenAI
) -> None:
    sections = "\n\n".join(f"## Room {n}\nBox {n} holds the things of room {n}." for n in range(40))
    settings = vector_settings(embeddings_batch=4)
    async with serving(settings) as first, serving(settings) as second:
        made = await _upload(first, "alice", "Boxes", "# Boxes\n\n" + sections)
        await _upload(second, "alice", "Garage", GARAGE)
        await _embedded(vector_db, "embed-a")
        await asyncio.sleep(0.3)  # both workers have looked again since
        embedded = Counter(model.embedded_inputs())
        assert len(embedded) == made["passages"] + 2
        assert set(embedded.values()) == {1}
        # A replaced document: only the passage whose content changed is embedded again.
        changed = sections.replace("Box 7 holds", "Box 7 now holds")
        response = await first.put(
            f"/api/alice/documents/{made['id']}",
            json={"title": "Boxes", "text": "# Boxes\n\n" + changed},
            headers=auth("alice"),
        )
        assert response.status_code == 200, response.text
        await _embedded(vector_db, "embed-a")
        await asyncio.sleep(0.3)
        again = Counter(model.embedded_inputs()) - embedded
        assert list(again.values()) == [1], again
        assert "Box 7 now holds" in next(iter(again))


async def test_without_pgvector_words_serve_and_the_service_says_so_once(
    engine: AsyncEngine,
    make_settings: Callable[..., Settings],
    model: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with engine.connect() as connection:
        found = await connection.execute(
            text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        )
        if found.first() is not None:
            pytest.skip("this database has pgvector (run with TEST_DATABASE_URL on one without)")
    settings = make_settings(embeddings_model="embed-a", embeddings_base_url=model.base_url)
    with caplog.at_level(logging.WARNING, logger="todo_agent.vectors"):
        async with serving(settings) as client:
            await _upload(client, "alice", "Garage", GARAGE)
            assert (await _search(client, "alice", "garage keys"))[0] == "Garage \u203a Parking"
            assert await _search(client, "alice", "where is the car") == []
    said = [r.getMessage() for r in caplog.records if r.name == "todo_agent.vectors"]
    assert len(said) == 1, said
    assert "no pgvector" in said[0]
    assert model.embedding_requests == []  # no vectors to compare: the query is not embedded


async def test_a_database_that_gets_pgvector_later_gets_the_vectors_as_the_latest_revision_has_them(
    vector_db: AsyncEngine,
) -> None:
    """pgvector installed after the migrations ran (here: its objects dropped as 0012's
    downgrade drops them): the next `migrate` makes them, as later revisions changed them
    too (0016's row estimate, without which search joins every passage)."""
    async with vector_db.begin() as connection:
        await connection.execute(text("DROP FUNCTION todo_nearest_passages"))
        await connection.execute(text("DROP TABLE passage_vectors"))
        await connection.execute(text("ALTER TABLE passages DROP CONSTRAINT uq_passages_list_id"))
    await migrate(vector_db)
    async with vector_db.connect() as connection:
        rows = await connection.execute(
            text("SELECT prorows FROM pg_proc WHERE proname = 'todo_nearest_passages'")
        )
        assert rows.scalar_one() == 10
        assert (await connection.execute(text("SELECT to_regclass('passage_vectors')"))).scalar()
