"""Reminders that reach people: settings, push subscriptions, Web Push as a push service
receives it (VAPID checked, the payload decrypted with the subscription's own key), acting
from a notification, no request where it must not go."""

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.settings import Settings
from tests.conftest import auth, serving, token_for
from tests.push_service import BrowserSubscription, FakePushService, b64url_decode
from tests.servers import until
from tests.test_observability import scrape

USER = "alice"


@pytest.fixture(scope="module")
def push_service() -> Iterator[FakePushService]:
    with FakePushService() as service:
        yield service


@pytest.fixture
def service(push_service: FakePushService) -> FakePushService:
    push_service.clear()
    return push_service


def notify_settings(make_settings: Callable[..., Settings], **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "notify_allowed_hosts": "127.0.0.1",
        "reminder_poll_s": 0.1,
        "webhook_retry_schedule_s": "0.2,0.2",
        "webhook_timeout_s": 3.0,
        "public_base_url": "https://todo.example",
    }
    return make_settings(**(values | overrides))


@pytest.fixture
async def client(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(notify_settings(make_settings)) as client:
        yield client


async def subscribe(
    client: httpx.AsyncClient, service: FakePushService, user: str = USER
) -> tuple[BrowserSubscription, dict[str, Any]]:
    browser = BrowserSubscription(next(service.endpoints(1)))
    response = await client.post(
        f"/api/{user}/push/subscriptions", headers=auth(user), json=browser.to_json()
    )
    assert response.status_code == 201, response.text
    return browser, response.json()


async def reminder_task(
    client: httpx.AsyncClient, *, title: str = "Call the plumber", in_s: float = 0.5
) -> dict[str, Any]:
    remind_at = (datetime.now(UTC) + timedelta(seconds=in_s)).isoformat()
    response = await client.post(
        f"/api/{USER}/tasks",
        headers=auth(USER),
        json={"title": title, "remind_at": remind_at, "due_at": remind_at},
    )
    assert response.status_code == 201, response.text
    task: dict[str, Any] = response.json()
    return task


async def pushes_to(service: FakePushService, endpoint: str, count: int = 1) -> list[Any]:
    path = endpoint.removeprefix(service.url)

    async def arrived() -> bool:
        return len(service.to(path)) >= count

    await until(arrived, timeout_s=10, message=f"{count} push(es) did not reach {path}")
    return service.to(path)


async def deliveries(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            text(
                "SELECT id, kind, channel, attempts, outcome, due_at FROM notify_deliveries"
                " ORDER BY id"
            )
        )
        return [dict(row._mapping) for row in rows]


# -- settings ------------------------------------------------------------------------------


async def test_notification_settings_start_empty_and_change_in_parts(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get(f"/api/{USER}/notifications", headers=auth(USER))
    assert response.status_code == 200
    assert response.json() == {
        "email": None,
        "ntfy": None,
        "push": [],
        "reminders": ["push", "email", "ntfy"],
        "digest": {"at": None, "channels": ["push", "email", "ntfy"]},
        "quiet_hours": None,
    }
    response = await client.patch(
        f"/api/{USER}/notifications",
        headers=auth(USER),
        json={
            "reminders": ["push"],
            "digest": {"at": "08:00", "channels": ["email"]},
            "quiet_hours": {"start": "22:00", "end": "07:00"},
            "ntfy": {"url": "http://127.0.0.1:9/alice-topic"},
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["reminders"] == ["push"]
    assert body["digest"] == {"at": "08:00", "channels": ["email"]}
    assert body["quiet_hours"] == {"start": "22:00", "end": "07:00"}
    assert body["ntfy"] == {"url": "http://127.0.0.1:9/alice-topic"}
    # Partial: what was not sent stays; null clears.
    response = await client.patch(
        f"/api/{USER}/notifications", headers=auth(USER), json={"quiet_hours": None}
    )
    assert response.json()["quiet_hours"] is None
    assert response.json()["reminders"] == ["push"]
    for bad in (
        {"digest": {"at": "25:00"}},
        {"reminders": ["pigeon"]},
        {"quiet_hours": {"start": "22:00"}},
        {"whatever": 1},
    ):
        response = await client.patch(f"/api/{USER}/notifications", headers=auth(USER), json=bad)
        assert response.status_code == 422, bad


async def test_an_address_verified_by_the_identity_provider_is_taken_from_the_token(
    client: httpx.AsyncClient,
) -> None:
    token = token_for("bob", email="bob@example.com", email_verified=True)
    response = await client.get(
        "/api/bob/notifications", headers={"Authorization": f"Bearer {token}"}
    )
    assert response.json()["email"] == {"address": "bob@example.com", "verified": True}
    # Not vouched for: not taken.
    token = token_for("carol", email="carol@example.com")
    response = await client.get(
        "/api/carol/notifications", headers={"Authorization": f"Bearer {token}"}
    )
    assert response.json()["email"] is None


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost/topic",
        "http://127.0.0.2/topic",
        "http://10.1.2.3/topic",
        "http://192.168.0.10/topic",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/topic",
        "http://[::ffff:10.0.0.1]/topic",
        "http://0.0.0.0/topic",
        "http://100.64.0.1/topic",
        "ftp://ntfy.sh/topic",
        "http://user:pw@ntfy.example/topic",
        "http://no-such-host.invalid/topic",
    ],
)
async def test_an_ntfy_url_that_points_where_it_must_not_is_refused(
    client: httpx.AsyncClient, url: str
) -> None:
    response = await client.patch(
        f"/api/{USER}/notifications", headers=auth(USER), json={"ntfy": {"url": url}}
    )
    assert response.status_code == 422, response.text
    assert (await client.get(f"/api/{USER}/notifications", headers=auth(USER))).json()[
        "ntfy"
    ] is None


async def test_a_push_endpoint_on_a_private_address_is_refused(
    client: httpx.AsyncClient,
) -> None:
    browser = BrowserSubscription("https://192.168.1.1/push/x")
    response = await client.post(
        f"/api/{USER}/push/subscriptions", headers=auth(USER), json=browser.to_json()
    )
    assert response.status_code == 422


# -- push subscriptions ----------------------------------------------------------------------


async def test_the_push_key_is_a_p256_public_key_anyone_may_read(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/push/key")
    assert response.status_code == 200
    raw = b64url_decode(response.json()["public_key"])
    assert len(raw) == 65
    assert raw[0] == 4  # an uncompressed point, as PushManager.subscribe wants


async def test_a_subscription_is_kept_once_per_endpoint_listed_and_removed(
    client: httpx.AsyncClient, service: FakePushService
) -> None:
    browser, first = await subscribe(client, service)
    again = await client.post(
        f"/api/{USER}/push/subscriptions", headers=auth(USER), json=browser.to_json()
    )
    assert again.status_code == 200
    assert again.json()["id"] == first["id"]
    listed = await client.get(f"/api/{USER}/push/subscriptions", headers=auth(USER))
    assert listed.json()["count"] == 1
    assert listed.json()["data"][0]["endpoint"] == browser.endpoint
    settings = await client.get(f"/api/{USER}/notifications", headers=auth(USER))
    assert [sub["id"] for sub in settings.json()["push"]] == [first["id"]]
    # Another person can neither see nor remove it.
    other = await client.delete(f"/api/bob/push/subscriptions/{first['id']}", headers=auth("bob"))
    assert other.status_code == 404
    gone = await client.delete(f"/api/{USER}/push/subscriptions/{first['id']}", headers=auth(USER))
    assert gone.status_code == 204
    listed = await client.get(f"/api/{USER}/push/subscriptions", headers=auth(USER))
    assert listed.json() == {"data": [], "count": 0}


async def test_a_malformed_subscription_is_a_422(client: httpx.AsyncClient) -> None:
    for body in (
        {"endpoint": "http://127.0.0.1/x"},
        {"endpoint": "http://127.0.0.1/x", "keys": {"p256dh": "!!", "auth": "x"}},
        {"endpoint": "not a url at all", "keys": {"p256dh": "A" * 87, "auth": "A" * 22}},
        {"endpoint": "http://127.0.0.1/x", "keys": {"p256dh": "A" * 43, "auth": "A" * 22}},
        {"endpoint": "http://127.0.0.1/x", "keys": {"p256dh": "BA" + "A" * 85, "auth": "A" * 9}},
    ):
        response = await client.post(
            f"/api/{USER}/push/subscriptions", headers=auth(USER), json=body
        )
        assert response.status_code == 422, body


# -- a reminder, pushed ----------------------------------------------------------------------


async def test_a_reminder_reaches_the_push_service_signed_and_encrypted_for_that_browser(
    client: httpx.AsyncClient, service: FakePushService, engine: AsyncEngine
) -> None:
    browser, _ = await subscribe(client, service)
    task = await reminder_task(client)
    [received] = await pushes_to(service, browser.endpoint)
    assert service.refused == []
    # VAPID: the token is for this push service, not expired, signed by the key the page
    # subscribed with.
    key = (await client.get("/push/key")).json()["public_key"]
    assert received.vapid_key == key
    assert received.vapid is not None
    assert received.vapid["aud"] == service.url
    assert time.time() < received.vapid["exp"] <= time.time() + 24 * 3600
    assert received.vapid["sub"].startswith(("mailto:", "https:"))
    assert int(received.headers["ttl"]) >= 3600
    assert received.headers["urgency"] == "high"
    assert received.headers["topic"] == task["id"].replace("-", "")
    assert received.headers["content-encoding"] == "aes128gcm"
    assert len(received.body) < 4096
    payload = browser.decrypt(received.body)
    assert payload["type"] == "reminder.due"
    assert payload["title"] == "Call the plumber"
    assert payload["task"] == {
        "id": task["id"],
        "number": task["number"],
        "title": "Call the plumber",
        "due_at": payload["task"]["due_at"],
    }
    assert payload["url"].startswith("https://todo.example/")
    assert [action["action"] for action in payload["actions"]] == ["done", "snooze"]
    await asyncio.sleep(0.5)  # a second push would come by now
    assert len(service.to(received.path)) == 1
    [delivery] = await deliveries(engine)
    assert delivery["outcome"] == "delivered"
    assert delivery["due_at"] is None


async def test_a_push_service_saying_gone_removes_the_subscription(
    client: httpx.AsyncClient, service: FakePushService, engine: AsyncEngine
) -> None:
    browser, _subscription = await subscribe(client, service)
    service.answer(browser.endpoint.removeprefix(service.url), 410)
    await reminder_task(client)
    await pushes_to(service, browser.endpoint)

    async def removed() -> bool:
        listed = await client.get(f"/api/{USER}/push/subscriptions", headers=auth(USER))
        return bool(listed.json()["count"] == 0)

    await until(removed, timeout_s=5, message="the gone subscription was kept")
    assert await deliveries(engine) == []


async def test_a_failing_push_service_is_tried_again_and_a_success_is_not_repeated(
    client: httpx.AsyncClient, service: FakePushService, engine: AsyncEngine
) -> None:
    browser, _ = await subscribe(client, service)
    path = browser.endpoint.removeprefix(service.url)
    service.answer(path, 503, 429)
    await reminder_task(client)
    received = await pushes_to(service, browser.endpoint, count=3)
    await asyncio.sleep(0.6)
    assert len(service.to(path)) == 3
    # The same message each time, as far as the browser can tell.
    assert {browser.decrypt(r.body)["task"]["title"] for r in received} == {"Call the plumber"}
    [delivery] = await deliveries(engine)
    assert (delivery["attempts"], delivery["outcome"], delivery["due_at"]) == (3, "delivered", None)


async def test_a_slow_push_service_does_not_hold_back_another_persons_push(
    client: httpx.AsyncClient, service: FakePushService
) -> None:
    slow, _ = await subscribe(client, service)
    service.answer(slow.endpoint.removeprefix(service.url), 201, delay=5)
    fast, _ = await subscribe(client, service, user="bob")
    await reminder_task(client, title="slow one")

    async def slow_one_waits() -> bool:
        return service.waiting == 1

    await until(slow_one_waits, timeout_s=10, message="Alice's push did not reach the service")
    soon = (datetime.now(UTC) + timedelta(seconds=0.3)).isoformat()
    response = await client.post(
        "/api/bob/tasks", headers=auth("bob"), json={"title": "fast one", "remind_at": soon}
    )
    assert response.status_code == 201
    await pushes_to(service, fast.endpoint)
    # Bob's push went through while Alice's push service had still not answered.
    assert service.waiting == 1
    assert service.to(slow.endpoint.removeprefix(service.url)) == []
    await pushes_to(service, slow.endpoint)


# -- acting from the notification ------------------------------------------------------------


async def actions_of(
    client: httpx.AsyncClient, service: FakePushService, *, title: str = "Call the plumber"
) -> tuple[dict[str, Any], dict[str, str], BrowserSubscription]:
    browser, _ = await subscribe(client, service)
    task = await reminder_task(client, title=title)
    [received] = await pushes_to(service, browser.endpoint)
    payload = browser.decrypt(received.body)
    return task, {a["action"]: a["token"] for a in payload["actions"]}, browser


async def test_done_from_the_notification_completes_the_task_once(
    client: httpx.AsyncClient, service: FakePushService, engine: AsyncEngine
) -> None:
    task, tokens, _ = await actions_of(client, service)
    response = await client.post("/notifications/actions", json={"token": tokens["done"]})
    assert response.status_code == 200, response.text
    assert response.json()["changed"] is True
    assert response.json()["task"]["completed"] is True
    shown = await client.get(f"/api/{USER}/tasks/{task['id']}", headers=auth(USER))
    assert shown.json()["completed"] is True
    again = await client.post("/notifications/actions", json={"token": tokens["done"]})
    assert again.status_code == 200
    assert again.json()["changed"] is False
    async with engine.connect() as connection:
        completed = await connection.scalar(
            text("SELECT count(*) FROM events WHERE type = 'task.completed' AND subject = :id"),
            {"id": uuid.UUID(task["id"])},
        )
    assert completed == 1  # one event, as any completion: done twice changed nothing


async def test_a_forged_or_altered_token_is_401_and_changes_nothing(
    client: httpx.AsyncClient, service: FakePushService
) -> None:
    task, tokens, _ = await actions_of(client, service)
    body, _, mac = tokens["done"].partition(".")
    altered = body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1] + "." + mac
    for token in (
        altered,
        "x" * 40,
        body + "." + "A" * len(mac),
        tokens["done"] + "x",
        body + ".é" + mac[1:],
    ):
        response = await client.post("/notifications/actions", json={"token": token})
        assert response.status_code == 401, token
    shown = await client.get(f"/api/{USER}/tasks/{task['id']}", headers=auth(USER))
    assert shown.json()["completed"] is False
    bearer = await client.post("/notifications/actions", json={"token": token_for(USER)})
    assert bearer.status_code == 401  # the person's bearer token is no action token


async def test_a_token_dies_with_its_subscription(
    client: httpx.AsyncClient, service: FakePushService
) -> None:
    task, tokens, _browser = await actions_of(client, service)
    listed = await client.get(f"/api/{USER}/push/subscriptions", headers=auth(USER))
    [subscription] = listed.json()["data"]
    await client.delete(f"/api/{USER}/push/subscriptions/{subscription['id']}", headers=auth(USER))
    response = await client.post("/notifications/actions", json={"token": tokens["done"]})
    assert response.status_code == 410
    shown = await client.get(f"/api/{USER}/tasks/{task['id']}", headers=auth(USER))
    assert shown.json()["completed"] is False


async def test_an_expired_token_is_410(
    make_settings: Callable[..., Settings], engine: AsyncEngine, service: FakePushService
) -> None:
    async with serving(notify_settings(make_settings, notify_action_ttl_h=0.0005)) as client:
        task, tokens, _ = await actions_of(client, service)
        await asyncio.sleep(2)  # the token lived 1.8 s
        response = await client.post("/notifications/actions", json={"token": tokens["done"]})
        assert response.status_code == 410
        shown = await client.get(f"/api/{USER}/tasks/{task['id']}", headers=auth(USER))
        assert shown.json()["completed"] is False


async def test_snooze_moves_the_reminder_and_it_fires_again_once(
    make_settings: Callable[..., Settings], engine: AsyncEngine, service: FakePushService
) -> None:
    async with serving(notify_settings(make_settings, notify_snooze_min=0.02)) as client:
        task, tokens, browser = await actions_of(client, service)
        pressed = datetime.now(UTC)
        response = await client.post("/notifications/actions", json={"token": tokens["snooze"]})
        assert response.status_code == 200, response.text
        assert response.json()["changed"] is True
        remind_at = datetime.fromisoformat(response.json()["task"]["remind_at"])
        assert pressed < remind_at <= datetime.now(UTC) + timedelta(seconds=1.2)
        # Pressed again: that reminder was snoozed already.
        again = await client.post("/notifications/actions", json={"token": tokens["snooze"]})
        assert again.json()["changed"] is False
        second = await pushes_to(service, browser.endpoint, count=2)
        await asyncio.sleep(0.6)
        assert len(service.to(second[0].path)) == 2
        payload = browser.decrypt(second[1].body)
        assert payload["task"]["id"] == task["id"]
        # The new reminder's own buttons work.
        done = next(a["token"] for a in payload["actions"] if a["action"] == "done")
        response = await client.post("/notifications/actions", json={"token": done})
        assert response.json()["task"]["completed"] is True


async def test_a_link_shows_a_button_and_only_its_post_acts(
    client: httpx.AsyncClient, service: FakePushService
) -> None:
    task, tokens, _ = await actions_of(client, service)
    page = await client.get("/notifications/actions", params={"token": tokens["done"]})
    assert page.status_code == 200
    assert '<form method="post"' in page.text
    shown = await client.get(f"/api/{USER}/tasks/{task['id']}", headers=auth(USER))
    assert shown.json()["completed"] is False  # a mail scanner following it changes nothing
    pressed = await client.post(
        "/notifications/actions/form",
        content=f"token={tokens['done']}",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert pressed.status_code == 200
    assert "done" in pressed.text
    shown = await client.get(f"/api/{USER}/tasks/{task['id']}", headers=auth(USER))
    assert shown.json()["completed"] is True
    forged = await client.get("/notifications/actions", params={"token": "x" * 40})
    assert forged.status_code == 401


async def test_quiet_hours_hold_a_push_to_their_end_and_never_drop_it(
    client: httpx.AsyncClient, service: FakePushService, engine: AsyncEngine
) -> None:
    browser, _ = await subscribe(client, service)
    # The person's local time: half an hour off UTC's grid, so a mix-up would show.
    await client.patch(
        f"/api/{USER}/settings", headers=auth(USER), json={"timezone": "Asia/Kolkata"}
    )
    tz = ZoneInfo("Asia/Kolkata")
    now = datetime.now(tz)
    start = (now - timedelta(minutes=5)).strftime("%H:%M")
    end = (now + timedelta(minutes=30)).strftime("%H:%M")
    response = await client.patch(
        f"/api/{USER}/notifications",
        headers=auth(USER),
        json={"quiet_hours": {"start": start, "end": end}},
    )
    assert response.status_code == 200
    await reminder_task(client)

    async def held() -> bool:
        rows = await deliveries(engine)
        return bool(rows) and rows[0]["due_at"] > datetime.now(UTC) + timedelta(minutes=20)

    await until(held, timeout_s=5, message="the push was not held to the end of quiet hours")
    assert service.to(browser.endpoint.removeprefix(service.url)) == []
    [delivery] = await deliveries(engine)
    assert delivery["attempts"] == 0
    # The quiet hours' end, in the person's local time, to the minute.
    assert delivery["due_at"].astimezone(tz).strftime("%H:%M") == end


async def test_a_test_notification_reaches_every_target(
    client: httpx.AsyncClient, service: FakePushService
) -> None:
    browser, _ = await subscribe(client, service)
    response = await client.post(f"/api/{USER}/notifications/test", headers=auth(USER))
    assert response.status_code == 202
    assert response.json() == {"queued": 1}
    [received] = await pushes_to(service, browser.endpoint)
    assert browser.decrypt(received.body)["type"] == "test"


# -- what else a person meets: metrics, export, erasure ------------------------------------


async def test_deliveries_are_counted_by_channel_and_outcome(
    client: httpx.AsyncClient, service: FakePushService
) -> None:
    before = (await scrape(client)).value(
        "todo_agent_notify_deliveries_total", channel="push", outcome="delivered"
    )
    browser, _ = await subscribe(client, service)
    await client.post(f"/api/{USER}/notifications/test", headers=auth(USER))
    await pushes_to(service, browser.endpoint)

    async def counted() -> bool:
        after = (await scrape(client)).value(
            "todo_agent_notify_deliveries_total", channel="push", outcome="delivered"
        )
        return after == before + 1

    await until(counted, timeout_s=5, message="the delivery was not counted")


async def test_the_export_holds_the_settings_and_no_endpoint_or_url(
    client: httpx.AsyncClient, service: FakePushService
) -> None:
    browser, _ = await subscribe(client, service)
    await client.patch(
        f"/api/{USER}/notifications",
        headers=auth(USER),
        json={
            "ntfy": {"url": "http://127.0.0.1:9/secret-topic"},
            "digest": {"at": "07:30"},
            "quiet_hours": {"start": "22:00", "end": "07:00"},
        },
    )
    response = await client.get(f"/api/{USER}/export", headers=auth(USER))
    assert response.status_code == 200
    notifications = response.json()["user"]["notifications"]
    assert notifications["digest"]["at"] == "07:30"
    assert notifications["quiet_hours"] == {"start": "22:00", "end": "07:00"}
    assert notifications["reminders"] == ["push", "email", "ntfy"]
    assert browser.endpoint not in response.text
    assert "secret-topic" not in response.text


async def test_erasure_removes_subscriptions_settings_deliveries_and_kills_the_tokens(
    client: httpx.AsyncClient, service: FakePushService, engine: AsyncEngine
) -> None:
    _, tokens, browser = await actions_of(client, service)
    await client.patch(
        f"/api/{USER}/notifications",
        headers=auth(USER),
        json={"ntfy": {"url": "http://127.0.0.1:9/topic"}, "digest": {"at": "07:30"}},
    )
    async with engine.begin() as connection:  # one still waiting
        await connection.execute(
            text(
                "INSERT INTO notify_deliveries (user_id, kind, channel, due_at)"
                " VALUES (:u, 'test', 'ntfy', now() + interval '1 hour')"
            ),
            {"u": USER},
        )
    response = await client.delete(f"/api/{USER}", headers=auth(USER))
    assert response.status_code == 204
    async with engine.connect() as connection:
        for table in (
            "notification_settings",
            "push_subscriptions",
            "notify_deliveries",
            "notify_digests",
        ):
            left = await connection.scalar(
                text(f"SELECT count(*) FROM {table} WHERE user_id = :u"), {"u": USER}
            )
            assert left == 0, table
    response = await client.post("/notifications/actions", json={"token": tokens["done"]})
    assert response.status_code == 410
    assert browser.endpoint  # the browser's subscription is gone with the account
