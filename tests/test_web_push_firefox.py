"""Web Push in a real browser: Debian's Firefox ESR, whose push service (`dom.push.serverURL`)
is a loopback server speaking Mozilla's push protocol over WebSocket (what
push.services.mozilla.com speaks to every Firefox), delivers an encrypted push to the page's
own service worker, which shows it. Chromium cannot do this: its push service is Google's.

Firefox is driven over WebDriver BiDi (`--remote-debugging-port`), which it speaks natively.
Missing Firefox: a loud skip."""

import asyncio
import base64
import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from cryptography.hazmat.primitives import hashes, hmac, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import Server, ServerConnection, serve

from backend.main import create_app
from backend.settings import Settings
from tests.conftest import server_env
from tests.fake_openai import FakeOpenAI
from tests.servers import ServerProcess, free_port, until

FIREFOX = Path(os.environ.get("FIREFOX_PATH", "/usr/bin/firefox-esr"))


def _service_paths() -> set[str]:
    settings = Settings(
        _env_file=None, database_url="postgresql://nobody@127.0.0.1:9/none", jwt_secret="x" * 40
    )
    return set(create_app(settings).openapi()["paths"])


SERVICE_PUSHES = "/push/key" in _service_paths()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _hmac(key: bytes, data: bytes) -> bytes:
    mac = hmac.HMAC(key, hashes.SHA256())
    mac.update(data)
    return mac.finalize()


def _public_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )


def encrypt_for(subscription: dict[str, Any], plaintext: bytes) -> bytes:
    """RFC 8291 `aes128gcm`, one record: what an application server sends a push service
    (the test's own application server; the service's is the notify room's)."""
    receiver = _unb64(subscription["keys"]["p256dh"])
    auth = _unb64(subscription["keys"]["auth"])
    sender = ec.generate_private_key(ec.SECP256R1())
    shared = sender.exchange(
        ec.ECDH(), ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), receiver)
    )
    key_info = b"WebPush: info\x00" + receiver + _public_bytes(sender)
    ikm = _hmac(_hmac(auth, shared), key_info + b"\x01")
    salt = os.urandom(16)
    prk = _hmac(salt, ikm)
    cek = _hmac(prk, b"Content-Encoding: aes128gcm\x00\x01")[:16]
    nonce = _hmac(prk, b"Content-Encoding: nonce\x00\x01")[:12]
    sealed = AESGCM(cek).encrypt(nonce, plaintext + b"\x02", None)  # \x02: the last record
    header = salt + (4096).to_bytes(4, "big") + bytes([65]) + _public_bytes(sender)
    return header + sealed


class MozillaPushService:
    """Mozilla's push protocol (autopush): Firefox says hello over a WebSocket and registers
    a channel per subscription; an application server POSTs an encrypted message to the
    channel's endpoint (HTTP), which goes to Firefox as a `notification` that it acks."""

    def __init__(self) -> None:
        self.ws_port = free_port()
        self.http_port = free_port()
        self.firefox: ServerConnection | None = None
        self.acks: list[dict[str, Any]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ws: Server | None = None
        self._http: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}/"

    async def _speak(self, connection: ServerConnection) -> None:
        self.firefox = connection
        async for raw in connection:
            message = json.loads(raw)
            kind = message.get("messageType")
            if kind == "hello":
                uaid = message.get("uaid") or uuid.uuid4().hex
                answer = {"messageType": "hello", "uaid": uaid, "status": 200, "use_webpush": True}
            elif kind == "register":
                channel = message["channelID"]
                endpoint = f"http://127.0.0.1:{self.http_port}/push/{channel}"
                answer = {
                    "messageType": "register",
                    "channelID": channel,
                    "status": 200,
                    "pushEndpoint": endpoint,
                }
            elif kind == "unregister":
                answer = {"messageType": "unregister", "channelID": message["channelID"]}
                answer["status"] = 200
            elif kind == "ack":
                self.acks.extend(message["updates"])
                continue
            else:  # a ping, "{}"
                answer = {}
            await connection.send(json.dumps(answer))

    async def deliver(self, channel: str, body: bytes) -> None:
        assert self.firefox is not None, "Firefox never connected"
        message = {
            "messageType": "notification",
            "channelID": channel,
            "version": uuid.uuid4().hex,
            "data": _b64(body),
            "headers": {"encoding": "aes128gcm"},
        }
        await self.firefox.send(json.dumps(message))

    async def __aenter__(self) -> "MozillaPushService":
        self.loop = asyncio.get_running_loop()
        self._ws = await serve(
            self._speak,
            "127.0.0.1",
            self.ws_port,
            subprotocols=[websockets.Subprotocol("push-notification")],
        )
        service = self

        class Endpoint(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                channel = self.path.rsplit("/", 1)[-1]
                assert service.loop is not None
                asyncio.run_coroutine_threadsafe(service.deliver(channel, body), service.loop)
                self.send_response(201)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", self.http_port), Endpoint)
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._ws is not None
        assert self._http is not None
        self._http.shutdown()
        self._http.server_close()
        self._ws.close()
        await self._ws.wait_closed()


class Firefox:
    """Firefox over WebDriver BiDi: a tab of its own per test, scripts evaluated in it."""

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection
        self.ids = 0

    async def send(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.ids += 1
        ask = self.ids
        await self.connection.send(json.dumps({"id": ask, "method": method, "params": params}))
        while True:  # no event is subscribed to: only answers come
            answer = json.loads(await self.connection.recv())
            if answer.get("id") == ask:
                assert answer.get("type") != "error", answer
                result: dict[str, Any] = answer["result"]
                return result

    async def evaluate(self, tab: str, expression: str) -> Any:
        done = await self.send(
            "script.evaluate",
            {"expression": expression, "target": {"context": tab}, "awaitPromise": True},
        )
        assert done["type"] == "success", done
        return done["result"].get("value")

    async def open(self, url: str) -> str:
        tab = (await self.send("browsingContext.create", {"type": "tab"}))["context"]
        await self.send(
            "browsingContext.navigate", {"context": tab, "url": url, "wait": "complete"}
        )
        return str(tab)


def _prefs(push_url: str) -> dict[str, Any]:
    return {
        "dom.push.serverURL": push_url,
        "dom.push.testing.allowInsecureServerURL": True,  # ws:// on loopback
        "dom.push.connection.enabled": True,
        "permissions.default.desktop-notification": 1,  # allowed: no prompt to click
        "alerts.useSystemBackend": False,  # headless has no system notifications
        "remote.active-protocols": 1,  # WebDriver BiDi
        "browser.shell.checkDefaultBrowser": False,
        "datareporting.policy.dataSubmissionEnabled": False,
        "toolkit.telemetry.reportingpolicy.firstRun": False,
        "browser.startup.homepage_override.mstone": "ignore",
        "app.update.disabledForTesting": True,
    }


@pytest.fixture(scope="module")
async def push_service() -> AsyncIterator[MozillaPushService]:
    async with MozillaPushService() as service:
        yield service


@pytest.fixture(scope="module")
async def firefox(push_service: MozillaPushService) -> AsyncIterator[Firefox]:
    if not (FIREFOX.is_file() and os.access(FIREFOX, os.X_OK)):
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {FIREFOX} is missing (.ci/run installs firefox-esr)")
        print(f"\n*** SKIPPING the Firefox push tests: {FIREFOX} is missing ***")
        pytest.skip(
            f"FIREFOX PUSH TESTS SKIPPED: {FIREFOX} is missing (apt-get install firefox-esr)"
        )
    profile = Path(tempfile.mkdtemp(prefix="todo-agent-firefox-"))
    prefs = _prefs(push_service.url)
    (profile / "user.js").write_text(
        "".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n" for k, v in prefs.items())
    )
    process = subprocess.Popen(
        [
            str(FIREFOX),
            "-headless",
            "-no-remote",
            "-profile",
            str(profile),
            f"--remote-debugging-port={free_port()}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        listening = None
        deadline = time.monotonic() + 60
        while listening is None:
            line = await asyncio.to_thread(process.stderr.readline)  # type: ignore[union-attr]
            assert line or process.poll() is None, "Firefox exited"
            if found := re.search(r"WebDriver BiDi listening on (ws://\S+)", line):
                listening = found[1]
            assert time.monotonic() < deadline, "Firefox did not start its BiDi server"
        # What Firefox says from now on is read and dropped: a full pipe would stop it.
        threading.Thread(target=process.stderr.read, daemon=True).start()  # type: ignore[union-attr]
        async with connect(f"{listening}/session", max_size=None) as connection:
            browser = Firefox(connection)
            await browser.send("session.new", {"capabilities": {}})
            yield browser
    finally:
        process.terminate()
        process.wait(30)
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def server(
    database_url: str,
    fake_openai_server: FakeOpenAI,
    engine: object,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    """Development defaults (sign-in by name); the loopback push service is allowed."""
    data = tmp_path_factory.mktemp("web-push")
    env = server_env(
        database_url,
        fake_openai_server,
        TODO_AGENT_DATA_DIR=str(data / "data"),
        NOTIFY_ALLOWED_HOSTS="127.0.0.1",
        REMINDER_POLL_S="0.2",
    )
    del env["JWT_SECRET"]
    with ServerProcess(env, log=data / "serve.log") as process:
        yield process


async def _sign_in(firefox: Firefox, server: ServerProcess, name: str) -> tuple[str, str]:
    """A tab of the page, signed in by name: (the tab, the bearer token)."""
    tab = await firefox.open(server.url)
    await firefox.evaluate(
        tab,
        f"""document.querySelector("#name-input").value = {json.dumps(name)};
            document.querySelector("#name-form").requestSubmit();""",
    )

    async def signed_in() -> bool:
        return bool(await firefox.evaluate(tab, "sessionStorage.getItem('todo-agent.session')"))

    await until(signed_in, timeout_s=20, message="the page did not sign in")
    saved = json.loads(await firefox.evaluate(tab, "sessionStorage.getItem('todo-agent.session')"))
    return tab, saved["token"]


SHOWN_ALL = "navigator.serviceWorker.ready.then((r) => r.getNotifications())"
SHOWN = (
    SHOWN_ALL
    + """
    .then((all) => JSON.stringify(all.map((n) => ({
    title: n.title, body: n.body, tag: n.tag, data: n.data,
        actions: n.actions.map((a) => [a.action, a.title]),
    }))))"""
)


async def _shown(firefox: Firefox, tab: str, count: int) -> list[dict[str, Any]]:
    async def arrived() -> bool:
        return len(json.loads(await firefox.evaluate(tab, SHOWN))) >= count

    await until(arrived, timeout_s=30, message="no notification was shown")
    shown: list[dict[str, Any]] = json.loads(await firefox.evaluate(tab, SHOWN))
    return shown


async def test_firefox_shows_a_real_encrypted_push_in_the_pages_service_worker(
    firefox: Firefox, push_service: MozillaPushService, server: ServerProcess
) -> None:
    tab, _ = await _sign_in(firefox, server, f"Fox {uuid.uuid4().hex[:6]}")
    scope = await firefox.evaluate(tab, "navigator.serviceWorker.ready.then((r) => r.scope)")
    assert scope == f"{server.url}/"

    # Subscribed with an application server key of the test's own, as a page would.
    vapid = ec.generate_private_key(ec.SECP256R1())
    options = {"userVisibleOnly": True, "applicationServerKey": _b64(_public_bytes(vapid))}
    subscription = json.loads(
        await firefox.evaluate(
            tab,
            f"""navigator.serviceWorker.ready
                .then((r) => r.pushManager.subscribe({json.dumps(options)}))
                .then((s) => JSON.stringify(s.toJSON()))""",
        )
    )
    assert subscription["endpoint"].startswith(f"http://127.0.0.1:{push_service.http_port}/push/")

    reminder = {
        "type": "reminder.due",
        "title": "Reminder",
        "body": "Call the <b>plumber</b>",
        "task": {"id": "t-1", "number": 1, "title": "Call the <b>plumber</b>", "due_at": None},
        "url": f"{server.url}/#task=t-1",
        "actions": [
            {"action": "done", "title": "Done", "token": "done-token"},
            {"action": "snooze", "title": "Snooze", "token": "snooze-token"},
        ],
    }
    channel = subscription["endpoint"].rsplit("/", 1)[-1]
    await push_service.deliver(channel, encrypt_for(subscription, json.dumps(reminder).encode()))
    [shown] = await _shown(firefox, tab, 1)
    assert shown["title"] == "Reminder"
    assert shown["body"] == "Call the <b>plumber</b>"
    assert shown["tag"] == "reminder-t-1"
    assert shown["actions"] == [["done", "Done"], ["snooze", "Snooze"]]
    assert shown["data"]["tokens"] == {"done": "done-token", "snooze": "snooze-token"}
    assert [ack["code"] for ack in push_service.acks if ack["channelID"] == channel] == [100]
    await firefox.evaluate(tab, f"{SHOWN_ALL}.then((all) => all.forEach((n) => n.close()))")


@pytest.mark.skipif(not SERVICE_PUSHES, reason="the service sends no Web Push yet (/push/key)")
async def test_a_reminder_reaches_firefox_by_push_and_done_completes_it(
    firefox: Firefox, push_service: MozillaPushService, server: ServerProcess
) -> None:
    """The whole way: the page subscribes this Firefox through the service ("Turn on for this
    browser"), the service pushes the reminder when it fires, the service worker shows it,
    and its Done (the token alone, from the worker) completes the task."""
    tab, token = await _sign_in(firefox, server, f"Fox {uuid.uuid4().hex[:6]}")
    user = json.loads(await firefox.evaluate(tab, "sessionStorage.getItem('todo-agent.session')"))[
        "userId"
    ]
    await firefox.evaluate(tab, 'document.querySelector("#open-settings").click()')

    toggle = 'document.querySelector("#push-toggle")'

    async def offered() -> bool:
        return not await firefox.evaluate(tab, f"{toggle}.hidden")

    await until(offered, timeout_s=10, message="no 'Turn on for this browser'")
    # Signing in sent the subscription an earlier test left (made afresh for the service's
    # key): then it is on already.
    if await firefox.evaluate(tab, f"{toggle}.textContent") == "Turn on for this browser":
        await firefox.evaluate(tab, f"{toggle}.click()")

    async def subscribed() -> bool:
        state = await firefox.evaluate(
            tab, 'document.querySelector("#notifications-state").textContent'
        )
        return "even while the page is closed" in str(state)

    await until(subscribed, timeout_s=30, message="the page did not subscribe")
    push_endpoint = f"http://127.0.0.1:{push_service.http_port}/push/"

    async with httpx.AsyncClient(base_url=f"{server.url}/api/{user}", timeout=30) as api:
        api.headers["Authorization"] = f"Bearer {token}"

        # The page says "on" as soon as this browser holds a subscription; one an earlier test
        # left (for another key) is replaced on sign-in, and the service hears of the new one
        # when Firefox's push service has answered.
        async def at_the_service() -> bool:
            listed = (await api.get("/push/subscriptions")).json()
            listed = listed["data"] if isinstance(listed, dict) else listed
            return [s["endpoint"].startswith(push_endpoint) for s in listed] == [True]

        await until(at_the_service, timeout_s=30, message="the service never got the subscription")
        soon = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
        made = await api.post("/tasks", json={"title": "Water the plants", "remind_at": soon})
        assert made.status_code == 201
        task = made.json()
        shown = [n for n in await _shown(firefox, tab, 1) if n["tag"] == f"reminder-{task['id']}"]
        assert shown, "the reminder's push was not shown"
        assert [a[0] for a in shown[0]["actions"]] == ["done", "snooze"]

        # Done, as the notification's button does it: its token POSTed alone, no sign-in
        # (what the worker's act() sends is checked in Chromium, tests/test_web_browser.py;
        # headless Firefox offers no way to press a notification's button, and it stops an
        # idle worker under WebDriver BiDi's feet).
        data = shown[0]["data"]
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as anyone:
            done = await anyone.post(
                "/notifications/actions", json={"token": data["tokens"]["done"]}
            )
        assert done.status_code == 200, done.text
        assert (await api.get(f"/tasks/{task['id']}")).json()["completed"] is True
