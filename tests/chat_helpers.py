"""Talking to the chat API the way the frontend does."""

from typing import Any

import httpx

from tests.conftest import auth


async def chat(
    client: httpx.AsyncClient,
    message: str,
    *,
    user: str = "alice",
    session_id: str | None = None,
    expect: int = 200,
    **fields: Any,
) -> dict[str, Any]:
    response = await client.post(
        f"/api/{user}/chat",
        json={"message": message, "session_id": session_id, **fields},
        headers=auth(user),
    )
    assert response.status_code == expect, response.text
    body: dict[str, Any] = response.json()
    return body


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
