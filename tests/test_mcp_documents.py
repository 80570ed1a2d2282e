"""Documents over MCP, driven by the SDK's own client: the documents the token's user reads
are resources (`resources/list`, `resources/read`), and `search_documents` is a tool, with
the tenancy of every MCP call."""

import pytest
from fastapi import FastAPI
from mcp.shared.exceptions import MCPError

from tests.conftest import token_for
from tests.test_documents_agent import LEASE, SECRET, add_document
from tests.test_lists import _send, _share
from tests.test_mcp import LOCAL, as_alice, mcp_session, rest, structured, tool_error


async def test_the_documents_a_user_reads_are_resources_they_can_read(app: FastAPI) -> None:
    async with rest(app) as http:
        lease = await add_document(http, "alice", "Lease", LEASE)
        notes = await add_document(http, "alice", "Notes", "just words")
        plain = {"title": "Notes", "text": "plain words", "media_type": "text/plain"}
        await _send(http, "PUT", "alice", f"/documents/{notes['id']}", plain)
    async with as_alice(app) as alice:
        listed = await alice.list_resources()
        by_uri = {resource.uri: resource for resource in listed.resources}
        uri = f"todo-agent://documents/{lease['id']}"
        assert set(by_uri) == {uri, f"todo-agent://documents/{notes['id']}"}
        assert (by_uri[uri].name, by_uri[uri].title) == ("Lease", "Lease")
        assert by_uri[uri].mime_type == "text/markdown"

        read = await alice.read_resource(uri)
        [contents] = read.contents
        assert (contents.uri, contents.mime_type) == (uri, "text/markdown")
        assert "small dogs" in getattr(contents, "text", "")
        as_text = await alice.read_resource(f"todo-agent://documents/{notes['id']}")
        assert as_text.contents[0].mime_type == "text/plain"


async def test_search_documents_is_a_read_only_tool(app: FastAPI) -> None:
    async with rest(app) as http:
        lease = await add_document(http, "alice", "Lease", LEASE)
    async with as_alice(app) as alice:
        tools = {tool.name: tool for tool in (await alice.list_tools()).tools}
        assert tools["search_documents"].annotations.read_only_hint is True  # type: ignore[union-attr]
        found = structured(
            await alice.call_tool("search_documents", {"query": "pets", "list": None})
        )
        assert found["passages"][0]["document_id"] == lease["id"]
        assert found["passages"][0]["heading"].endswith("Pets")
        assert "query" in tool_error(await alice.call_tool("search_documents", {"list": None}))


async def test_another_users_documents_are_neither_listed_read_nor_searched(
    app: FastAPI,
) -> None:
    async with rest(app) as http:
        plans = await _send(http, "POST", "alice", "/lists", {"name": "Plans"}, expect=201)
        secret = await add_document(http, "alice", "Secret plans", SECRET, plans["id"])
    uri = f"todo-agent://documents/{secret['id']}"
    async with mcp_session(f"{LOCAL}/mcp", token_for("bob"), app=app) as bob:
        assert (await bob.list_resources()).resources == []
        for foreign in (uri, "todo-agent://documents/not-a-uuid", "file:///etc/passwd"):
            with pytest.raises(MCPError) as refused:
                await bob.read_resource(foreign)
            assert "oak" not in str(refused.value)
        searched = structured(
            await bob.call_tool("search_documents", {"query": "treasure oak", "list": None})
        )
        assert searched == {"passages": []}
        for ref in (plans["id"], "Plans"):
            message = tool_error(
                await bob.call_tool("search_documents", {"query": "treasure", "list": ref})
            )
            assert "No list" in message
            assert "oak" not in message

        async with rest(app) as http:
            await _share(http, "alice", plans["id"], "bob", "viewer")
        assert [r.uri for r in (await bob.list_resources()).resources] == [uri]
        assert "old oak" in getattr((await bob.read_resource(uri)).contents[0], "text", "")

        async with rest(app) as http:
            await _send(http, "DELETE", "alice", f"/lists/{plans['id']}/members/bob", expect=204)
        assert (await bob.list_resources()).resources == []
        with pytest.raises(MCPError):
            await bob.read_resource(uri)
