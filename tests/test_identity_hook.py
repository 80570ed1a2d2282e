"""POST /hooks/identity: the identity provider's `user.deleted` (as Clerk sends it, through
Svix) erases that user, once; signed per Standard Webhooks and checked with the real
`standardwebhooks` package: a bad signature is 401, a timestamp more than 5 minutes off is
refused, a replayed message is refused without erasing twice; other events are ignored."""

import base64
import json
import secrets
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from standardwebhooks import Webhook

from backend.settings import Settings
from tests.conftest import auth, serving

IDENTITY_SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def clerk_event(user_id: str, kind: str = "user.deleted") -> bytes:
    """A Clerk webhook body (their shape, trimmed)."""
    return json.dumps(
        {
            "data": {"deleted": True, "id": user_id, "object": "user"},
            "object": "event",
            "type": kind,
            "timestamp": 1_700_000_000_000,
            "instance_id": "ins_test",
        }
    ).encode()


def signed(
    body: bytes,
    *,
    message_id: str | None = None,
    at: datetime | None = None,
    prefix: str = "webhook",
    secret: str = IDENTITY_SECRET,
) -> dict[str, str]:
    """Headers that sign `body` as the provider would, under `webhook-*` or `svix-*`."""
    message_id = message_id or "msg_" + secrets.token_hex(12)
    at = at or datetime.now(UTC)
    signature = Webhook(secret).sign(message_id, at, body.decode())
    return {
        f"{prefix}-id": message_id,
        f"{prefix}-timestamp": str(int(at.timestamp())),
        f"{prefix}-signature": signature,
        "content-type": "application/json",
    }


@pytest.fixture
async def hooked(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(make_settings(identity_webhook_secret=IDENTITY_SECRET)) as client:
        yield client


async def _tasks(client: httpx.AsyncClient, user: str) -> list[str]:
    response = await client.get(f"/api/{user}/tasks", headers=auth(user))
    return [task["title"] for task in response.json()["data"]]


async def _held(engine: AsyncEngine, user: str) -> int:
    """Rows of the user's own: their tasks' lists, sessions, and the user row."""
    async with engine.connect() as connection:
        found = await connection.execute(
            text(
                "SELECT (SELECT count(*) FROM users WHERE id = :user)"
                " + (SELECT count(*) FROM lists WHERE owner_id = :user)"
                " + (SELECT count(*) FROM agent_sessions WHERE user_id = :user)"
            ),
            {"user": user},
        )
        return int(found.scalar_one())


async def _deleted_events(engine: AsyncEngine, user: str) -> int:
    async with engine.connect() as connection:
        found = await connection.execute(
            text("SELECT count(*) FROM events WHERE user_id = :user AND type = 'user.deleted'"),
            {"user": user},
        )
        return int(found.scalar_one())


@pytest.mark.parametrize("prefix", ["webhook", "svix"])
async def test_a_signed_user_deleted_erases_that_user(
    hooked: httpx.AsyncClient, engine: AsyncEngine, prefix: str
) -> None:
    user = "user_2abcDEF"
    await hooked.post(f"/api/{user}/chat", json={"message": "add pay rent"}, headers=auth(user))
    assert await _held(engine, user) == 3
    body = clerk_event(user)
    response = await hooked.post(
        "/hooks/identity", content=body, headers=signed(body, prefix=prefix)
    )
    assert response.status_code == 204, response.text
    assert await _held(engine, user) == 0
    assert await _deleted_events(engine, user) == 1


@pytest.mark.parametrize(
    "tamper",
    ["signature", "body", "secret", "missing", "garbled"],
)
async def test_a_bad_signature_is_401_and_erases_nothing(
    hooked: httpx.AsyncClient, engine: AsyncEngine, tamper: str
) -> None:
    user = "user_keep"
    await hooked.post(f"/api/{user}/tasks", json={"title": "Stay"}, headers=auth(user))
    body = clerk_event(user)
    headers = signed(body)
    if tamper == "signature":
        headers["webhook-signature"] = signed(clerk_event("user_other"))["webhook-signature"]
    elif tamper == "body":
        body = clerk_event("user_someone_else")
    elif tamper == "secret":
        other = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
        headers = signed(body, secret=other)
    elif tamper == "missing":
        del headers["webhook-signature"]
    else:
        headers["webhook-signature"] = "v1 not base64 at all"
    response = await hooked.post("/hooks/identity", content=body, headers=headers)
    assert response.status_code == 401, response.text
    assert await _tasks(hooked, user) == ["Stay"]


@pytest.mark.parametrize("off", [timedelta(minutes=-6), timedelta(minutes=6)], ids=["old", "new"])
async def test_a_timestamp_more_than_five_minutes_off_is_refused(
    hooked: httpx.AsyncClient, engine: AsyncEngine, off: timedelta
) -> None:
    user = "user_keep"
    await hooked.post(f"/api/{user}/tasks", json={"title": "Stay"}, headers=auth(user))
    body = clerk_event(user)
    response = await hooked.post(
        "/hooks/identity", content=body, headers=signed(body, at=datetime.now(UTC) + off)
    )
    assert response.status_code in (400, 401)
    assert "timestamp" in response.json()["detail"]
    assert await _tasks(hooked, user) == ["Stay"]
    # Four minutes off is within the tolerance.
    near = signed(body, at=datetime.now(UTC) - timedelta(minutes=4))
    assert (await hooked.post("/hooks/identity", content=body, headers=near)).status_code == 204


@pytest.mark.parametrize("prefix", ["webhook", "svix"])
async def test_a_replayed_message_is_refused_and_never_erases_twice(
    hooked: httpx.AsyncClient, engine: AsyncEngine, prefix: str
) -> None:
    user = "user_comes_back"
    await hooked.post(f"/api/{user}/tasks", json={"title": "Before"}, headers=auth(user))
    body = clerk_event(user)
    headers = signed(body, message_id="msg_once", prefix=prefix)
    assert (await hooked.post("/hooks/identity", content=body, headers=headers)).status_code == 204
    # They sign up again; the same message comes again, as it was or signed anew.
    await hooked.post(f"/api/{user}/tasks", json={"title": "After"}, headers=auth(user))
    again = await hooked.post("/hooks/identity", content=body, headers=headers)
    assert again.status_code == 409
    anew = signed(body, message_id="msg_once", prefix=prefix)
    assert (await hooked.post("/hooks/identity", content=body, headers=anew)).status_code == 409
    assert await _tasks(hooked, user) == ["After"]
    assert await _deleted_events(engine, user) == 1


async def test_other_events_are_ignored_and_a_malformed_one_is_422(
    hooked: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    user = "user_stays"
    await hooked.post(f"/api/{user}/tasks", json={"title": "Stay"}, headers=auth(user))
    for kind in ("user.created", "user.updated", "session.ended"):
        body = clerk_event(user, kind)
        response = await hooked.post("/hooks/identity", content=body, headers=signed(body))
        assert response.status_code == 204
    no_id = json.dumps({"type": "user.deleted", "data": {"deleted": True}}).encode()
    response = await hooked.post("/hooks/identity", content=no_id, headers=signed(no_id))
    assert response.status_code == 422
    not_json = b"not json"
    response = await hooked.post("/hooks/identity", content=not_json, headers=signed(not_json))
    assert response.status_code == 422
    assert await _tasks(hooked, user) == ["Stay"]


async def test_an_unknown_user_is_acknowledged(
    hooked: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    body = clerk_event("user_never_seen")
    response = await hooked.post("/hooks/identity", content=body, headers=signed(body))
    assert response.status_code == 204
    assert await _deleted_events(engine, "user_never_seen") == 0


async def test_without_a_secret_the_hook_is_not_there(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    body = clerk_event("user_x")
    response = await client.post("/hooks/identity", content=body, headers=signed(body))
    assert response.status_code == 404


def test_a_secret_that_is_not_a_standard_webhooks_one_is_refused(
    make_settings: Callable[..., Settings],
) -> None:
    with pytest.raises(ValueError, match="whsec_"):
        make_settings(identity_webhook_secret="whsec_")
    assert make_settings(identity_webhook_secret="").identity_webhook_secret is None


async def test_the_upkeep_loop_forgets_old_message_ids(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO identity_webhook_messages (id, received_at) VALUES"
                " ('msg_old', now() - interval '4 days'), ('msg_new', now())"
            )
        )
    async with serving(make_settings()) as client:
        context: Any = client._transport.app.state.context  # type: ignore[attr-defined]
        await context.upkeep.once(prune=True)
    async with engine.connect() as connection:
        kept = await connection.execute(text("SELECT id FROM identity_webhook_messages"))
        assert [row[0] for row in kept] == ["msg_new"]
