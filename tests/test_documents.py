"""Documents in lists: what is read, what is refused (and nothing stored), who may read and
change them, and the events their members get."""

from typing import Any

import httpx

from tests.conftest import auth


async def _upload(
    client: httpx.AsyncClient, user: str, name: str, data: bytes, expect: int = 201, **fields: str
) -> Any:
    response = await client.post(
        f"/api/{user}/documents", files={"file": (name, data)}, data=fields, headers=auth(user)
    )
    assert response.status_code == expect, response.text
    return response.json()


MOVING = b"""# Moving

Notes for the move.

## Week before

- [ ] call the movers
- [x] pack the books

## Moving day

Keep the keys with you.
"""


async def test_a_markdown_file_is_kept_with_its_passages(client: httpx.AsyncClient) -> None:
    made = await _upload(client, "alice", "moving.md", MOVING)
    assert (made["title"], made["media_type"], made["bytes"], made["passages"]) == (
        "Moving", "text/markdown", len(MOVING), 3)
    listed = (await client.get("/api/alice/documents", headers=auth("alice"))).json()
    assert [d["id"] for d in listed["data"]] == [made["id"]]
    shown = (await client.get(f"/api/alice/documents/{made['id']}", headers=auth("alice"))).json()
    assert shown["text"] == MOVING.decode()
    found = (await client.get("/api/alice/documents/search", params={"q": "when do the movers come"}, headers=auth("alice"))).json()
    assert found["data"][0]["heading"] == "Moving \u203a Week before", found
