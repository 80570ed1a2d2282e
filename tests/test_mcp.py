"""The todo tools as an MCP server at /mcp, driven by the MCP SDK's own client.

In-process (the app over ASGI, the SDK's `ClientSession` on the Streamable HTTP transport)
for the protocol, the tools, tenancy, auth and limits; real `todo-agent serve` processes
for the CLI's tokens and for concurrent calls across processes.
"""

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from fastapi import FastAPI
from mcp import ClientSession, types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types.version import LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.main import create_app
from backend.services.mcp import ANNOTATIONS, NOT_SERVED
from backend.services.tools import TOOL_DEFINITIONS
from backend.settings import Settings
from tests.conftest import auth, server_env, token_for
from tests.servers import ServerProcess, run_cli

LOCAL = "http://127.0.0.1"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": LATEST_HANDSHAKE_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}

# The agent's tools but undo_last_turn: undoing a chat turn is the chat's.
SERVED = {d["function"]["name"] for d in TOOL_DEFINITIONS} - NOT_SERVED


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[FastAPI]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield app


@asynccontextmanager
async def mcp_session(
    url: str, token: str | None, *, app: FastAPI | None = None
) -> AsyncIterator[ClientSession]:
    """The SDK's client session on Streamable HTTP, initialized (the handshake era)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx2.ASGITransport(app=app) if app is not None else None
    async with (
        httpx2.AsyncClient(headers=headers, transport=transport, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def rest(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=LOCAL)


def structured(result: types.CallToolResult) -> dict[str, Any]:
    """The result as structured content, checked to be the same as its JSON text."""
    assert not result.is_error, result.content
    [text] = result.content
    assert isinstance(text, types.TextContent)
    assert json.loads(text.text) == result.structured_content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def tool_error(result: types.CallToolResult) -> str:
    assert result.is_error
    [text] = result.content
    assert isinstance(text, types.TextContent)
    body = json.loads(text.text)
    assert body["status"] == "error"
    message: str = body["error"]
    return message


@pytest.fixture
async def app(settings: Settings, engine: AsyncEngine) -> AsyncIterator[FastAPI]:
    async with running(settings) as app:
        yield app


def as_alice(app: FastAPI) -> AbstractAsyncContextManager[ClientSession]:
    # Not a fixture: the client's task group must be left by the task that entered it.
    return mcp_session(f"{LOCAL}/mcp", token_for("alice"), app=app)


# --------------------------------------------------------------------------- the protocol


async def test_the_tools_are_the_agents_tools_with_annotations(
    app: FastAPI,
) -> None:
    async with as_alice(app) as alice:
        listed = await alice.list_tools()

        by_name = {tool.name: tool for tool in listed.tools}
        # Undoing a chat turn is the chat's: MCP calls are not turns.
        served = [d for d in TOOL_DEFINITIONS if d["function"]["name"] in SERVED]
        assert list(by_name) == [d["function"]["name"] for d in served]
        for definition in served:
            function = definition["function"]
            tool = by_name[function["name"]]
            assert tool.input_schema == function["parameters"]
            assert tool.description == function["description"]
            assert tool.output_schema is not None
            assert tool.output_schema["type"] == "object"
            assert tool.annotations == ANNOTATIONS[tool.name]
            assert tool.annotations.open_world_hint is False
        assert by_name["list_todos"].annotations.read_only_hint is True  # type: ignore[union-attr]
        assert by_name["get_user_context"].annotations.read_only_hint is True  # type: ignore[union-attr]
        assert by_name["delete_todo"].annotations.destructive_hint is True  # type: ignore[union-attr]
        assert by_name["purge_trash"].annotations.destructive_hint is True  # type: ignore[union-attr]
        assert by_name["restore_todo"].annotations.destructive_hint is False  # type: ignore[union-attr]
        assert by_name["update_todo"].annotations.destructive_hint is True  # type: ignore[union-attr]
        assert by_name["complete_todo"].annotations.idempotent_hint is True  # type: ignore[union-attr]


async def test_the_handshake_negotiates_the_latest_handshake_version(app: FastAPI) -> None:
    async with rest(app) as http:
        response = await http.post(
            "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **auth("alice")}
        )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert "mcp-session-id" not in response.headers  # stateless
    result = response.json()["result"]
    assert result["protocolVersion"] == LATEST_HANDSHAKE_VERSION
    assert result["serverInfo"]["name"] == "todo-agent"
    assert "tools" in result["capabilities"]


async def test_a_modern_client_discovers_and_calls_without_a_handshake(app: FastAPI) -> None:
    headers = {"Authorization": f"Bearer {token_for('alice')}"}
    async with (
        httpx2.AsyncClient(
            headers=headers, transport=httpx2.ASGITransport(app=app), timeout=30
        ) as http,
        Client(streamable_http_client(f"{LOCAL}/mcp", http_client=http)) as client,
    ):
        assert client.protocol_version == LATEST_MODERN_VERSION
        added = structured(await client.call_tool("add_todo", {"title": "Modern milk"}))
        listed = await client.list_tools()
    assert added["todo"]["title"] == "Modern milk"
    assert {tool.name for tool in listed.tools} == SERVED


async def test_every_tool_works_and_the_rest_api_sees_the_effect(app: FastAPI) -> None:
    async with as_alice(app) as alice:
        added = structured(
            await alice.call_tool(
                "add_todo", {"title": "Buy milk", "priority": "high", "tags": ["errand"]}
            )
        )
        assert added["status"] == "created"
        number = added["todo"]["number"]
        async with rest(app) as http:
            [task] = (await http.get("/api/alice/tasks", headers=auth("alice"))).json()["data"]
            assert (task["id"], task["title"], task["priority"]) == (
                added["todo"]["id"],
                "Buy milk",
                "high",
            )

            listed = structured(await alice.call_tool("list_todos", {"status": "pending"}))
            assert [t["number"] for t in listed["todos"]] == [number]
            assert listed["total"] == 1

            updated = structured(
                await alice.call_tool("update_todo", {"todo_id": f"#{number}", "title": "Oat milk"})
            )
            assert updated["status"] == "updated"
            task = (await http.get(f"/api/alice/tasks/{number}", headers=auth("alice"))).json()
            assert task["title"] == "Oat milk"

            completed = structured(await alice.call_tool("complete_todo", {"todo_id": str(number)}))
            assert completed["status"] == "completed"
            again = structured(await alice.call_tool("complete_todo", {"todo_id": str(number)}))
            assert again["todo"] == completed["todo"]  # idempotent, as annotated
            task = (await http.get(f"/api/alice/tasks/{number}", headers=auth("alice"))).json()
            assert task["completed"] is True

            context = structured(await alice.call_tool("get_user_context", {}))
            assert (context["pending"], context["completed"], context["timezone"]) == (0, 1, "UTC")

            deleted = structured(await alice.call_tool("delete_todo", {"todo_id": task["id"]}))
            assert (deleted["status"], deleted["title"]) == ("deleted", "Oat milk")
            response = await http.get(f"/api/alice/tasks/{number}", headers=auth("alice"))
            assert response.status_code == 404


async def test_invalid_arguments_are_a_tool_error_not_a_protocol_error(app: FastAPI) -> None:
    async with as_alice(app) as alice:
        assert "title" in tool_error(await alice.call_tool("add_todo", {}))
        assert "limit" in tool_error(await alice.call_tool("list_todos", {"limit": 500}))
        assert (
            "extra"
            in tool_error(await alice.call_tool("add_todo", {"title": "x", "owner": "bob"})).lower()
        )
        assert "priority" in tool_error(
            await alice.call_tool("add_todo", {"title": "x", "priority": "urgent"})
        )
        assert "Unknown tool" in tool_error(await alice.call_tool("drop_tables", {}))
        assert "No task" in tool_error(await alice.call_tool("delete_todo", {"todo_id": "99"}))
        # And on the wire: a JSON-RPC result with isError, in a 200.
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "add_todo", "arguments": {"title": ["not", "text"]}},
        }
        async with rest(app) as http:
            response = await http.post(
                "/mcp",
                json=call,
                headers={
                    **MCP_HEADERS,
                    **auth("alice"),
                    "Mcp-Protocol-Version": LATEST_HANDSHAKE_VERSION,
                },
            )
        assert response.status_code == 200
        assert response.json()["result"]["isError"] is True


# --------------------------------------------------------------------------- tenancy


async def test_alice_never_sees_or_changes_bobs_tasks(app: FastAPI) -> None:
    async with as_alice(app) as alice:
        async with mcp_session(f"{LOCAL}/mcp", token_for("bob"), app=app) as bob:
            secret = structured(await bob.call_tool("add_todo", {"title": "Bob's secret"}))["todo"]

        assert structured(await alice.call_tool("list_todos", {}))["todos"] == []
        search = structured(await alice.call_tool("list_todos", {"search": "secret"}))
        assert search["total"] == 0
        for ref in (str(secret["number"]), f"#{secret['number']}", secret["id"]):
            for name, extra in (
                ("update_todo", {"title": "pwned"}),
                ("complete_todo", {}),
                ("delete_todo", {}),
            ):
                message = tool_error(await alice.call_tool(name, {"todo_id": ref, **extra}))
                assert "not found" in message.lower()
        assert structured(await alice.call_tool("get_user_context", {}))["pending"] == 0

        async with rest(app) as http:
            task = (await http.get(f"/api/bob/tasks/{secret['id']}", headers=auth("bob"))).json()
        assert (task["title"], task["completed"]) == ("Bob's secret", False)


# --------------------------------------------------------------------------- auth


def _challenge(response: httpx.Response) -> str:
    assert response.status_code == 401, response.text
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert 'resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource/mcp"' in (
        challenge
    )
    assert "detail" in response.json()
    return challenge


async def _post_initialize(app: FastAPI, headers: dict[str, str]) -> httpx.Response:
    async with rest(app) as http:
        return await http.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **headers})


async def test_without_a_valid_token_it_is_401_pointing_at_the_metadata(app: FastAPI) -> None:
    missing = _challenge(await _post_initialize(app, {}))
    assert "error=" not in missing  # RFC 6750: no error code when no token was sent
    for headers in (
        {"Authorization": "Bearer not-a-jwt"},
        {"Authorization": f"Bearer {token_for('alice', ttl_s=-120)}"},
        {"Authorization": f"Basic {token_for('alice')}"},
        {"Authorization": f"Bearer {token_for('alice')[:-4]}AAAA"},
    ):
        response = await _post_initialize(app, headers)
        if headers["Authorization"].startswith("Basic"):
            _challenge(response)
        else:
            assert 'error="invalid_token"' in _challenge(response)
    expired = await _post_initialize(
        app, {"Authorization": f"Bearer {token_for('alice', ttl_s=-120)}"}
    )
    assert "expired" in expired.json()["detail"]


async def test_the_sdk_client_sees_the_401_as_an_error(app: FastAPI) -> None:
    with pytest.raises(BaseExceptionGroup) as raised:
        async with mcp_session(f"{LOCAL}/mcp", None, app=app):
            pass

    def leaves(error: BaseException) -> list[BaseException]:
        if isinstance(error, BaseExceptionGroup):
            return [leaf for inner in error.exceptions for leaf in leaves(inner)]
        return [error]

    assert any(isinstance(error, MCPError) for error in leaves(raised.value))


async def test_with_audiences_configured_only_tokens_for_the_mcp_resource_are_accepted(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    settings = make_settings(jwt_audience="todo-web", public_base_url="https://todo.example.com/")
    resource = "https://todo.example.com/mcp"
    async with running(settings) as app:
        web_token = token_for("alice", audience="todo-web")
        response = await _post_initialize(app, {"Authorization": f"Bearer {web_token}"})
        assert response.status_code == 401
        assert response.json()["detail"] == "Token audience not accepted."
        challenge = response.headers["www-authenticate"]
        assert (
            'resource_metadata="https://todo.example.com/.well-known/oauth-protected-resource/mcp"'
            in challenge
        )
        mcp_token = token_for("alice", audience=resource)
        response = await _post_initialize(app, {"Authorization": f"Bearer {mcp_token}"})
        assert response.status_code == 200
        # ... and a token for the MCP resource is not one for the API.
        async with rest(app) as http:
            api = await http.get(
                "/api/alice/tasks", headers={"Authorization": f"Bearer {mcp_token}"}
            )
        assert api.status_code == 401


async def test_an_explicit_mcp_audience_wins(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    async with running(make_settings(mcp_jwt_audience="todo-mcp")) as app:
        wrong = token_for("alice", audience="https://elsewhere.example/mcp")
        assert (await _post_initialize(app, {"Authorization": f"Bearer {wrong}"})).status_code == (
            401
        )
        right = token_for("alice", audience=["other", "todo-mcp"])
        assert (await _post_initialize(app, {"Authorization": f"Bearer {right}"})).status_code == (
            200
        )


async def test_the_metadata_names_the_resource_and_the_identity_provider(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    settings = make_settings(
        jwt_issuer="https://auth.example.com", public_base_url="https://todo.example.com"
    )
    async with running(settings) as app, rest(app) as http:
        response = await http.get("/.well-known/oauth-protected-resource/mcp")
    assert response.status_code == 200
    assert response.json() == {
        "resource": "https://todo.example.com/mcp",
        "authorization_servers": ["https://auth.example.com"],
        "bearer_methods_supported": ["header"],
        "resource_name": "todo-agent",
    }


async def test_an_identity_provider_that_is_down_is_503_not_500(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    settings = make_settings(
        jwt_secret=None, jwt_jwks_url="http://127.0.0.1:9/jwks.json", jwt_algorithms="RS256"
    )
    header = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0"  # {"alg":"RS256","kid":"k1"}
    async with running(settings) as app:
        response = await _post_initialize(app, {"Authorization": f"Bearer {header}.e30.c2ln"})
    assert response.status_code == 503
    assert "retry-after" in response.headers


# --------------------------------------------------------------------------- HTTP


async def test_host_and_origin_are_checked_against_the_public_url(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    settings = make_settings(
        public_base_url="https://todo.example.com", cors_origins="https://app.example.com"
    )
    async with running(settings) as app:
        token = {"Authorization": f"Bearer {token_for('alice', audience=None)}"}
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="https://todo.example.com"
        ) as public:
            ok = await public.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **token})
            browser = await public.post(
                "/mcp",
                json=INITIALIZE,
                headers={**MCP_HEADERS, **token, "Origin": "https://app.example.com"},
            )
            evil_origin = await public.post(
                "/mcp",
                json=INITIALIZE,
                headers={**MCP_HEADERS, **token, "Origin": "https://evil.example"},
            )
            preflight = await public.options(
                "/mcp",
                headers={
                    "Origin": "https://app.example.com",
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization,content-type,"
                    "mcp-protocol-version,mcp-session-id",
                },
            )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://rebound.example"
        ) as rebound:
            evil_host = await rebound.post(
                "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **token}
            )
    assert ok.status_code == 200
    assert browser.status_code == 200
    assert evil_origin.status_code == 403
    assert evil_host.status_code == 421
    assert preflight.status_code == 200
    assert "mcp-protocol-version" in preflight.headers["access-control-allow-headers"].lower()


async def test_mcp_has_no_redirect_and_unknown_paths_keep_the_json_404(app: FastAPI) -> None:
    async with rest(app) as http:
        at_mcp = await http.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **auth("a")})
        stream = await http.get("/mcp", headers={**MCP_HEADERS, **auth("a")})
        below = await http.get("/mcp/anything")
        unknown = await http.get("/nowhere")
    assert at_mcp.status_code == 200
    assert stream.status_code == 405  # stateless: no stream to open
    for response in (below, unknown):
        assert response.status_code == 404
        assert response.json() == {"detail": "Not Found"}


async def test_mcp_can_be_switched_off(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    async with running(make_settings(mcp_enabled=False)) as app, rest(app) as http:
        response = await http.post("/mcp", json=INITIALIZE, headers=auth("alice"))
        metadata = await http.get("/.well-known/oauth-protected-resource/mcp")
    assert response.status_code == 404
    assert metadata.status_code == 404


async def test_the_app_can_be_started_again(settings: Settings, engine: AsyncEngine) -> None:
    for title in ("first", "second"):
        async with (
            running(settings) as app,
            mcp_session(f"{LOCAL}/mcp", token_for("alice"), app=app) as session,
        ):
            structured(await session.call_tool("add_todo", {"title": title}))


# --------------------------------------------------------------------------- limits, records


async def test_tool_calls_count_against_the_users_rate_limit(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    async with (
        running(make_settings(chat_rate_limit_per_minute=2)) as app,
        mcp_session(f"{LOCAL}/mcp", token_for("alice"), app=app) as session,
    ):
        for _ in range(2):
            structured(await session.call_tool("list_todos", {}))
        assert "Too many requests" in tool_error(await session.call_tool("list_todos", {}))
        async with rest(app) as http:  # the chat shares the budget
            chat = await http.post(
                "/api/alice/chat", json={"message": "show my tasks"}, headers=auth("alice")
            )
        assert chat.status_code == 429
        async with mcp_session(f"{LOCAL}/mcp", token_for("bob"), app=app) as bob:
            structured(await bob.call_tool("list_todos", {}))  # bob has his own


async def test_each_call_is_counted_and_logged_without_its_arguments(
    app: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    async with as_alice(app) as alice:

        async def counted(tool: str, outcome: str) -> float:
            async with rest(app) as http:
                text = (await http.get("/metrics")).text
            prefix = "todo_agent_tool_calls_total{"
            for line in text.splitlines():
                if (
                    line.startswith(prefix)
                    and f'tool="{tool}"' in line
                    and f'outcome="{outcome}"' in line
                    and 'via="mcp"' in line
                ):
                    return float(line.rsplit(" ", 1)[1])
            return 0.0

        ok_before, error_before = (
            await counted("add_todo", "ok"),
            await counted("add_todo", "error"),
        )
        with caplog.at_level("INFO", logger="todo_agent.mcp"):
            structured(await alice.call_tool("add_todo", {"title": "Secret plan"}))
            tool_error(await alice.call_tool("add_todo", {"title": "Secret plan", "priority": "x"}))
        assert await counted("add_todo", "ok") == ok_before + 1
        assert await counted("add_todo", "error") == error_before + 1
        lines = [r for r in caplog.records if r.name == "todo_agent.mcp"]
        assert [(r.user_id, r.tool, r.outcome) for r in lines] == [  # type: ignore[attr-defined]
            ("alice", "add_todo", "ok"),
            ("alice", "add_todo", "error"),
        ]
        assert "Secret plan" not in caplog.text


# --------------------------------------------------------------------------- real servers


@pytest.fixture(scope="module")
def servers(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two `todo-agent serve` processes on one database; tokens must be for the resource."""
    env = server_env(database_url, MCP_JWT_AUDIENCE="todo-mcp", CHAT_RATE_LIMIT_PER_MINUTE="1000")
    logs = tmp_path_factory.mktemp("mcp-servers")
    with (
        ServerProcess(env, log=logs / "a.log") as first,
        ServerProcess(env, log=logs / "b.log") as second,
    ):
        yield first, second


def cli_token(user: str, database_url: str, audience: str) -> str:
    done = run_cli("token", user, "--audience", audience, env=server_env(database_url))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def test_a_served_mcp_server_with_a_cli_token(
    servers: tuple[ServerProcess, ServerProcess], database_url: str, engine: AsyncEngine
) -> None:
    first, _ = servers
    token = cli_token("carol", database_url, "todo-mcp")
    async with mcp_session(f"{first.url}/mcp", token) as session:
        names = {tool.name for tool in (await session.list_tools()).tools}
        added = structured(await session.call_tool("add_todo", {"title": "Served"}))
    assert names == SERVED
    async with httpx.AsyncClient(base_url=first.url) as http:
        tasks = (await http.get("/api/carol/tasks", headers=auth("carol"))).json()["data"]
        refused = await http.post(
            "/mcp",
            json=INITIALIZE,
            headers={**MCP_HEADERS, "Authorization": f"Bearer {token_for('carol')}"},
        )
    assert [t["id"] for t in tasks] == [added["todo"]["id"]]
    assert refused.status_code == 401  # no audience: a token for the API, not for /mcp
    assert "resource_metadata=" in refused.headers["www-authenticate"]


async def test_twenty_concurrent_tool_calls_across_two_processes(
    servers: tuple[ServerProcess, ServerProcess], database_url: str, engine: AsyncEngine
) -> None:
    token = cli_token("dave", database_url, "todo-mcp")
    async with (
        mcp_session(f"{servers[0].url}/mcp", token) as first,
        mcp_session(f"{servers[1].url}/mcp", token) as second,
    ):
        results = await asyncio.gather(
            *(
                (first if i % 2 else second).call_tool("add_todo", {"title": f"Task {i}"})
                for i in range(20)
            )
        )
        listed = structured(await first.call_tool("list_todos", {}))
    numbers = sorted(structured(result)["todo"]["number"] for result in results)
    assert numbers == list(range(1, 21))
    assert listed["total"] == 20
    assert sorted(t["title"] for t in listed["todos"]) == sorted(f"Task {i}" for i in range(20))


def test_token_cli_takes_an_audience(database_url: str) -> None:
    from jose import jwt

    token = cli_token("erin", database_url, "https://todo.example.com/mcp")
    claims = jwt.get_unverified_claims(token)
    assert (claims["sub"], claims["aud"]) == ("erin", "https://todo.example.com/mcp")
