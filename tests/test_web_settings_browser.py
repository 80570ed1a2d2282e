"""The Settings' parts for reminders that reach people, CalDAV app passwords and memories, in
a real browser (Chromium) against a real `todo-agent serve`: what a person sets there is
what the API then holds, and what the service answers is what the page shows.

Each test needs its part's API, and runs once the service has it: a test whose routes are
not in the app's OpenAPI is skipped (the page itself hides a part whose API answers 404).
"""

import http.server
import importlib
import json
import re
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from email import message_from_bytes, policy
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Dialog, expect

from backend.main import create_app
from backend.settings import Settings
from tests.browser import Person, arrivals
from tests.conftest import server_env
from tests.fake_openai import FakeOpenAI, call, reply, tool_calls
from tests.servers import ServerProcess, free_port, until

# The real SMTP server the email test mails to: a test dependency of the email channel,
# imported by name so that this module loads (and skips that test) before it arrives.
try:
    Controller: Any = importlib.import_module("aiosmtpd.controller").Controller
except ImportError:
    Controller = None


def _api_paths() -> set[str]:
    settings = Settings(
        _env_file=None,
        database_url="postgresql://nobody@127.0.0.1:9/none",
        jwt_secret="x" * 40,
    )
    return set(create_app(settings).openapi()["paths"])


PATHS = _api_paths()
NOTIFICATIONS = "/api/{user_id}/notifications"


def needs(path: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(path not in PATHS, reason=f"the service has no {path} yet")


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A loopback HTTP service (an ntfy server, a push service) that records each POST."""

    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        self.received.append({"path": self.path, "headers": dict(self.headers), "body": body})
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture(scope="module")
def recorder() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(its URL, what it received)."""
    received: list[dict[str, Any]] = []
    handler = type("Handler", (_Recorder,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


class _Mailbox:
    def __init__(self, port: int) -> None:
        self.port = port
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.content, policy=policy.default))
        return "250 OK"


@pytest.fixture(scope="module")
def mailbox() -> Iterator[_Mailbox | None]:
    """A real SMTP server on loopback, where the service mails (None without aiosmtpd)."""
    if Controller is None:
        yield None
        return
    box = _Mailbox(free_port())
    controller = Controller(box, hostname="127.0.0.1", port=box.port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


@pytest.fixture(scope="module")
def server(
    database_url: str,
    fake_openai_server: FakeOpenAI,
    engine: object,
    recorder: tuple[str, list[dict[str, Any]]],
    mailbox: _Mailbox | None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    """Development defaults (the page signs in by name); ntfy and push services on loopback
    are allowed, and mail goes to the loopback SMTP server."""
    data = tmp_path_factory.mktemp("web-settings")
    mail = {}
    if mailbox is not None:
        mail = {"SMTP_URL": f"smtp://127.0.0.1:{mailbox.port}", "MAIL_FROM": "todo@example.com"}
    env = server_env(
        database_url,
        fake_openai_server,
        TODO_AGENT_DATA_DIR=str(data / "data"),
        OPENAI_TIMEOUT_S="5",
        OPENAI_MAX_RETRIES="0",
        NOTIFY_ALLOWED_HOSTS="127.0.0.1",
        **mail,
    )
    del env["JWT_SECRET"]
    with ServerProcess(env, log=data / "serve.log") as process:
        yield process


@pytest.fixture
async def person(
    browser: Browser, server: ServerProcess, model: FakeOpenAI
) -> AsyncIterator[Person]:
    async with arrivals(browser, server, viewport={"width": 1280, "height": 900}) as arrive:
        yield await arrive("Tester")


def _items(answer: httpx.Response) -> list[dict[str, Any]]:
    """A listing's items, as `{"data": [...]}` or a bare list (the contract names neither)."""
    assert answer.status_code == 200, answer.text
    body = answer.json()
    items: list[dict[str, Any]] = body["data"] if isinstance(body, dict) else body
    return items


async def _accept(dialog: Dialog) -> None:
    """Say yes to a confirm() ("Revoke ...?", "Forget everything ...?")."""
    await dialog.accept()


# ---------------------------------------------------------------- where reminders go


@needs(NOTIFICATIONS)
async def test_notification_settings_set_ntfy_the_daily_plan_and_quiet_hours_and_send_a_test(
    person: Person, recorder: tuple[str, list[dict[str, Any]]]
) -> None:
    base, received = recorder
    topic = f"{base}/topic-{uuid.uuid4().hex[:8]}"
    dialog = await person.settings()
    reminders = dialog.get_by_role("group", name="Send reminders to")
    plan = dialog.get_by_role("group", name="Send the daily plan to")

    await dialog.get_by_label("ntfy topic URL").fill(topic)
    await reminders.get_by_label("ntfy").check()
    await dialog.get_by_label("Daily plan at").fill("08:00")
    await plan.get_by_label("ntfy").check()
    await dialog.get_by_label("Quiet hours").check()
    await dialog.get_by_label("From", exact=True).fill("22:30")
    await dialog.get_by_label("Until", exact=True).fill("06:45")
    await dialog.get_by_role("button", name="Save").click()
    await expect(dialog.get_by_role("status")).to_have_text("Saved.")
    await person.shot("settings-notifications", full_page=True)

    held = (await person.api("GET", "/notifications")).json()
    assert held["ntfy"] == {"url": topic}
    assert "ntfy" in held["reminders"]
    assert held["digest"]["at"] == "08:00"
    assert "ntfy" in held["digest"]["channels"]  # beside those on by default
    assert held["quiet_hours"] == {"start": "22:30", "end": "06:45"}

    # Open again: the page shows what the service holds.
    await person.page.keyboard.press("Escape")
    dialog = await person.settings()
    await expect(dialog.get_by_label("ntfy topic URL")).to_have_value(topic)
    await expect(dialog.get_by_label("Daily plan at")).to_have_value("08:00")
    await expect(dialog.get_by_label("From", exact=True)).to_have_value("22:30")

    # No quiet hours (a test sent now is not held), then a test reaches the ntfy topic.
    await dialog.get_by_label("Quiet hours").uncheck()
    await dialog.get_by_role("button", name="Send a test").click()
    await expect(dialog.get_by_role("status")).to_contain_text("test notification")
    assert (await person.api("GET", "/notifications")).json()["quiet_hours"] is None

    async def posted() -> bool:
        return any(r["path"] == topic.removeprefix(base) for r in received)

    await until(posted, timeout_s=30, message="the test never reached the ntfy topic")


@needs(NOTIFICATIONS)
async def test_a_private_address_as_the_ntfy_url_is_refused_and_nothing_is_saved(
    person: Person,
) -> None:
    dialog = await person.settings()
    await dialog.get_by_label("ntfy topic URL").fill("http://10.20.30.40/secret-topic")
    await dialog.get_by_role("button", name="Save").click()
    await expect(dialog.get_by_role("alert")).to_be_visible()
    await expect(dialog.get_by_role("status")).not_to_have_text("Saved.")
    assert (await person.api("GET", "/notifications")).json()["ntfy"] is None


@needs("/api/{user_id}/notifications/email/verify")
async def test_an_email_address_is_verified_with_the_code_it_was_mailed(
    person: Person, mailbox: _Mailbox | None
) -> None:
    if mailbox is None:
        pytest.skip("aiosmtpd is not installed")
    address = f"{person.user_id}@example.com"
    dialog = await person.settings()
    await dialog.get_by_label("Email address").fill(address)
    await dialog.get_by_role("button", name="Send a code").click()
    await expect(dialog.get_by_role("status")).to_contain_text(f"A code is on its way to {address}")
    await expect(dialog.locator("#notify-email-state")).to_contain_text("Not verified yet")

    async def mailed() -> bool:
        return any(address in str(m["To"]) for m in mailbox.messages)

    await until(mailed, timeout_s=30, message="no code was mailed")
    mail = next(m for m in reversed(mailbox.messages) if address in str(m["To"]))
    text = mail.get_body(preferencelist=("plain",)).get_content()
    # The digits next to "code" (a mail may hold other numbers: a date, a year).
    code = re.search(r"(?i)code\D{0,40}?\b(\d{4,10})\b", text) or re.search(r"\b(\d{6})\b", text)
    assert code, text

    await dialog.get_by_label("Code from the email").fill(
        "000000" if code[1] != "000000" else "111111"
    )
    await dialog.get_by_role("button", name="Verify").click()
    await expect(dialog.get_by_role("alert")).to_be_visible()  # a wrong code says so

    await dialog.get_by_label("Code from the email").fill(code[1])
    await dialog.get_by_role("button", name="Verify").click()
    await expect(dialog.get_by_role("status")).to_contain_text(
        f"Verified: reminders can be mailed to {address}"
    )
    held = (await person.api("GET", "/notifications")).json()
    assert held["email"] == {"address": address, "verified": True}


# A browser push subscription as Chromium would make one with a push service it can reach
# (headless Chromium cannot reach Google's): a real P-256 key pair and auth secret, an
# endpoint on loopback. Permission is granted on the first ask and both outlive a reload.
FAKE_PUSH = """((endpoint) => {
    const record = { asked: 0, subscribed: 0 };
    window.__push = record;
    class Recorded {
        static get permission() { return localStorage.getItem("fake-permission") ?? "default"; }
        static async requestPermission() {
            record.asked += 1;
            localStorage.setItem("fake-permission", "granted");
            return "granted";
        }
        constructor() {}
    }
    window.Notification = Recorded;
    const b64 = (bytes) => btoa(String.fromCharCode(...bytes))
        .replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
    const stored = () => JSON.parse(localStorage.getItem("fake-push") ?? "null");
    const wrap = (json) => json && {
        endpoint: json.endpoint,
        options: { applicationServerKey: null },
        toJSON: () => json,
        unsubscribe: async () => (localStorage.removeItem("fake-push"), true),
    };
    PushManager.prototype.getSubscription = async function () { return wrap(stored()); };
    PushManager.prototype.subscribe = async function (options) {
        record.subscribed += 1;
        record.keyBytes = new Uint8Array(options.applicationServerKey).length;
        if (!stored()) {
            const pair = await crypto.subtle.generateKey(
                { name: "ECDH", namedCurve: "P-256" }, true, ["deriveBits"]);
            const raw = new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey));
            const auth = crypto.getRandomValues(new Uint8Array(16));
            localStorage.setItem("fake-push", JSON.stringify(
                { endpoint, expirationTime: null, keys: { p256dh: b64(raw), auth: b64(auth) } }));
        }
        return wrap(stored());
    };
})"""


@needs("/api/{user_id}/push/subscriptions")
async def test_notifications_on_subscribe_this_browser_and_each_load_sends_it_again(
    person: Person, recorder: tuple[str, list[dict[str, Any]]]
) -> None:
    base, _ = recorder
    endpoint = f"{base}/push/{uuid.uuid4().hex}"
    page = person.page
    await page.context.add_init_script(f"{FAKE_PUSH}({json.dumps(endpoint)})")
    await page.reload()
    await expect(page.locator("#who-name")).to_have_text(person.name)

    dialog = await person.settings()
    await dialog.get_by_role("button", name="Enable notifications").click()
    await expect(dialog.locator("#notifications-state")).to_contain_text(
        "even while the page is closed"
    )
    assert await page.evaluate("window.__push.keyBytes") == 65  # the service's VAPID key, raw
    listed = _items(await person.api("GET", "/push/subscriptions"))
    assert [s["endpoint"] for s in listed] == [endpoint]

    # Every load sends it again (a browser may have replaced it); still one subscription.
    sent: list[str] = []
    page.on(
        "request",
        lambda r: sent.append(r.method) if r.url.endswith("/push/subscriptions") else None,
    )
    await page.keyboard.press("Escape")
    await page.reload()
    await expect(page.locator("#who-name")).to_have_text(person.name)

    async def resent() -> bool:
        return "POST" in sent

    await until(resent, timeout_s=10, message="the page did not send its subscription again")
    listed = _items(await person.api("GET", "/push/subscriptions"))
    assert [s["endpoint"] for s in listed] == [endpoint]

    dialog = await person.settings()
    await dialog.get_by_role("button", name="Turn off for this browser").click()
    await expect(dialog.get_by_role("button", name="Turn on for this browser")).to_be_visible()
    assert _items(await person.api("GET", "/push/subscriptions")) == []


# ---------------------------------------------------------------- apps (CalDAV)


@needs("/api/{user_id}/app-passwords")
async def test_an_app_password_is_shown_once_with_the_server_and_username_then_revoked(
    person: Person,
) -> None:
    page = person.page
    page.on("dialog", _accept)  # "Revoke ...?"
    dialog = await person.settings()
    await dialog.get_by_label("Device name").fill("Ada's <b>iPhone</b>")
    await dialog.get_by_label("Read only").check()
    await dialog.get_by_role("button", name="Make app password").click()
    server_box = dialog.get_by_label("Server", exact=True)
    await expect(server_box).to_have_value(f"{person.server.url}/dav/")
    username = await dialog.get_by_label("Username", exact=True).input_value()
    password = await dialog.get_by_label("Password", exact=True).input_value()
    assert username
    assert len(password) >= 16
    items = dialog.locator("#app-password-list > li")
    await expect(items).to_have_count(1)
    await expect(items.first.locator(".name")).to_have_text("Ada's <b>iPhone</b>")  # as text
    await expect(items.first).to_contain_text("read only")
    await expect(items.first).to_contain_text("never used")
    await person.shot("settings-app-password", full_page=True)

    async with httpx.AsyncClient(timeout=10) as client:
        found = await client.request(
            "PROPFIND",
            f"{person.server.url}/dav/",
            auth=(username, password),
            headers={"Depth": "0"},
        )
        assert found.status_code == 207

        # Shown once: open again, and the password is not there; its use is.
        await page.keyboard.press("Escape")
        dialog = await person.settings()
        await expect(dialog.get_by_label("Password", exact=True)).to_be_hidden()
        await expect(items.first).to_contain_text("last used")

        await dialog.get_by_role(
            "button", name="Revoke the app password Ada's <b>iPhone</b>"
        ).click()
        await expect(dialog.get_by_role("status")).to_contain_text("no longer works")
        await expect(items).to_have_count(1)  # "No app passwords yet."
        await expect(items.first).to_have_text("No app passwords yet.")
        refused = await client.request(
            "PROPFIND",
            f"{person.server.url}/dav/",
            auth=(username, password),
            headers={"Depth": "0"},
        )
        assert refused.status_code == 401
    assert _items(await person.api("GET", "/app-passwords")) == []


# ---------------------------------------------------------------- memories


@needs("/api/{user_id}/memories")
async def test_memories_are_listed_newest_first_edited_deleted_and_forgotten(
    person: Person,
) -> None:
    page = person.page
    page.on("dialog", _accept)  # "Forget everything ...?"
    for text in ["My dentist is Dr. Lee", "My gate code is <b>4711</b>"]:
        assert (await person.api("POST", "/memories", json={"text": text})).status_code == 201
    dialog = await person.settings()
    memories = dialog.locator("#memory-list > li .text")
    await expect(memories).to_have_text(["My gate code is <b>4711</b>", "My dentist is Dr. Lee"])
    await person.shot("settings-memories", full_page=True)

    await dialog.get_by_role("button", name="Edit memory: My dentist is Dr. Lee").click()
    await dialog.get_by_label("Memory", exact=True).fill("My dentist is Dr. Ana Lee")
    await dialog.get_by_label("Memory", exact=True).press("Enter")
    # Newest first by when each was said: an edit keeps its place.
    await expect(memories).to_have_text(
        ["My gate code is <b>4711</b>", "My dentist is Dr. Ana Lee"]
    )
    await expect(dialog).to_be_visible()  # Enter saved the memory, not the whole dialog
    held = (await person.api("GET", "/memories")).json()["data"]
    assert [m["text"] for m in held] == ["My gate code is <b>4711</b>", "My dentist is Dr. Ana Lee"]

    await dialog.get_by_role("button", name="Delete memory: My gate code is <b>4711</b>").click()
    await expect(memories).to_have_text(["My dentist is Dr. Ana Lee"])

    await dialog.get_by_role("button", name="Forget everything").click()
    await expect(dialog.locator("#memory-list")).to_contain_text("Nothing yet")
    assert (await person.api("GET", "/memories")).json()["data"] == []


@needs("/api/{user_id}/memories")
async def test_an_answer_that_saved_a_memory_says_remembered_and_undo_takes_it_back(
    person: Person, model: FakeOpenAI
) -> None:
    model.script(
        tool_calls(call("remember", {"text": "My dentist is Dr. Lee"})),
        reply("I will remember that your dentist is Dr. Lee."),
    )
    page = person.page
    await page.get_by_label("Message").fill("Remember that my dentist is Dr. Lee")
    await page.get_by_label("Message").press("Enter")
    answer = page.locator(".message.assistant").last
    await expect(answer.locator(".activity")).to_contain_text("Remembered “My dentist is Dr. Lee”")
    held = (await person.api("GET", "/memories")).json()["data"]
    assert [m["text"] for m in held] == ["My dentist is Dr. Lee"]
    await person.shot("chat-remembered", full_page=True)

    await answer.get_by_role("button", name="Undo the changes of this turn").click()
    await expect(answer.locator(".badge.undone")).to_be_visible()
    assert (await person.api("GET", "/memories")).json()["data"] == []
