"""With no model configured, the stub answers from a person's documents and turns a
checklist into a task: documents uploaded through the REST API, asked about through /chat.
It finds passages with a recorded `search_documents` call, as a model does, so its quotes
have sources: the turn's tool call, /chat/ui's `source-document` parts and the history's."""

from typing import Any

import httpx

from backend.services.documents.sections import HEADING_JOINER as JOIN
from tests.chat_helpers import chat
from tests.conftest import auth
from tests.test_chat_ui import body, chunks_of, post_ui
from tests.test_documents import upload

MOVING = b"""# Moving checklist

## Week before

- [ ] Call the movers
- [x] Pack the books
- [ ] Book the **van**

## Moving day

- [ ] Read the meters
- [x] Hand back the keys

## Notes

The wifi password for the new flat is on the router: hunter2.
"""
PACKING = b"""# Packing list

## Papers

- Passport, and a copy of it
- Train tickets

## Clothes

1. Raincoat
2. Boots
"""


async def _say(client: httpx.AsyncClient, message: str, user: str = "alice") -> str:
    answer = await chat(client, message, user=user)
    assert answer["using_stub"] is True
    return str(answer["response"])


async def _tasks(client: httpx.AsyncClient, user: str = "alice") -> list[dict[str, Any]]:
    response = await client.get(f"/api/{user}/tasks?top_level=true", headers=auth(user))
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


async def _steps(client: httpx.AsyncClient, task: dict[str, Any]) -> list[tuple[str, bool]]:
    response = await client.get(f"/api/alice/tasks/{task['id']}", headers=auth("alice"))
    assert response.status_code == 200, response.text
    return [(step["title"], step["completed"]) for step in response.json()["steps"]]


async def _shelve(client: httpx.AsyncClient) -> None:
    await upload(client, "alice", "moving.md", MOVING)
    await upload(client, "alice", "packing.md", PACKING)


async def test_questions_about_documents_quote_the_best_passage_with_its_source(
    client: httpx.AsyncClient,
) -> None:
    await _shelve(client)

    passports = await _say(client, "what does my packing list say about passports?")
    assert passports.startswith("From “Packing list” \u203a Papers:\n")
    assert "> - Passport, and a copy of it" in passports

    wifi = await _say(client, "search my notes for the wifi password")
    assert wifi.startswith("From “Moving checklist” \u203a Notes:\n")
    assert "hunter2" in wifi

    tickets = await _say(client, "find the train tickets in my documents")
    assert "“Packing list” \u203a Papers" in tickets

    nothing = await _say(client, "what does the packing list say about the wifi?")
    assert nothing.startswith("I found nothing on “the wifi” in “Packing list”")
    assert await _tasks(client) == []


async def test_a_checklist_becomes_one_task_with_its_unticked_items_as_steps(
    client: httpx.AsyncClient,
) -> None:
    await _shelve(client)

    reply = await _say(client, "make tasks from my moving checklist")
    assert reply.startswith("Added task 1: Moving checklist")
    assert "with 3 steps:\n- #2 Call the movers\n- #3 Book the van\n- #4 Read the meters" in reply
    [task] = await _tasks(client)
    assert task["title"] == "Moving checklist"
    assert await _steps(client, task) == [
        ("Call the movers", False),
        ("Book the van", False),
        ("Read the meters", False),
    ]

    await _say(client, "make tasks from the Week before section of the moving checklist")
    section = (await _tasks(client))[-1]
    assert section["title"] == "Week before"
    assert await _steps(client, section) == [("Call the movers", False), ("Book the van", False)]

    # A list with no boxes: every bullet and numbered item.
    await _say(client, "add the items of the packing list as tasks")
    packing = (await _tasks(client))[-1]
    assert packing["title"] == "Packing list"
    assert [title for title, _ in await _steps(client, packing)] == [
        "Passport, and a copy of it",
        "Train tickets",
        "Raincoat",
        "Boots",
    ]


async def test_a_document_not_found_is_said_with_the_ones_there_are(
    client: httpx.AsyncClient,
) -> None:
    assert (await _say(client, "make tasks from my moving checklist")).startswith(
        "You have no documents yet."
    )
    await _shelve(client)

    reply = await _say(client, "make tasks from my wedding plan")
    assert reply.startswith("I couldn't find a document called “wedding plan”. You have:")
    assert "“Moving checklist”" in reply
    assert "“Packing list”" in reply
    assert "For example:" in reply
    section = await _say(client, "make tasks from the Garage section of the moving checklist")
    assert "Its headings: “Moving checklist”, “Week before”" in section
    assert await _tasks(client) == []


async def test_another_persons_documents_are_never_read(client: httpx.AsyncClient) -> None:
    await _shelve(client)

    assert (await _say(client, "search my notes for the wifi password", user="bob")).startswith(
        "You have no documents yet."
    )
    assert (await _say(client, "make tasks from alice's moving checklist", user="bob")).startswith(
        "You have no documents yet."
    )
    assert await _tasks(client, user="bob") == []


async def test_a_quote_comes_from_a_recorded_search_and_is_a_source(
    client: httpx.AsyncClient,
) -> None:
    await _shelve(client)
    packing = next(
        d
        for d in (await client.get("/api/alice/documents", headers=auth("alice"))).json()["data"]
        if d["title"] == "Packing list"
    )

    answer = await chat(client, "what does my packing list say about passports", user="alice")
    [call] = answer["tool_calls"]
    assert (call["name"], call["arguments"]["query"]) == ("search_documents", "passports")
    assert call["arguments"]["list"] == packing["list_id"]  # the named document's list
    [result] = answer["tool_results"]
    best = result["result"]["passages"][0]
    assert (best["document_id"], best["heading"]) == (packing["id"], f"Packing list{JOIN}Papers")

    response = await post_ui(client, body("what does my packing list say about passports"))
    chunks = chunks_of(response)
    kinds = [chunk.get("type") for chunk in chunks]
    assert kinds.index("tool-output-available") < kinds.index("source-document")
    sources = [chunk for chunk in chunks if chunk.get("type") == "source-document"]
    assert sources == [
        {
            "type": "source-document",
            "sourceId": f"todo-agent://documents/{packing['id']}#Packing%20list%20%E2%80%BA%20Papers",
            "mediaType": "text/markdown",
            "title": f"Packing list{JOIN}Papers",
        }
    ]
    session_id = chunks[0]["messageMetadata"]["session_id"]
    history = await client.get(
        f"/api/alice/sessions/{session_id}/messages", params={"format": "ui"}, headers=auth("alice")
    )
    [_, told] = history.json()
    assert [part for part in told["parts"] if part["type"] == "source-document"] == sources


async def test_a_question_without_documents_searches_nothing(client: httpx.AsyncClient) -> None:
    answer = await chat(client, "search my notes for the wifi password", user="alice")
    assert answer["response"].startswith("You have no documents yet.")
    assert answer["tool_calls"] == []
