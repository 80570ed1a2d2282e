"""The agent reads documents: the tool `search_documents` through a scripted model (the real
openai SDK against tests/fake_openai.py), its tenancy, and the passages a turn used as
`source-document` parts on /chat/ui and in its ?format=ui history."""

from typing import Any

import httpx
import pytest

from backend.services.agent import SYSTEM_PROMPT
from backend.services.documents.sections import HEADING_JOINER as JOIN
from tests.chat_helpers import chat
from tests.conftest import auth
from tests.fake_openai import FakeOpenAI, call, reply, tool_calls
from tests.test_chat_ui import body, chunks_of, post_ui
from tests.test_documents import pdf, upload
from tests.test_lists import _send, _share

LEASE = """# Lease

## Rent

The rent is due on the first of each month, by bank transfer.

## Pets

Cats and small dogs are allowed with the landlord's written consent.
"""
SECRET = "# Secret plans\n\nThe treasure is buried under the old oak.\n"


async def add_document(
    client: httpx.AsyncClient, user: str, title: str, text: str, list_id: str | None = None
) -> dict[str, Any]:
    document = {"title": title, "text": text, **({"list_id": list_id} if list_id else {})}
    added: dict[str, Any] = await _send(client, "POST", user, "/documents", document, expect=201)
    return added


def searched(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The results of the turn's search_documents calls."""
    return [r["result"] for r in answer["tool_results"] if r["name"] == "search_documents"]


async def test_the_model_gets_the_passages_and_answers_naming_document_and_heading(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    lease = await add_document(agent_client, "alice", "Lease", LEASE)
    await add_document(agent_client, "alice", "Recipes", "# Recipes\n\nPancakes need eggs.\n")
    model.script(
        tool_calls(call("search_documents", {"query": "what about pets", "list": None})),
        reply("Your Lease, under Pets, allows cats and small dogs with written consent."),
    )
    answer = await chat(agent_client, "what does the lease say about pets?")

    [result] = searched(answer)
    best = result["passages"][0]
    assert best["document_id"] == lease["id"]
    assert (best["title"], best["heading"]) == ("Lease", f"Lease{JOIN}Pets")
    assert best["media_type"] == "text/markdown"
    assert "small dogs" in best["text"]
    assert len(result["passages"]) <= 5
    # The passages reach the model as the tool's result, the rule to cite them before it.
    messages = model.last_messages()
    assert messages[-1]["role"] == "tool"
    assert "small dogs" in messages[-1]["content"]
    assert "search_documents" in SYSTEM_PROMPT
    assert "heading" in SYSTEM_PROMPT
    assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert "search_documents" in {t["function"]["name"] for t in model.last_request.body["tools"]}
    assert "Lease" in answer["response"]
    assert "Pets" in answer["response"]


async def test_another_users_documents_are_never_reached_through_the_tool(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    plans = await _send(agent_client, "POST", "alice", "/lists", {"name": "Plans"}, expect=201)
    await add_document(agent_client, "alice", "Secret plans", SECRET, plans["id"])
    model.script(
        tool_calls(
            call("search_documents", {"query": "treasure", "list": plans["id"]}),
            call("search_documents", {"query": "treasure", "list": "Plans"}),
            call("search_documents", {"query": "treasure oak", "list": None}),
        ),
        reply("Nothing found."),
    )
    answer = await chat(agent_client, "where is the treasure?", user="bob")

    by_id, by_name, everywhere = searched(answer)
    assert by_id["status"] == by_name["status"] == "error"
    assert "No list" in by_id["error"]
    assert everywhere == {"passages": []}
    assert "old oak" not in str(answer["tool_results"])
    assert "old oak" not in str(model.last_messages())


async def test_a_member_reads_a_shared_lists_documents_until_removed(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    plans = await _send(agent_client, "POST", "alice", "/lists", {"name": "Plans"}, expect=201)
    await add_document(agent_client, "alice", "Secret plans", SECRET, plans["id"])
    await _share(agent_client, "alice", plans["id"], "bob", "viewer")
    search = call("search_documents", {"query": "treasure", "list": "plans"})
    model.script(tool_calls(search), reply("Under the old oak."))
    member = await chat(agent_client, "where is the treasure?", user="bob")
    [found] = searched(member)
    assert [p["title"] for p in found["passages"]] == ["Secret plans"]
    assert "old oak" in found["passages"][0]["text"]

    await _send(agent_client, "DELETE", "alice", f"/lists/{plans['id']}/members/bob", expect=204)
    model.script(
        tool_calls(search, call("search_documents", {"query": "treasure", "list": None})),
        reply("Nothing."),
    )
    removed = await chat(agent_client, "where is the treasure?", user="bob")
    by_name, everywhere = searched(removed)
    assert by_name["status"] == "error"
    assert everywhere == {"passages": []}


async def test_each_passage_used_is_a_source_document_part_live_and_in_the_history(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    lease = await add_document(agent_client, "alice", "Lease", LEASE)
    model.script(
        tool_calls(call("search_documents", {"query": "pets rent", "list": None}, id="call_1")),
        reply("See your Lease: Pets and Rent."),
    )
    response = await post_ui(agent_client, body("what does the lease say?"))
    chunks = chunks_of(response)

    sources = [c for c in chunks if c.get("type") == "source-document"]
    assert {s["title"] for s in sources} == {f"Lease{JOIN}Pets", f"Lease{JOIN}Rent"}
    for source in sources:
        assert set(source) == {"type", "sourceId", "mediaType", "title"}
        assert source["sourceId"].startswith(f"todo-agent://documents/{lease['id']}#")
        assert source["mediaType"] == "text/markdown"  # the Lease's, sent as Markdown text
    assert len({s["sourceId"] for s in sources}) == len(sources)
    kinds = [c.get("type") for c in chunks]
    assert kinds.index("tool-output-available") < kinds.index("source-document")

    session_id = chunks[0]["messageMetadata"]["session_id"]
    history = await agent_client.get(
        f"/api/alice/sessions/{session_id}/messages", params={"format": "ui"}, headers=auth("alice")
    )
    assert history.status_code == 200, history.text
    [_, answer] = history.json()
    parts = [p for p in answer["parts"] if p["type"] == "source-document"]
    assert parts == sources


async def test_a_source_document_has_its_documents_own_media_type(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    paper = await upload(agent_client, "alice", "minutes.pdf", pdf("Budget agreed on Monday"))
    notes = await upload(agent_client, "alice", "wifi.txt", b"The budget password is hunter2.\n")
    model.script(
        tool_calls(call("search_documents", {"query": "budget", "list": None})),
        reply("The budget was agreed on Monday."),
    )
    response = await post_ui(agent_client, body("what about the budget?"))
    chunks = chunks_of(response)

    [output] = [c["output"] for c in chunks if c.get("type") == "tool-output-available"]
    typed = {p["document_id"]: p["media_type"] for p in output["passages"]}
    assert typed == {paper["id"]: "application/pdf", notes["id"]: "text/plain"}
    sources = [c for c in chunks if c.get("type") == "source-document"]
    of_document = {s["sourceId"].split("#")[0].rsplit("/")[-1]: s["mediaType"] for s in sources}
    assert of_document == {
        paper["id"]: "application/pdf",
        notes["id"]: "text/plain",
    }
    # The history tells the same parts.
    session_id = chunks[0]["messageMetadata"]["session_id"]
    history = await agent_client.get(
        f"/api/alice/sessions/{session_id}/messages", params={"format": "ui"}, headers=auth("alice")
    )
    assert history.status_code == 200, history.text
    [_, answer] = history.json()
    assert [p for p in answer["parts"] if p["type"] == "source-document"] == sources


@pytest.mark.parametrize("query", ["", "   ", "x" * 501])
async def test_a_query_the_tool_cannot_take_is_a_tool_error(
    agent_client: httpx.AsyncClient, model: FakeOpenAI, query: str
) -> None:
    model.script(
        tool_calls(call("search_documents", {"query": query, "list": None})), reply("Sorry.")
    )
    answer = await chat(agent_client, "search my notes")
    [result] = searched(answer)
    assert result["status"] == "error"
    assert "query" in result["error"]
