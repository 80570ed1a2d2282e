"""Factories with keyword arguments and sensible defaults."""

from typing import Any

import httpx

from tests.conftest import auth


async def make_task(
    client: httpx.AsyncClient, *, user: str, title: str = "A task", **fields: Any
) -> dict[str, Any]:
    """Create a task through the API, as the frontend would."""
    response = await client.post(
        f"/api/{user}/tasks", json={"title": title, **fields}, headers=auth(user)
    )
    assert response.status_code == 201, response.text
    task: dict[str, Any] = response.json()
    return task
