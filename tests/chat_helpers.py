"""Talking to the chat API the way the frontend does."""

import json
import re
from typing import Any

import httpx

from tests.conftest import auth

# What the service puts before a person's message to the model: when they sent it.
CLOCK_NOTE = re.compile(r"\[[A-Z][a-z]{2} \d{4}-\d{2}-\d{2} \d{2}:\d{2}\] ")


def words(message: dict[str, Any]) -> str | None:
    """A message sent to the model, as written: a person's without its clock note."""
    content = message.get("content")
    if message.get("role") == "user" and isinstance(content, str):
        return CLOCK_NOTE.sub("", content, count=1) if CLOCK_NOTE.match(content) else content
    return content


async def chat(
    client: httpx.AsyncClient,
    message: str,
    *,
    user: str = "alice",
    session_id: str | None = None,
    expect: int = 200,
    **fields: Any,
) -> dict[str, Any]:
    request = {"message": message, **({"session_id": session_id} if session_id else {}), **fields}
    response = await client.post(f"/api/{user}/chat", json=request, headers=auth(user))
    assert response.status_code == expect, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def stored_messages(
    client: httpx.AsyncClient, session_id: str, *, user: str = "alice"
) -> list[dict[str, Any]]:
    """Every stored message of a session, oldest first (following the cursors)."""
    messages: list[dict[str, Any]] = []
    cursor = None
    while True:
        response = await client.get(
            f"/api/{user}/sessions/{session_id}/messages",
            params={"limit": 200, **({"cursor": cursor} if cursor else {})},
            headers=auth(user),
        )
        assert response.status_code == 200, response.text
        page = response.json()
        messages = page["data"] + messages
        cursor = page["next_cursor"]
        if cursor is None:
            return messages


async def task_titles(client: httpx.AsyncClient, *, user: str = "alice") -> list[str]:
    response = await client.get(f"/api/{user}/tasks", params={"limit": 100}, headers=auth(user))
    return [task["title"] for task in response.json()["data"]]


def parse_sse(text: str) -> list[tuple[str, Any]]:
    """Server-sent events as (event, data) pairs; comments (keep-alives) as ("", comment)."""
    events: list[tuple[str, Any]] = []
    for frame in text.split("\n\n"):
        if not frame.strip():
            continue
        if frame.startswith(":"):
            events.append(("", frame[1:].strip()))
            continue
        fields = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        events.append((fields["event"], json.loads(fields["data"])))
    return events


async def chat_stream(
    client: httpx.AsyncClient,
    message: str,
    *,
    user: str = "alice",
    session_id: str | None = None,
    headers: dict[str, str] | None = None,
) -> list[tuple[str, Any]]:
    response = await client.post(
        f"/api/{user}/chat/stream",
        json={"message": message, **({"session_id": session_id} if session_id else {})},
        headers={**auth(user), **(headers or {})},
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)
