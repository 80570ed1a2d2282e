"""Email (a real SMTP server, aiosmtpd, in the test process) and ntfy (a loopback server)
as a person sets them up and receives reminders; addresses checked again at send time;
redirects never followed."""

import asyncio
import email
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from email.policy import default as default_policy
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from aiosmtpd.controller import Controller
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.settings import Settings
from tests.conftest import auth, serving, token_for
from tests.push_service import FakePushService
from tests.servers import free_port, until

USER = "alice"


class Inbox:
    """What an SMTP server received (aiosmtpd's handler interface)."""

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], EmailMessage]] = []
        self._lock = threading.Lock()

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=default_policy)
        with self._lock:
            self.messages.append((list(envelope.rcpt_tos), message))
        return "250 OK"

    def to(self, address: str) -> list[EmailMessage]:
        with self._lock:
            return [message for rcpt, message in self.messages if address in rcpt]

    def clear(self) -> None:
        with self._lock:
            self.messages.clear()


@pytest.fixture(scope="module")
def smtp() -> Iterator[tuple[Inbox, int]]:
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield inbox, port
    finally:
        controller.stop()


@pytest.fixture(scope="module")
def ntfy_server() -> Iterator[FakePushService]:
    with FakePushService() as server:
        yield server


@pytest.fixture
def ntfy(ntfy_server: FakePushService) -> FakePushService:
    ntfy_server.clear()
    return ntfy_server


@pytest.fixture
def inbox(smtp: tuple[Inbox, int]) -> Inbox:
    smtp[0].clear()
    return smtp[0]


def channel_settings(
    make_settings: Callable[..., Settings], smtp_port: int, **overrides: Any
) -> Settings:
    values: dict[str, Any] = {
        "notify_allowed_hosts": "127.0.0.1",
        "reminder_poll_s": 0.1,
        "webhook_retry_schedule_s": "0.2,0.2",
        "webhook_timeout_s": 3.0,
        "public_base_url": "https://todo.example",
        "smtp_url": f"smtp://127.0.0.1:{smtp_port}",
        "mail_from": "todo-agent <todo@example.com>",
    }
    return make_settings(**(values | overrides))


@pytest.fixture
async def client(
    make_settings: Callable[..., Settings], engine: AsyncEngine, smtp: tuple[Inbox, int]
) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(channel_settings(make_settings, smtp[1])) as client:
        yield client


def verified(user: str = USER) -> dict[str, str]:
    token = token_for(user, email=f"{user}@example.com", email_verified=True)
    return {"Authorization": f"Bearer {token}"}


async def reminder_task(client: httpx.AsyncClient, title: str = "Call the plumber") -> Any:
    remind_at = (datetime.now(UTC) + timedelta(seconds=0.5)).isoformat()
    response = await client.post(
        f"/api/{USER}/tasks", headers=auth(USER), json={"title": title, "remind_at": remind_at}
    )
    assert response.status_code == 201, response.text
    return response.json()


async def mails_to(inbox: Inbox, address: str, count: int = 1) -> list[EmailMessage]:
    async def arrived() -> bool:
        return len(inbox.to(address)) >= count

    await until(arrived, timeout_s=10, message=f"no mail reached {address}")
    return inbox.to(address)


def code_of(message: EmailMessage) -> str:
    match = re.search(r"\d{6}", str(message["Subject"]))
    assert match is not None
    return match.group(0)


async def outcomes(engine: AsyncEngine) -> list[tuple[str, str | None]]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT channel, outcome FROM notify_deliveries ORDER BY id")
        )
        return [(row[0], row[1]) for row in rows]


# -- email -----------------------------------------------------------------------------------


async def test_an_address_is_used_once_the_mailed_code_comes_back(
    client: httpx.AsyncClient, inbox: Inbox
) -> None:
    response = await client.patch(
        f"/api/{USER}/notifications",
        headers=auth(USER),
        json={"email": {"address": "alice@example.org"}},
    )
    assert response.status_code == 200, response.text
    assert response.json()["email"] == {"address": "alice@example.org", "verified": False}
    [mail] = await mails_to(inbox, "alice@example.org")
    code = code_of(mail)
    assert code in mail.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    wrong = "000000" if code != "000000" else "111111"
    response = await client.post(
        f"/api/{USER}/notifications/email/verify", headers=auth(USER), json={"code": wrong}
    )
    assert response.status_code == 422
    response = await client.post(
        f"/api/{USER}/notifications/email/verify", headers=auth(USER), json={"code": code}
    )
    assert response.status_code == 200, response.text
    assert response.json()["email"] == {"address": "alice@example.org", "verified": True}


async def test_five_wrong_codes_spend_it(client: httpx.AsyncClient, inbox: Inbox) -> None:
    await client.patch(
        f"/api/{USER}/notifications",
        headers=auth(USER),
        json={"email": {"address": "alice@example.org"}},
    )
    [mail] = await mails_to(inbox, "alice@example.org")
    code = code_of(mail)
    wrong = "000000" if code != "000000" else "111111"
    for _ in range(5):
        response = await client.post(
            f"/api/{USER}/notifications/email/verify", headers=auth(USER), json={"code": wrong}
        )
        assert response.status_code == 422
    response = await client.post(
        f"/api/{USER}/notifications/email/verify", headers=auth(USER), json={"code": code}
    )
    assert response.status_code == 409  # spent: a new one must be asked for
    state = await client.get(f"/api/{USER}/notifications", headers=auth(USER))
    assert state.json()["email"]["verified"] is False


async def test_email_without_smtp_is_refused(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    async with serving(make_settings()) as client:
        response = await client.patch(
            f"/api/{USER}/notifications",
            headers=auth(USER),
            json={"email": {"address": "alice@example.org"}},
        )
        assert response.status_code == 409


async def test_a_reminder_mail_names_the_task_has_both_parts_links_and_one_click_unsubscribe(
    client: httpx.AsyncClient, inbox: Inbox
) -> None:
    settings = await client.patch(
        f"/api/{USER}/notifications", headers=verified(), json={"reminders": ["email"]}
    )
    assert settings.json()["email"] == {"address": "alice@example.com", "verified": True}
    task = await reminder_task(client)
    [mail] = await mails_to(inbox, "alice@example.com")
    assert mail["Subject"] == "Reminder: Call the plumber"
    assert mail["From"] == "todo-agent <todo@example.com>"
    assert mail["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    unsubscribe = str(mail["List-Unsubscribe"]).strip("<>")
    assert unsubscribe.startswith("https://todo.example/notifications/unsubscribe?token=")
    plain = mail.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    html = mail.get_body(("html",)).get_content()  # type: ignore[union-attr]
    assert "Call the plumber" in plain
    assert "Call the plumber" in html
    links = re.findall(r"https://todo\.example/notifications/actions\?token=\S+", plain)
    assert len(links) == 2
    # A link only shows a button (mail scanners follow links); its POST acts.
    done = urlsplit(next(link for link in links if "Done" in plain.split(link)[0][-10:]))
    page = await client.get(f"{done.path}?{done.query}")
    assert page.status_code == 200
    assert (await client.get(f"/api/{USER}/tasks/{task['id']}", headers=auth(USER))).json()[
        "completed"
    ] is False
    # One click, no login: no more reminder mails.
    target = urlsplit(unsubscribe)
    response = await client.post(
        f"{target.path}?{target.query}",
        content="List-Unsubscribe=One-Click",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 200
    state = await client.get(f"/api/{USER}/notifications", headers=auth(USER))
    assert state.json()["reminders"] == []
    await reminder_task(client, title="Second")
    await asyncio.sleep(1.0)
    assert len(inbox.to("alice@example.com")) == 1


# -- ntfy ------------------------------------------------------------------------------------


async def test_ntfy_gets_one_post_per_reminder_with_its_actions(
    client: httpx.AsyncClient, ntfy: FakePushService, engine: AsyncEngine
) -> None:
    topic = f"{ntfy.url}/alice-reminders"
    response = await client.patch(
        f"/api/{USER}/notifications",
        headers=auth(USER),
        json={"ntfy": {"url": topic}, "reminders": ["ntfy"]},
    )
    assert response.status_code == 200, response.text
    task = await reminder_task(client)

    async def posted() -> bool:
        return len(ntfy.to("/alice-reminders")) >= 1

    await until(posted, timeout_s=10, message="ntfy got no post")
    await asyncio.sleep(0.5)
    [post] = ntfy.to("/alice-reminders")
    assert post.headers["title"] == "Reminder: Call the plumber"
    assert post.headers["priority"] == "high"
    assert post.headers["tags"] == "alarm_clock"
    assert post.headers["click"] == f"https://todo.example/?task={task['id']}"
    actions = post.headers["actions"].split("; ")
    assert [action.split(", ")[1] for action in actions] == ["Done", "Snooze"]
    assert all("method=POST" in action for action in actions)
    assert "Call the plumber" in post.body.decode()
    # The Done button's request, as ntfy's app would send it.
    token = re.search(r'"token": "([^"]+)"', actions[0])
    assert token is not None
    done = await client.post("/notifications/actions", json={"token": token.group(1)})
    assert done.json()["task"]["completed"] is True
    assert await outcomes(engine) == [("ntfy", "delivered")]


async def test_a_redirect_is_not_followed(
    client: httpx.AsyncClient, ntfy: FakePushService, engine: AsyncEngine
) -> None:
    with FakePushService() as inside:
        ntfy.answer("/moved", 302, headers={"Location": f"http://localhost:{inside.port}/x"})
        await client.patch(
            f"/api/{USER}/notifications",
            headers=auth(USER),
            json={"ntfy": {"url": f"{ntfy.url}/moved"}, "reminders": ["ntfy"]},
        )
        await reminder_task(client)

        async def settled() -> bool:
            return await outcomes(engine) == [("ntfy", "failed")]

        await until(settled, timeout_s=10, message="the redirected post was not given up")
        assert inside.received == []


async def test_an_address_allowed_when_saved_is_checked_again_when_sent(
    make_settings: Callable[..., Settings],
    engine: AsyncEngine,
    smtp: tuple[Inbox, int],
    ntfy: FakePushService,
) -> None:
    async with serving(channel_settings(make_settings, smtp[1])) as client:
        await client.patch(
            f"/api/{USER}/notifications",
            headers=auth(USER),
            json={"ntfy": {"url": f"{ntfy.url}/topic"}, "reminders": ["ntfy"]},
        )
    # The operator no longer allows loopback: the next send is refused, never made.
    settings = channel_settings(make_settings, smtp[1], notify_allowed_hosts="")
    async with serving(settings) as client:
        await reminder_task(client)

        async def settled() -> bool:
            return await outcomes(engine) == [("ntfy", "refused")]

        await until(settled, timeout_s=10, message="the send was not refused")
    assert ntfy.received == []


async def test_the_same_verified_address_again_mails_no_new_code(
    client: httpx.AsyncClient, inbox: Inbox
) -> None:
    response = await client.patch(
        f"/api/{USER}/notifications",
        headers=verified(),
        json={"email": {"address": "alice@example.com", "verified": True}},
    )
    assert response.status_code == 200
    assert response.json()["email"] == {"address": "alice@example.com", "verified": True}
    await asyncio.sleep(0.5)
    assert inbox.to("alice@example.com") == []
