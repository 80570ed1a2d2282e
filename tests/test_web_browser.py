"""The chat page in a real browser (Chromium) against a real `todo-agent serve` and the
scripted model: what a person sees and does. Screenshots go to tests/artifacts/web/."""

import asyncio
import http.server
import json
import re
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from playwright.async_api import (
    Browser,
    Dialog,
    FilePayload,
    Locator,
    Page,
    Request,
    expect,
)
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.auth import create_token
from backend.models.session import AgentSession
from tests.browser import SHOTS, Arrive, Person, arrivals
from tests.conftest import server_env
from tests.fake_openai import FakeOpenAI, call, error, reply, tool_calls
from tests.servers import ServerProcess, free_port, run_cli, until
from tests.test_erasure import ONLY_USER_DELETED, rows_naming

RATE_LIMIT = 6
BERLIN = ZoneInfo("Europe/Berlin")  # the browser's timezone in these tests


@contextmanager
def _origin(port: int) -> Iterator[str]:
    """Another web origin on loopback: an empty page that a test runs fetch() from."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!doctype html><title>another origin</title>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def origins() -> Iterator[tuple[str, str]]:
    """(an origin in CORS_ORIGINS, one that is not)."""
    with _origin(free_port()) as allowed, _origin(free_port()) as other:
        yield allowed, other


@pytest.fixture(scope="module")
def server(
    database_url: str,
    fake_openai_server: FakeOpenAI,
    engine: object,
    origins: tuple[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    """Development defaults: no JWT settings, so the server makes its own secret and the
    page signs in by name."""
    data = tmp_path_factory.mktemp("web")
    env = server_env(
        database_url,
        fake_openai_server,
        TODO_AGENT_DATA_DIR=str(data / "data"),
        OPENAI_TIMEOUT_S="2",
        OPENAI_MAX_RETRIES="0",
        CHAT_RATE_LIMIT_PER_MINUTE=str(RATE_LIMIT),
        CORS_ORIGINS=origins[0],
        AGENT_MODELS="gpt-4o-mini,gpt-4.1",
        REMINDER_POLL_S="0.2",  # a reminder a second ahead fires within the test's wait
    )
    del env["JWT_SECRET"]
    with ServerProcess(env, log=data / "serve.log") as process:
        yield process


@pytest.fixture
async def people(
    browser: Browser, server: ServerProcess, model: FakeOpenAI
) -> AsyncIterator[Arrive]:
    """`await people("Alice", at=link)`: someone new at the page, signed in by name."""
    async with arrivals(browser, server, viewport={"width": 1280, "height": 800}) as arrive:
        yield arrive


@pytest.fixture
async def person(people: Arrive) -> Person:
    return await people("Tester")


async def test_the_answer_streams_in_and_a_tool_call_fills_the_task_list(
    person: Person, model: FakeOpenAI
) -> None:
    yesterday = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()
    model.script(
        tool_calls(
            call("add_todo", {"title": "Buy milk", "due_at": yesterday, "priority": "high"})
        ),
        reply(
            "Added task 1: Buy milk.",
            chunks=["Added", " task 1:", " Buy milk."],
            chunk_interval_s=0.3,
        ),
    )
    sent: list[Request] = []
    person.page.on("request", lambda r: sent.append(r) if r.url.endswith("/chat/stream") else None)
    await person.send("Add a task to buy milk")

    answer = person.page.locator(".message.assistant").last
    # Seen part-way: the first words while the rest is still being written.
    await person.page.wait_for_function(
        """() => [...document.querySelectorAll('.message.assistant.streaming .text')]
                 .some((node) => node.textContent === 'Added')"""
    )
    await expect(answer.locator(".text")).to_have_text("Added task 1: Buy milk.")
    await expect(answer).not_to_have_class(re.compile(r"\bstreaming\b"))
    await expect(answer.locator(".activity")).to_have_text("Added task 1: Buy milk")
    await expect(answer.locator(".badge.stub")).to_have_count(0)
    await expect(person.page.get_by_label("Message")).to_have_value("")

    task = person.page.locator("#task-list .task")
    await expect(task).to_have_count(1)
    await expect(task.locator(".title")).to_have_text("Buy milk")
    await expect(task.locator(".badge.priority")).to_have_text("high")
    await expect(task).to_have_class(re.compile(r"\boverdue\b"))
    await expect(task.locator(".due")).to_contain_text("Overdue")
    await expect(person.page.locator("#session-list .title")).to_have_text("Add a task to buy milk")
    await person.shot("chat-with-tool-call")

    body = json.loads(sent[0].post_data or "{}")
    assert body["timezone"] == "Europe/Berlin"
    assert body["session_id"] is None


async def test_stub_answers_are_marked(person: Person, model: FakeOpenAI) -> None:
    model.default = error(500)  # the model fails: the stub answers, and says so
    await person.send("Add a task to water the plants")
    answer = person.page.locator(".message.assistant").last
    await expect(answer.locator(".badge.stub")).to_be_visible()
    await expect(person.page.locator("#task-list .task .title")).to_have_text("Water the plants")


async def test_tasks_complete_reopen_and_delete_by_click(person: Person) -> None:
    for title in ("Call mom", "Pay bills"):
        assert (await person.api("POST", "/tasks", json={"title": title})).status_code == 201
    await person.page.reload()
    tasks = person.page.locator("#task-list .task")
    await expect(tasks).to_have_count(2)

    await person.page.get_by_label("Complete task 1: Call mom").check()
    await expect(tasks.first).to_have_class(re.compile(r"\bdone\b"))
    assert (await person.api("GET", "/tasks/1")).json()["completed"] is True
    await person.shot("task-completed")

    await person.page.get_by_label("Reopen task 1: Call mom").uncheck()
    await expect(tasks.first).not_to_have_class(re.compile(r"\bdone\b"))
    assert (await person.api("GET", "/tasks/1")).json()["completed"] is False

    await person.page.get_by_role("button", name="Delete task 2: Pay bills").click()
    await expect(tasks).to_have_count(1)
    assert (await person.api("GET", "/tasks/2")).status_code == 404


async def test_a_plan_shows_its_progress_and_its_steps_tick_off(person: Person) -> None:
    plan = {"title": "Move house", "steps": ["Book the van", "Pack boxes", "Hand in keys"]}
    assert (await person.api("POST", "/tasks", json=plan)).status_code == 201
    await person.page.reload()
    tasks = person.page.locator("#task-list > li.task")
    await expect(tasks).to_have_count(1)  # the steps are not listed as tasks of their own
    await expect(tasks.locator(".progress")).to_have_text("0/3 steps")

    await person.page.get_by_role("button", name="Steps of task 1: Move house").click()
    steps = tasks.locator(".steps > li")
    await expect(steps.locator(".title")).to_have_text(plan["steps"])
    expanded = person.page.get_by_role("button", name="Steps of task 1: Move house")
    await expect(expanded).to_be_focused()  # the keyboard keeps its place
    await expect(expanded).to_have_attribute("aria-expanded", "true")

    await person.page.get_by_label("Complete step 2: Book the van").press("Space")
    await expect(tasks.locator(".progress")).to_have_text("1/3 steps")
    await expect(person.page.get_by_label("Reopen step 2: Book the van")).to_be_focused()
    await expect(steps.first).to_have_class(re.compile(r"\bdone\b"))
    assert (await person.api("GET", "/tasks/2")).json()["completed"] is True

    await person.page.get_by_label("New step for task 1").fill("Forward the mail")
    await person.page.get_by_label("New step for task 1").press("Enter")
    await expect(tasks.locator(".progress")).to_have_text("1/4 steps")
    await expect(steps.last.locator(".title")).to_have_text("Forward the mail")
    await expect(person.page.get_by_label("New step for task 1")).to_be_focused()
    await person.shot("plan-with-steps")

    await person.page.get_by_role("button", name="Delete step 3: Pack boxes").click()
    await expect(tasks.locator(".progress")).to_have_text("1/3 steps")
    assert (await person.api("GET", "/tasks/3")).status_code == 404

    await person.page.set_viewport_size({"width": 390, "height": 844})
    await person.page.get_by_role("button", name="Tasks", exact=True).click()
    await expect(person.page.get_by_label("New step for task 1")).to_be_in_viewport()
    assert await person.page.evaluate("document.documentElement.scrollWidth") <= 390
    await person.shot("phone-plan")


async def test_the_settings_panel_saves_instructions_and_model(person: Person) -> None:
    page = person.page
    await page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    await expect(dialog).to_be_visible()
    # Never chosen: the browser's own timezone is offered.
    await expect(dialog.get_by_label("Timezone")).to_have_value("Europe/Berlin")
    await expect(dialog.get_by_label("Model")).to_have_value("gpt-4o-mini")

    await dialog.get_by_label("Timezone").fill("Mars/Olympus")
    await dialog.get_by_role("button", name="Save").click()
    await expect(dialog.get_by_role("alert")).to_contain_text("Timezone")
    await person.shot("settings-invalid")

    await dialog.get_by_label("Timezone").fill("Europe/Lisbon")
    await dialog.get_by_label("Display name").fill("Ana")
    await dialog.get_by_label("Instructions for the assistant").fill("Answer in Portuguese.")
    await dialog.get_by_label("Model").select_option("gpt-4.1")
    await dialog.get_by_role("button", name="Save").click()
    await expect(dialog.get_by_role("status")).to_have_text("Saved.")
    await expect(dialog.get_by_role("alert")).to_be_hidden()
    await person.shot("settings-saved")
    await page.keyboard.press("Escape")
    await expect(dialog).to_be_hidden()
    await expect(page.locator("#who-name")).to_have_text("Ana")

    saved = (await person.api("GET", "/settings")).json()
    assert saved["instructions"] == "Answer in Portuguese."
    assert saved["model"] == "gpt-4.1"
    assert saved["timezone"] == "Europe/Lisbon"
    assert saved["display_name"] == "Ana"


async def test_a_past_session_reopens_with_its_history_and_can_be_renamed_and_deleted(
    person: Person, model: FakeOpenAI
) -> None:
    model.script(reply("Noted the first thing."), reply("Noted the second thing."))
    first = (await person.api("POST", "/chat", json={"message": "The first thing"})).json()
    await person.api("POST", "/chat", json={"message": "The second thing"})
    await person.page.reload()
    sessions = person.page.locator("#session-list > li")
    await expect(sessions).to_have_count(2)
    await expect(sessions.first.locator(".title")).to_have_text("The second thing")

    await person.page.get_by_role("button", name="Open session: The first thing").click()
    log = person.page.locator("#log")
    await expect(log.locator(".message.user .text")).to_have_text(["The first thing"])
    await expect(log.locator(".message.assistant .text")).to_have_text(["Noted the first thing."])
    await expect(sessions.nth(1)).to_have_class(re.compile(r"\bactive\b"))
    await person.shot("past-session")

    await person.page.get_by_role("button", name="Rename session: The first thing").click()
    await person.page.get_by_label("New session title").fill("Renamed <b>plan</b>")
    await person.page.get_by_label("New session title").press("Enter")
    await expect(sessions.nth(1).locator(".title")).to_have_text("Renamed <b>plan</b>")
    stored = await person.api("GET", f"/sessions/{first['session_id']}")
    assert stored.json()["title"] == "Renamed <b>plan</b>"

    person.page.once("dialog", lambda dialog: dialog.accept())
    await person.page.get_by_role("button", name="Delete session: Renamed <b>plan</b>").click()
    await expect(sessions).to_have_count(1)
    await expect(log.locator(".message")).to_have_count(0)  # the open session went with it
    assert (await person.api("GET", f"/sessions/{first['session_id']}")).status_code == 404


async def test_sessions_come_a_page_at_a_time(person: Person, engine: AsyncEngine) -> None:
    start = datetime.now(UTC) - timedelta(days=1)
    async with AsyncSession(engine) as db, db.begin():
        db.add_all(
            AgentSession(
                user_id=person.user_id,
                title=f"Chat {n:02d}",
                created_at=start + timedelta(minutes=n),
                updated_at=start + timedelta(minutes=n),
            )
            for n in range(22)
        )
    await person.page.reload()
    titles = person.page.locator("#session-list .title")
    await expect(titles).to_have_count(20)
    await expect(titles.first).to_have_text("Chat 21")  # most recent first
    await person.page.get_by_role("button", name="Load more").click()
    await expect(titles).to_have_count(22)
    await expect(titles.last).to_have_text("Chat 00")
    await expect(person.page.get_by_role("button", name="Load more")).to_be_hidden()


async def test_a_title_that_looks_like_html_is_shown_as_text(
    person: Person, model: FakeOpenAI
) -> None:
    xss = "<img src=x onerror=alert(1)>"
    dialogs: list[Dialog] = []
    person.page.on("dialog", lambda dialog: dialogs.append(dialog))
    model.script(tool_calls(call("add_todo", {"title": xss})), reply(f"Added task 1: {xss}"))
    await person.send(f"Add {xss}")
    answer = person.page.locator(".message.assistant").last
    await expect(answer.locator(".text")).to_have_text(f"Added task 1: {xss}")
    await expect(person.page.locator("#task-list .task .title")).to_have_text(xss)
    await expect(person.page.locator(".message.user .text")).to_have_text(f"Add {xss}")
    await expect(person.page.locator("#session-list .title")).to_have_text(f"Add {xss}")
    assert await person.page.locator("main img").count() == 0
    assert dialogs == []
    await person.shot("html-as-text")


async def test_too_many_messages_show_the_wait_and_keep_the_text(
    person: Person, model: FakeOpenAI
) -> None:
    for n in range(RATE_LIMIT):
        sent = await person.api("POST", "/chat", json={"message": f"message {n}"})
        assert sent.status_code == 200, sent.text
    await person.send("One more, please")
    error = person.page.get_by_role("alert")
    await expect(error).to_contain_text("You are sending messages too quickly.")
    await expect(error).to_contain_text(" s.")  # "Try again in 42 s."
    await expect(person.page.get_by_label("Message")).to_have_value("One more, please")
    await person.shot("rate-limited")


async def test_a_network_failure_says_so_and_keeps_the_text(person: Person) -> None:
    await person.page.context.set_offline(True)
    await person.send("Add a task while offline")
    error = person.page.get_by_role("alert")
    await expect(error).to_have_text(
        "Cannot reach the service. Check your connection, then try again."
    )
    await expect(person.page.get_by_label("Message")).to_have_value("Add a task while offline")
    await person.page.context.set_offline(False)
    await person.page.get_by_role("button", name="Send").click()
    await expect(error).to_be_hidden()
    await expect(person.page.get_by_label("Message")).to_have_value("")


async def test_the_page_is_usable_on_a_phone(person: Person, model: FakeOpenAI) -> None:
    page = person.page
    await page.set_viewport_size({"width": 390, "height": 844})
    model.script(tool_calls(call("add_todo", {"title": "Buy bread"})), reply("Added task 1."))
    await page.get_by_label("Message").fill("Add bread\nplease")  # Shift+Enter would do this
    await page.get_by_role("button", name="Send").click()
    await expect(page.locator(".message.assistant .text")).to_have_text("Added task 1.")
    await expect(page.locator(".message.user .text")).to_have_text("Add bread\nplease")
    await expect(page.get_by_role("button", name="Send")).to_be_in_viewport()
    await expect(page.get_by_label("Message")).to_be_in_viewport()
    await person.shot("phone-chat")
    assert await page.evaluate("document.documentElement.scrollWidth") <= 390

    await page.get_by_role("button", name="Tasks", exact=True).click()
    await expect(page.locator("#chat")).to_be_hidden()
    await expect(page.get_by_label("Complete task 1: Buy bread")).to_be_visible()
    await person.shot("phone-tasks")
    await page.get_by_role("button", name="Sessions", exact=True).click()
    await expect(page.get_by_role("button", name="New chat")).to_be_visible()
    assert await page.evaluate("document.documentElement.scrollWidth") <= 390


async def test_shift_enter_makes_a_new_line_and_enter_sends(
    person: Person, model: FakeOpenAI
) -> None:
    box = person.page.get_by_label("Message")
    await box.type("first line")
    await box.press("Shift+Enter")
    await box.type("second line")
    await expect(box).to_have_value("first line\nsecond line")
    await box.press("Enter")
    await expect(person.page.locator(".message.user .text")).to_have_text("first line\nsecond line")


async def test_cors_lets_only_the_configured_origin_call_the_api(
    browser: Browser, server: ServerProcess, origins: tuple[str, str]
) -> None:
    minted = httpx.post(f"{server.url}/dev/token", json={"name": "Cors Tester"}).json()
    context = await browser.new_context()
    page = await context.new_page()
    script = """async ([url, token]) => {
        try {
            const response = await fetch(url, {headers: {Authorization: `Bearer ${token}`}});
            return {status: response.status, body: await response.json()};
        } catch (error) {
            return {blocked: String(error)};
        }
    }"""
    url = f"{server.url}/api/{minted['user_id']}/tasks"
    allowed, other = origins
    try:
        await page.goto(allowed)
        answer = await page.evaluate(script, [url, minted["token"]])
        assert answer == {"status": 200, "body": {"data": [], "count": 0}}
        await page.goto(other)
        answer = await page.evaluate(script, [url, minted["token"]])
        assert "blocked" in answer
        assert "Failed to fetch" in answer["blocked"]
    finally:
        await context.close()


async def test_an_expired_token_asks_to_sign_in_again(
    browser: Browser, server: ServerProcess
) -> None:
    secret = (Path(server.env["TODO_AGENT_DATA_DIR"]) / "jwt_secret").read_text().strip()
    expired = create_token(secret=secret, user_id="dev-late", name="Late", ttl_s=-3600)
    context = await browser.new_context()
    page = await context.new_page()
    try:
        await page.goto(server.url)
        await page.get_by_label("Bearer token").fill(expired)
        await page.get_by_role("button", name="Use token").click()
        await expect(page.locator("#sign-in-reason")).to_have_text(
            "Your sign-in has expired or is not valid. Please sign in again."
        )
        await expect(page.locator("#app")).to_be_hidden()
        assert await page.evaluate("sessionStorage.length") == 0
        await page.get_by_label("Your name").fill("Late")
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.locator("#task-list")).to_contain_text("No tasks here yet.")
    finally:
        await context.close()


async def test_signing_in_with_a_bearer_token_and_out_again(
    browser: Browser, server: ServerProcess
) -> None:
    minted = httpx.post(f"{server.url}/dev/token", json={"name": "Token Person"}).json()
    context = await browser.new_context()
    page = await context.new_page()
    try:
        await page.goto(server.url)
        await page.get_by_label("Bearer token").fill(minted["token"])
        await page.get_by_role("button", name="Use token").click()
        await expect(page.locator("#who-name")).to_have_text("Token Person")
        await expect(page.locator("#task-list")).to_contain_text("No tasks here yet.")
        await page.get_by_role("button", name="Sign out").click()
        await expect(page.get_by_label("Bearer token")).to_be_visible()
        assert await page.evaluate("sessionStorage.length") == 0
        await page.screenshot(path=SHOTS / "sign-in.png")
    finally:
        await context.close()


# ---------------------------------------------------------------- live: events, reminders, time

# A stand-in for the browser's Notification API that records what the page does with it:
# headless Chromium shows nothing, and a test must see that permission is asked only on a
# click.
RECORD_NOTIFICATIONS = """(() => {
    const record = { asked: 0, shown: [] };
    window.__notifications = record;
    class Recorded {
        static permission = "default";
        static async requestPermission() {
            record.asked += 1;
            Recorded.permission = "granted";
            return "granted";
        }
        constructor(title, options) {
            record.shown.push({ title, body: options?.body });
        }
    }
    window.Notification = Recorded;
})();"""


async def _second_tab(person: Person) -> Person:
    """The same person in another tab (a tab of its own: sessionStorage is per tab)."""
    other = Person(await person.page.context.new_page(), person.server, person.name)
    await other.sign_in()
    return other


async def test_the_task_list_follows_changes_made_in_another_tab_or_through_the_api(
    person: Person,
) -> None:
    other = await _second_tab(person)
    tasks = other.page.locator("#task-list > li.task")
    await expect(other.page.locator("#task-list")).to_contain_text("No tasks here yet.")

    # Made through the API: the other tab shows it without a reload.
    assert (await person.api("POST", "/tasks", json={"title": "Call mom"})).status_code == 201
    await expect(tasks.locator(".title")).to_have_text(["Call mom"])

    # Someone typing in the list keeps their place and their words through a live redraw.
    await other.page.get_by_role("button", name="Add steps to task 1: Call mom").click()
    step_box = other.page.get_by_label("New step for task 1")
    await step_box.fill("Ask about the")
    assert (await person.api("POST", "/tasks", json={"title": "Pay bills"})).status_code == 201
    await expect(tasks).to_have_count(2)
    await expect(step_box).to_be_focused()
    await expect(step_box).to_have_value("Ask about the")

    # Made in one tab: the other follows.
    await expect(person.page.locator("#task-list > li.task")).to_have_count(2)
    await person.page.get_by_label("Complete task 1: Call mom").check()
    await expect(tasks.first).to_have_class(re.compile(r"\bdone\b"))
    await person.page.get_by_role("button", name="Delete task 2: Pay bills").click()
    await expect(tasks).to_have_count(1)
    await expect(other.page.locator("#task-count")).to_have_text("(1)")

    # A drop (the server crashes and comes back): the page reconnects by itself, sending
    # the id of the last event it saw, and what happened meanwhile arrives.
    resumed: list[str | None] = []
    other.page.on(
        "request",
        lambda r: (
            resumed.append(r.headers.get("last-event-id")) if r.url.endswith("/events") else None
        ),
    )
    seen = await person.api("GET", "/tasks", params={"limit": 1})  # the server is up
    assert seen.status_code == 200
    person.server.kill()
    person.server.start()
    assert (await person.api("POST", "/tasks", json={"title": "Book dentist"})).status_code == 201
    await expect(tasks.locator(".title")).to_have_text(["Call mom", "Book dentist"], timeout=20_000)
    assert resumed, "the page did not reconnect"
    assert all(header and header.isdigit() for header in resumed), resumed
    await other.shot("live-second-tab")


async def test_a_reminder_shows_in_the_live_region_and_as_a_notification_once_allowed(
    person: Person,
) -> None:
    page = person.page
    await page.context.add_init_script(RECORD_NOTIFICATIONS)
    await page.reload()
    await expect(page.locator("#who-name")).to_have_text(person.name)
    assert await page.evaluate("window.__notifications.asked") == 0  # never asked on load

    await page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    await dialog.get_by_role("button", name="Enable notifications").click()
    await expect(dialog).to_contain_text("as browser notifications")
    await expect(dialog.get_by_role("button", name="Enable notifications")).to_be_hidden()
    assert await page.evaluate("window.__notifications.asked") == 1
    await page.keyboard.press("Escape")

    soon = (datetime.now(UTC) + timedelta(seconds=1.5)).isoformat()
    task = {"title": "Take the <b>cake</b> out", "remind_at": soon}
    assert (await person.api("POST", "/tasks", json=task)).status_code == 201
    await expect(page.locator("#task-list .remind")).to_contain_text("Reminder")

    notices = page.locator("#notices")
    await expect(notices).to_have_attribute("role", "status")
    await expect(notices).to_have_attribute("aria-live", "polite")
    await expect(notices.get_by_text("⏰ Reminder: Take the <b>cake</b> out")).to_be_visible(
        timeout=10_000
    )
    await expect(page.locator("#task-list .remind")).to_contain_text("Reminded")
    shown = await page.evaluate("window.__notifications.shown")
    assert shown == [{"title": "Reminder", "body": "Take the <b>cake</b> out"}]
    await person.shot("reminder-notice")

    await notices.get_by_role("button", name=re.compile("^Dismiss")).click()
    await expect(notices.locator(".notice-item")).to_have_count(0)


async def test_the_editor_sets_a_repeat_and_a_reminder_and_completing_shows_the_next(
    person: Person,
) -> None:
    page = person.page
    tomorrow = (datetime.now(BERLIN) + timedelta(days=1)).date()
    due_at = datetime.combine(tomorrow, time(18), BERLIN)
    due = {"title": "Water the plants", "due_at": due_at.astimezone(UTC).isoformat()}
    assert (await person.api("POST", "/tasks", json=due)).status_code == 201
    await page.get_by_role("button", name="Edit task 1: Water the plants").click()
    editor = page.get_by_role("dialog", name="Edit task 1")
    await expect(editor.get_by_label("Due")).to_have_value(
        f"{tomorrow}T18:00"
    )  # the browser's time

    # A rule the service does not take: its reason is shown and nothing changes.
    await editor.get_by_label("Repeat").select_option("custom")
    await editor.get_by_label("Custom rule (RRULE)").fill("FREQ=HOURLY")
    await editor.get_by_role("button", name="Save").click()
    await expect(editor.get_by_role("alert")).to_contain_text("FREQ")

    weekday = tomorrow.strftime("%A")
    await editor.get_by_label("Repeat").select_option(label=f"Every week on {weekday}")
    await editor.get_by_label("Remind me at").fill(f"{tomorrow}T17:30")
    await editor.get_by_role("button", name="Save").click()
    await expect(editor).to_be_hidden()
    await expect(page.get_by_role("button", name="Edit task 1: Water the plants")).to_be_focused()

    task = page.locator("#task-list > li.task")
    await expect(task.locator(".repeat")).to_have_text(f"↻ every {weekday}")
    await expect(task.locator(".remind")).to_contain_text("Reminder")
    await expect(task.locator(".remind")).to_contain_text("5:30 PM")  # en-US, Berlin time
    await person.shot("repeat-and-reminder")
    stored = (await person.api("GET", "/tasks/1")).json()
    assert stored["recurrence"] == f"FREQ=WEEKLY;BYDAY={weekday[:2].upper()}"
    reminder = datetime.fromisoformat(stored["remind_at"])
    assert reminder == datetime.combine(tomorrow, time(17, 30), BERLIN)

    # Opened again, the editor shows what is set; clearing the repeat stops the series.
    await page.get_by_role("button", name="Edit task 1: Water the plants").click()
    await expect(editor.get_by_label("Repeat")).to_have_value("weekly")
    await expect(editor.get_by_label("Remind me at")).to_have_value(f"{tomorrow}T17:30")
    await editor.get_by_role("button", name="Cancel").click()

    await page.get_by_label("Complete task 1: Water the plants").check()
    next_week = tomorrow + timedelta(days=7)
    notices = page.locator("#notices")
    await expect(notices).to_contain_text("Next: task 2: Water the plants")
    await expect(page.locator("#task-list > li.task")).to_have_count(2)
    upcoming = page.locator("#task-list > li.task", has_text="Water the plants").filter(
        has=page.get_by_label("Complete task 2: Water the plants")
    )
    await expect(upcoming.locator(".repeat")).to_have_text(f"↻ every {weekday}")
    following = datetime.fromisoformat((await person.api("GET", "/tasks/2")).json()["due_at"])
    assert following == datetime.combine(next_week, time(18), BERLIN)


async def test_the_settings_offer_a_calendar_feed_url_and_revoke_it(person: Person) -> None:
    page = person.page
    await page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    url_box = dialog.get_by_label("Calendar feed URL")
    await expect(url_box).to_be_hidden()
    await dialog.get_by_role("button", name="Create calendar link").click()
    await expect(url_box).to_have_value(re.compile(r"^http://127\.0\.0\.1:\d+/calendar/.+\.ics$"))
    await expect(dialog.get_by_role("status")).to_contain_text("Calendar link ready")
    await person.shot("settings-calendar")
    url = await url_box.input_value()
    async with httpx.AsyncClient(timeout=10) as client:
        feed = await client.get(url)
        assert feed.status_code == 200
        assert feed.headers["content-type"].startswith("text/calendar")

        await dialog.get_by_role("button", name="Revoke link").click()
        await expect(url_box).to_be_hidden()
        await expect(dialog.get_by_role("status")).to_contain_text("revoked")
        assert (await client.get(url)).status_code == 404


# ---------------------------------------------------------------- a person's data


async def test_download_my_data_saves_the_accounts_export_as_a_dated_file(
    people: Arrive,
) -> None:
    other = await people("Other")
    assert (await other.api("POST", "/tasks", json={"title": "Not yours"})).status_code == 201
    person = await people("Owner")
    assert (await person.api("POST", "/tasks", json={"title": "Mine"})).status_code == 201
    page = person.page
    await page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    days = {datetime.now(BERLIN).date().isoformat()}  # the browser's day, in its timezone
    async with page.expect_download() as downloading:
        await dialog.get_by_role("button", name="Download my data").click()
    download = await downloading.value
    days.add(datetime.now(BERLIN).date().isoformat())  # should midnight fall in between
    names = {f"todo-agent-export-{person.user_id}-{day}.json" for day in days}
    assert download.suggested_filename in names
    await expect(dialog.get_by_role("status")).to_have_text(
        f"Downloaded: {download.suggested_filename}"
    )
    await expect(dialog.get_by_role("alert")).to_be_hidden()
    await person.shot("settings-your-data")

    document = json.loads(Path(await download.path()).read_text(encoding="utf-8"))
    assert document["format"] == "todo-agent-export/1"
    assert document["user"]["id"] == person.user_id
    assert [task["title"] for task in document["tasks"]] == ["Mine"]


async def test_delete_my_account_asks_for_the_name_then_erases_everything_and_signs_out(
    people: Arrive, engine: AsyncEngine
) -> None:
    other = await people("Other")
    assert (await other.api("POST", "/tasks", json={"title": "Not yours"})).status_code == 201
    person = await people("Leaving")
    assert (await person.api("POST", "/tasks", json={"title": "Mine"})).status_code == 201
    page = person.page
    await expect(page.locator("#task-list > li.task")).to_have_count(1)
    await page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    reveal = dialog.get_by_role("button", name="Delete my account…")
    confirm = dialog.get_by_role("button", name="Delete my account", exact=True)
    await expect(confirm).to_be_hidden()
    await reveal.click()
    await expect(reveal).to_have_attribute("aria-expanded", "true")
    typed = dialog.get_by_label("To confirm, type the name this page knows you by")
    await expect(typed).to_be_focused()
    await expect(confirm).to_be_disabled()
    for wrong in ("Someone else", person.name.lower(), person.name[:-1]):
        await typed.fill(wrong)
        await expect(confirm).to_be_disabled()
    await typed.press("Enter")  # neither deletes nor saves the settings
    await typed.fill(f"  {person.name} ")  # spaces around do not count
    await expect(confirm).to_be_enabled()
    await person.shot("settings-delete-account")

    # The service cannot be reached: the error shows and the account stays.
    await page.context.set_offline(True)
    await confirm.click()
    await expect(dialog.get_by_role("alert")).to_have_text(
        "Cannot reach the service. Check your connection, then try again."
    )
    await expect(dialog).to_be_visible()
    await expect(confirm).to_be_enabled()
    await page.context.set_offline(False)
    tasks = (await person.api("GET", "/tasks")).json()
    assert [task["title"] for task in tasks["data"]] == ["Mine"]

    await confirm.click()
    await expect(page.locator("#sign-in-reason")).to_have_text(
        "Your account and everything in it were deleted."
    )
    await expect(dialog).to_be_hidden()
    await expect(page.locator("#app")).to_be_hidden()
    assert await page.evaluate("sessionStorage.length") == 0
    await person.shot("account-deleted")
    # No table holds the user's id but the `user.deleted` event: nothing of the page's
    # came after the erasure to start the account again.
    assert await rows_naming(engine, person.user_id) == ONLY_USER_DELETED
    left = (await other.api("GET", "/tasks")).json()
    assert [task["title"] for task in left["data"]] == ["Not yours"]

    await person.sign_in()  # the same name again: a new, empty account
    await expect(page.locator("#task-list")).to_contain_text("No tasks here yet.")


# ---------------------------------------------------------------- ask first, undo after

# The stub answers (the model fails at once): it asks before it deletes, with the default
# `confirm`, and reads "yes", "no" and "undo" as the contract says.


async def _ask_to_delete_milk(person: Person, model: FakeOpenAI) -> Any:
    """Buy milk and Call mom; the stub asked to delete the milk: its card."""
    model.default = error(500)
    for title in ("Buy milk", "Call mom"):
        assert (await person.api("POST", "/tasks", json={"title": title})).status_code == 201
    await expect(person.page.locator("#task-list > li.task")).to_have_count(2)
    await person.send("delete the milk task")
    card = person.page.get_by_role("group", name="Waiting for you: Delete task 1 “Buy milk”")
    await expect(card).to_contain_text("Delete task 1 “Buy milk”?")
    answer = person.page.locator(".message.assistant").last
    await expect(answer.locator(".text")).to_have_text(
        "Delete task 1 “Buy milk”? Reply yes to go ahead, or no to leave it."
    )
    return card


async def test_approving_a_held_delete_on_its_card_deletes_the_task(
    person: Person, model: FakeOpenAI
) -> None:
    page = person.page
    card = await _ask_to_delete_milk(person, model)
    await expect(page.locator("#task-list > li.task")).to_have_count(2)  # nothing ran yet
    await person.shot("approval-card")
    sent: list[Request] = []
    page.on("request", lambda r: sent.append(r) if r.url.endswith("/chat/stream") else None)

    await card.get_by_role("button", name="Approve").focus()  # by keyboard
    await page.keyboard.press("Enter")
    await expect(card.locator(".outcome")).to_have_text("Approved")
    await expect(card.get_by_role("button")).to_have_count(0)
    continuation = page.locator(".message.assistant").last
    await expect(continuation.locator(".text")).to_have_text(
        "Here is what I did: Deleted task 1: Buy milk."
    )
    await expect(continuation.locator(".activity")).to_have_text("Deleted task 1: Buy milk")
    await expect(page.locator("#task-list .title")).to_have_text(["Call mom"])
    await expect(page.locator(".message.user")).to_have_count(1)  # no message was sent
    body = json.loads(sent[0].post_data or "{}")
    assert "message" not in body
    [approval] = body["approvals"]
    assert approval["approved"] is True
    assert approval["id"].startswith("apr_")
    trash = (await person.api("GET", "/trash")).json()["data"]
    assert [task["title"] for task in trash] == ["Buy milk"]


async def test_denying_keeps_the_task_and_a_typed_yes_answers_the_card_too(
    person: Person, model: FakeOpenAI
) -> None:
    page = person.page
    card = await _ask_to_delete_milk(person, model)
    await card.get_by_label("Reason, if you deny").fill("still <b>needed</b>")
    await card.get_by_role("button", name="Deny").click()
    await expect(card.locator(".outcome")).to_have_text("Denied: still <b>needed</b>")
    await expect(card.get_by_role("button")).to_have_count(0)
    await expect(page.locator(".message.assistant").last.locator(".activity")).to_contain_text(
        "Not done (denied): Delete task 1 “Buy milk”"
    )
    assert [t["title"] for t in (await person.api("GET", "/tasks")).json()["data"]] == [
        "Buy milk",
        "Call mom",
    ]
    await person.shot("approval-denied")

    # Asked again, answered in words: the card shows it.
    await person.send("delete the milk task")
    cards = page.locator(".approval")
    await expect(cards).to_have_count(2)
    await expect(cards.last.get_by_role("button", name="Approve")).to_be_visible()
    await person.send("yes")
    await expect(cards.last.locator(".outcome")).to_have_text("Approved")
    await expect(cards.last.get_by_role("button")).to_have_count(0)
    await expect(page.locator("#task-list .title")).to_have_text(["Call mom"])


async def test_a_pending_card_comes_back_when_the_session_is_reopened(
    person: Person, model: FakeOpenAI
) -> None:
    page = person.page
    await _ask_to_delete_milk(person, model)
    await page.reload()
    await page.get_by_role("button", name="Open session: delete the milk task").click()
    card = page.get_by_role("group", name="Waiting for you: Delete task 1 “Buy milk”")
    await card.get_by_role("button", name="Approve").click()
    await expect(card.locator(".outcome")).to_have_text("Approved")
    await expect(page.locator("#task-list .title")).to_have_text(["Call mom"])

    # Answered: reopened again, the card shows its outcome and no buttons.
    await page.reload()
    await page.get_by_role("button", name="Open session: delete the milk task").click()
    cards = page.locator(".approval")
    await expect(cards).to_have_count(1)
    await expect(cards.locator(".outcome")).to_have_text("Approved")
    await expect(cards).to_contain_text("Deleted task 1: Buy milk")
    await expect(cards.get_by_role("button")).to_have_count(0)


async def test_undo_on_the_last_turn_brings_back_a_deleted_task(
    person: Person, model: FakeOpenAI
) -> None:
    page = person.page
    card = await _ask_to_delete_milk(person, model)
    undo = page.get_by_role("button", name="Undo the changes of this turn")
    await expect(undo).to_have_count(0)  # nothing changed yet: it only asked
    await card.get_by_role("button", name="Approve").click()
    await expect(page.locator("#task-list .title")).to_have_text(["Call mom"])
    turn = page.locator(".message.assistant").last
    await expect(turn.get_by_role("button", name="Undo the changes of this turn")).to_be_visible()
    await person.shot("undo-offered")

    await undo.click()
    await expect(page.locator("#notices")).to_contain_text(
        "Undone: brought back task 1 “Buy milk”."
    )
    await expect(page.locator("#task-list .title")).to_have_text(["Buy milk", "Call mom"])
    await expect(turn.locator(".badge.undone")).to_be_visible()
    await expect(undo).to_have_count(0)  # no other turn of this chat changed anything
    await expect(page.get_by_label("Message")).to_be_focused()

    # A turn whose task has changed since: the service says why, nothing is undone.
    await person.send("add a task to water the plants")
    await expect(page.locator("#task-list .title")).to_contain_text(["Water the plants"])
    await page.get_by_label("Complete task 3: Water the plants").check()
    await expect(page.locator("#task-list > li.task.done")).to_have_count(1)
    await undo.click()
    await expect(page.locator("#notices")).to_contain_text("has changed since")
    await expect(undo).to_be_visible()
    assert (await person.api("GET", "/tasks/3")).json()["completed"] is True


async def test_the_trash_view_restores_deletes_forever_and_empties(person: Person) -> None:
    page = person.page
    for title in ("Call mom", "Pay bills", "Buy <b>milk</b>", "Walk the dog"):
        assert (await person.api("POST", "/tasks", json={"title": title})).status_code == 201
    for number in (1, 2, 3):
        assert (await person.api("DELETE", f"/tasks/{number}")).status_code == 204
    await page.get_by_label("Show").select_option("Trash")
    trashed = page.locator("#task-list > li.task")
    await expect(trashed.locator(".title")).to_have_text(
        ["Buy <b>milk</b>", "Pay bills", "Call mom"]
    )
    await expect(trashed.first.locator(".deleted")).to_contain_text("Deleted")
    await person.shot("trash")

    await page.get_by_role("button", name="Restore task 2: Pay bills").click()
    await expect(trashed.locator(".title")).to_have_text(["Buy <b>milk</b>", "Call mom"])
    await expect(page.get_by_role("button", name="Restore task 1: Call mom")).to_be_focused()
    assert (await person.api("GET", "/tasks/2")).json()["title"] == "Pay bills"

    dialogs: list[str] = []

    async def accept(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        await dialog.accept()

    page.on("dialog", accept)
    await page.get_by_role("button", name="Delete task 3 forever: Buy <b>milk</b>").click()
    await expect(trashed.locator(".title")).to_have_text(["Call mom"])
    assert "for good" in dialogs[-1]
    restore = await person.api("POST", "/tasks/3/restore")
    assert restore.status_code == 404  # gone for good

    # A deletion elsewhere shows up in the open trash (live), then it is emptied.
    assert (await person.api("DELETE", "/tasks/4")).status_code == 204
    await expect(trashed.locator(".title")).to_have_text(["Walk the dog", "Call mom"])
    await page.get_by_role("button", name="Empty trash").click()
    await expect(page.locator("#task-list")).to_contain_text("The trash is empty.")
    assert "Empty the trash? Its 2 tasks" in dialogs[-1]
    assert (await person.api("GET", "/trash")).json()["data"] == []

    await page.get_by_label("Show").select_option("All")
    await expect(page.locator("#task-list .title")).to_have_text(["Pay bills"])
    await expect(page.get_by_role("button", name="Empty trash")).to_be_hidden()


async def test_the_settings_choose_what_the_assistant_asks_about(
    person: Person, model: FakeOpenAI
) -> None:
    page = person.page
    await page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    await expect(dialog.get_by_label("Before deleting (default)")).to_be_checked()
    await dialog.get_by_label("Before any change").check()
    await dialog.get_by_role("button", name="Save").click()
    await expect(dialog.get_by_role("status")).to_have_text("Saved.")
    await page.keyboard.press("Escape")
    assert (await person.api("GET", "/settings")).json()["confirm"] == "changes"

    model.default = error(500)
    await person.send("add a task to buy bread")
    card = page.get_by_role("group", name="Waiting for you: Add task “Buy bread”")
    await card.get_by_role("button", name="Approve").click()
    await expect(page.locator("#task-list .title")).to_have_text(["Buy bread"])


# ---------------------------------------------------------------- lists, and sharing them


def _accepting(page: Page) -> list[str]:
    """Say yes to every confirm() on the page; what was asked, in order."""
    asked: list[str] = []

    async def accept(dialog: Dialog) -> None:
        asked.append(dialog.message)
        await dialog.accept()

    page.on("dialog", accept)
    return asked


async def _fetch_from(page: Page, method: str, path: str, body: Any) -> list[Any]:
    """[status, detail] of an API call made by the page's own script, with its token."""
    return await page.evaluate(  # type: ignore[no-any-return]
        """async ([method, path, body]) => {
            const { token, userId } = JSON.parse(sessionStorage.getItem("todo-agent.session"));
            const response = await fetch(`/api/${userId}${path}`, {
                method,
                headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
                body: JSON.stringify(body),
            });
            return [response.status, (await response.json()).detail];
        }""",
        [method, path, body],
    )


async def _invite_link(dialog: Locator, role: str) -> str:
    """A new invite link from the share dialog, for `role`."""
    await dialog.get_by_label("They can").select_option(role)
    await dialog.get_by_role("button", name=re.compile(r"^Create (invite|another) link$")).click()
    who = {"editor": "an editor", "viewer": "a viewer"}[role]
    await expect(dialog.get_by_role("status")).to_contain_text(f"lets one person in as {who}")
    return await dialog.get_by_label("Invite link").input_value()


async def test_alice_shares_groceries_bob_adds_milk_live_carol_only_views_and_bob_is_cut_off(
    people: Arrive, model: FakeOpenAI, server: ServerProcess
) -> None:
    alice = await people("Alice")
    page = alice.page
    for title in ("Call mom", "Pay bills"):  # her numbers run ahead of the others'
        assert (await alice.api("POST", "/tasks", json={"title": title})).status_code == 201

    # A list made in the sidebar is shown at once, ready for its first task.
    await page.get_by_role("button", name="New list").click()
    await page.get_by_label("New list name").fill("Groceries")
    await page.get_by_label("New list name").press("Enter")
    nav = page.locator("#list-nav")
    await expect(nav.locator(".name")).to_have_text(["All tasks", "Inbox", "Groceries"])
    groceries = nav.get_by_role("button", name=re.compile("^Groceries"))
    await expect(groceries).to_have_attribute("aria-current", "true")
    await expect(page.locator("#tasks-name")).to_have_text("Groceries")
    await expect(page.get_by_label("New task")).to_be_focused()
    await expect(page.locator("#task-list")).to_contain_text("No tasks here yet.")

    # Two invite links: one to edit, one to view; each is the page with a secret.
    await page.get_by_role("button", name="Share", exact=True).click()
    dialog = page.get_by_role("dialog", name="Share “Groceries”")
    editor_link = await _invite_link(dialog, "editor")
    viewer_link = await _invite_link(dialog, "viewer")
    assert editor_link.startswith(f"{server.url}/#invite=")
    assert viewer_link != editor_link
    await alice.shot("share-dialog")
    await dialog.get_by_role("button", name="Close").click()

    # Bob, signed in, opens his link; Carol opens hers and then signs in.
    bob = await people("Bob")
    await bob.page.goto(editor_link)
    await expect(bob.page.locator("#notices")).to_contain_text(
        "You joined “Groceries”: you can add and change its tasks."
    )
    await expect(bob.page.locator("#tasks-name")).to_have_text("Groceries")
    assert "#invite" not in bob.page.url  # used: a reload does not try it again
    carol = await people("Carol", at=viewer_link)
    await expect(carol.page.locator("#tasks-name")).to_have_text("Groceries")
    await expect(carol.page.locator("#list-nav .badge")).to_have_text(["viewer"])
    await expect(carol.page.get_by_label("New task")).to_be_hidden()  # nothing to add with
    await expect(nav.locator(".badge")).to_have_text(["shared"])  # Alice's sidebar, live

    # Bob says "add milk to groceries" in the terminal: it shows live in Alice's page,
    # under her own number (3), while it is task 1 for Bob.
    model.script(
        tool_calls(call("add_todo", {"title": "Milk", "list": "groceries"})),
        reply("Added Milk to Groceries."),
    )
    said = await asyncio.to_thread(
        run_cli, "chat", "--url", server.url, "--token", bob.token, "-m", "add milk to groceries",
        env={},
    )  # fmt: skip
    assert said.returncode == 0, said.stderr
    assert "⚙ Added task 1: Milk" in said.stderr
    milk = page.locator("#task-list > li.task")
    await expect(milk.locator(".title")).to_have_text(["Milk"])
    await expect(milk.locator(".number")).to_have_text(["3"])
    await expect(groceries).to_have_accessible_name("Groceries (shared), 1 pending")

    # Alice gives it to Bob in the editor; everyone sees whose it is.
    await page.get_by_role("button", name="Edit task 3: Milk").click()
    editor = page.get_by_role("dialog", name="Edit task 3")
    await editor.get_by_label("Assigned to").select_option(label=bob.name)
    await editor.get_by_role("button", name="Save").click()
    await expect(milk.locator(".assignee")).to_have_text(f"Assigned to {bob.name}")
    bob_milk = bob.page.locator("#task-list > li.task")
    await expect(bob_milk.locator(".assignee")).to_have_text("Assigned to you")

    # Carol sees it, under her number, with nothing to change it with...
    carol_milk = carol.page.locator("#task-list > li.task")
    await expect(carol_milk.locator(".title")).to_have_text(["Milk"])
    await expect(carol_milk.locator(".number")).to_have_text(["1"])
    await expect(carol_milk.get_by_role("checkbox")).to_be_disabled()
    await expect(carol_milk.get_by_role("button")).to_have_count(0)  # no edit, steps, delete
    await expect(carol_milk.locator(".assignee")).to_have_text(f"Assigned to {bob.name}")
    await carol.shot("viewer")
    # ...however she asks: from her page, the API adds nothing to the list and changes
    # nothing in it...
    list_id = (await alice.api("GET", "/tasks/3")).json()["list_id"]
    viewer = "You are a viewer of list “Groceries”: you cannot change its tasks."
    cake = {"title": "Cake", "list_id": list_id}
    assert await _fetch_from(carol.page, "POST", "/tasks", cake) == [403, viewer]
    done = await _fetch_from(carol.page, "PATCH", "/tasks/1/complete", {"completed": True})
    assert done == [403, viewer]
    # ...and the assistant says why.
    model.script(
        tool_calls(call("add_todo", {"title": "Cake", "list": "Groceries"})),
        reply("You can only view Groceries."),
    )
    await carol.send("add cake to groceries")
    await expect(carol.page.locator(".message.assistant .activity")).to_have_text(
        f"add_todo failed: {viewer}"
    )
    titles = [task["title"] for task in (await alice.api("GET", "/tasks")).json()["data"]]
    assert titles == ["Call mom", "Pay bills", "Milk"]
    assert (await alice.api("GET", "/tasks/3")).json()["completed"] is False

    # Made an editor, Carol gets the controls at once.
    await page.get_by_role("button", name="Share", exact=True).click()
    await dialog.get_by_label(f"Role of {carol.name}").select_option("editor")
    await expect(dialog.get_by_role("status")).to_have_text(f"{carol.name} is now an editor.")
    await expect(carol_milk.get_by_role("checkbox")).to_be_enabled()
    await expect(carol.page.get_by_label("New task")).to_be_visible()
    await dialog.get_by_role("button", name="Close").click()

    # Alice removes Bob: his page loses the list and its task at once, with no reload.
    await bob.page.evaluate("window.__same_page = true")
    asked = _accepting(page)
    await page.get_by_role("button", name="Share", exact=True).click()
    members = dialog.locator("#member-list .name")
    await expect(members).to_have_text([f"{alice.name} (you)", bob.name, carol.name])
    await dialog.get_by_role("button", name=f"Remove {bob.name}").click()
    await expect(members).to_have_text([f"{alice.name} (you)", carol.name])
    assert asked == [f"Remove {bob.name} from “Groceries”? They lose it at once."]
    await expect(bob.page.locator("#list-nav .name")).to_have_text(["All tasks", "Inbox"])
    await expect(bob.page.locator("#task-list")).to_contain_text("No tasks here yet.")
    await expect(bob.page.locator("#notices")).to_contain_text(
        "You are no longer a member of “Groceries”."
    )
    assert await bob.page.evaluate("window.__same_page") is True
    assert (await bob.api("GET", f"/lists/{list_id}")).status_code == 404
    await expect(milk.locator(".assignee")).to_have_count(0)  # his tasks are nobody's now
    await bob.shot("removed")


async def test_lists_are_made_renamed_filled_moved_and_deleted_from_the_sidebar(
    person: Person,
) -> None:
    page = person.page
    nav = page.locator("#list-nav")
    tasks = page.locator("#task-list > li.task")
    assert (await person.api("POST", "/tasks", json={"title": "Call mom"})).status_code == 201

    # The Inbox is for tasks, not for renaming, sharing or deleting.
    await nav.get_by_role("button", name=re.compile("^Inbox")).click()
    await expect(page.locator("#list-role")).to_contain_text("Your Inbox")
    for action in ("Share", "Rename", "Delete list", "Leave list"):
        await expect(page.get_by_role("button", name=action, exact=True)).to_be_hidden()

    await page.get_by_role("button", name="New list").click()
    await page.get_by_label("New list name").fill("Work")
    await page.keyboard.press("Enter")
    await expect(page.locator("#tasks-name")).to_have_text("Work")
    await page.get_by_role("button", name="New list").click()
    await page.get_by_label("New list name").fill("work")
    await page.keyboard.press("Enter")
    await expect(page.locator("#lists-error")).to_have_text(
        "You already have a list called “work”."
    )
    await page.keyboard.press("Escape")
    await expect(page.get_by_role("button", name="New list")).to_be_focused()

    # New tasks go to the list on show; "All tasks" names their list.
    await page.get_by_label("New task").fill("Write the <b>report</b>")
    await page.keyboard.press("Enter")
    await expect(tasks.locator(".title")).to_have_text(["Write the <b>report</b>"])
    await expect(page.get_by_label("New task")).to_have_value("")
    await nav.get_by_role("button", name="All tasks").click()
    await expect(tasks.locator(".title")).to_have_text(["Call mom", "Write the <b>report</b>"])
    await expect(tasks.locator(".in-list")).to_have_text(["Work"])
    await expect(nav.get_by_role("button", name=re.compile("^Work"))).to_have_accessible_name(
        "Work, 1 pending"
    )

    # A task moves to another list in its editor.
    await page.get_by_role("button", name="Edit task 1: Call mom").click()
    editor = page.get_by_role("dialog", name="Edit task 1")
    await expect(editor.get_by_label("List")).to_have_value(
        (await person.api("GET", "/tasks/1")).json()["list_id"]
    )
    await editor.get_by_label("List").select_option(label="Work")
    await editor.get_by_role("button", name="Save").click()
    await expect(tasks.locator(".in-list")).to_have_text(["Work", "Work"])

    # Renamed with the keyboard; deleted after a yes, its tasks to the trash.
    await nav.get_by_role("button", name=re.compile("^Work")).click()
    await page.get_by_role("button", name="Rename").click()
    await expect(page.get_by_label("New name for the list")).to_be_focused()
    await page.keyboard.type("Office")
    await page.keyboard.press("Enter")
    await expect(page.locator("#tasks-name")).to_have_text("Office")
    await expect(page.get_by_role("button", name="Rename")).to_be_focused()
    await expect(nav.locator(".name")).to_have_text(["All tasks", "Inbox", "Office"])
    asked = _accepting(page)
    await page.get_by_role("button", name="Delete list").click()
    await expect(nav.locator(".name")).to_have_text(["All tasks", "Inbox"])
    assert asked == ["Delete the list “Office”? Its tasks go to your trash."]
    await expect(nav.get_by_role("button", name="All tasks")).to_be_focused()
    await expect(page.locator("#task-list")).to_contain_text("No tasks here yet.")
    trashed = (await person.api("GET", "/trash")).json()["data"]
    assert sorted(task["title"] for task in trashed) == ["Call mom", "Write the <b>report</b>"]


async def test_an_invite_link_that_cannot_be_used_says_why(person: Person) -> None:
    page = person.page
    assert (await person.api("POST", "/lists", json={"name": "Garden"})).status_code == 201
    await page.reload()
    await page.locator("#list-nav").get_by_role("button", name=re.compile("^Garden")).click()
    await page.get_by_role("button", name="Share", exact=True).click()
    dialog = page.get_by_role("dialog", name="Share “Garden”")
    own = await _invite_link(dialog, "editor")
    await dialog.get_by_role("button", name="Copy").click()
    await expect(dialog.get_by_role("status")).to_have_text(re.compile(r"^(Copied|Selected)"))
    revoked = await _invite_link(dialog, "viewer")
    await dialog.get_by_role("button", name="Revoke link").click()
    await expect(dialog.get_by_role("status")).to_have_text("Link revoked: it no longer works.")
    await expect(dialog.get_by_label("Invite link")).to_be_hidden()
    await expect(dialog.get_by_role("button", name="Create invite link")).to_be_focused()
    await page.keyboard.press("Escape")
    await expect(page.get_by_role("button", name="Share", exact=True)).to_be_focused()

    await page.goto(own)
    await expect(page.locator("#notices")).to_contain_text("is for your own list")
    await page.goto(revoked)
    await expect(page.locator("#notices")).to_contain_text(
        "That invite link does not work: it was used already, revoked, or has expired."
    )
    await expect(page.locator("#list-nav .name")).to_have_text(["All tasks", "Inbox", "Garden"])


# ------------------------------------------------------------------------------- documents

HOSTILE = """# Hostile

<script>window.__pwned = "script"</script>
<img src=x onerror="window.__pwned = 'img'; alert(1)">
[Click me](javascript:window.__pwned='link')
"""


async def _drop(page: Page, target: Locator, name: str, text: str, media_type: str) -> None:
    """Drop a file onto `target`, as a person dragging it from their desktop would."""
    transfer = await page.evaluate_handle(
        """([name, text, type]) => {
            const transfer = new DataTransfer();
            transfer.items.add(new File([text], name, { type }));
            return transfer;
        }""",
        [name, text, media_type],
    )
    await target.dispatch_event("dragover", {"dataTransfer": transfer})
    await target.dispatch_event("drop", {"dataTransfer": transfer})


async def test_a_dropped_document_is_listed_shown_as_text_and_deleted(person: Person) -> None:
    page = person.page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    assert (await person.api("POST", "/lists", json={"name": "Home"})).status_code == 201
    await page.reload()
    await page.locator("#list-nav").get_by_role("button", name=re.compile("^Home")).click()
    documents = page.locator("#document-list > li")
    await expect(page.locator("#document-count")).to_have_text("(0)")

    await _drop(page, page.locator("#task-list"), "hostile.md", HOSTILE, "text/markdown")
    # Reading a file runs in a child process with limits: slow on a busy machine.
    await expect(documents).to_have_count(1, timeout=30_000)
    await expect(documents.first).to_contain_text("Hostile")
    [stored] = (await person.api("GET", "/documents")).json()["data"]
    lists = (await person.api("GET", "/lists")).json()["data"]
    # Dropped onto the list on show, it is that list's.
    assert stored["list_id"] == next(s["id"] for s in lists if s["name"] == "Home")

    await page.get_by_role("button", name="Read Hostile").click()
    viewer = page.get_by_role("dialog", name="Hostile")
    await expect(viewer).to_be_visible()
    shown = viewer.locator("#document-text")
    await expect(shown).to_contain_text('<script>window.__pwned = "script"</script>')
    await expect(shown).to_contain_text("javascript:window.__pwned='link'")
    assert await shown.locator("*").count() == 0  # text, no element made of it
    assert await page.evaluate("window.__pwned") is None
    assert dialogs == []
    await person.shot("document-as-text")

    page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
    await viewer.get_by_role("button", name="Delete document").click()
    await expect(viewer).to_be_hidden()
    await expect(documents).to_have_count(0)
    assert (await person.api("GET", "/documents")).json()["data"] == []
    assert await page.evaluate("window.__pwned") is None

    # Chosen rather than dropped; a file that is no document says why, and is not kept.
    chooser = page.get_by_label("Add a document")
    await chooser.set_input_files(
        files=FilePayload(name="tool.exe", mimeType="application/octet-stream", buffer=b"MZ\x90")
    )
    await expect(page.locator("#documents-error")).to_contain_text("this file is none of them")
    await chooser.set_input_files(
        files=FilePayload(name="packing.txt", mimeType="text/plain", buffer=b"Passport, charger")
    )
    await expect(documents).to_have_count(1, timeout=30_000)
    await expect(documents.first).to_contain_text("packing")


async def test_an_answer_links_the_passages_it_used_and_documents_follow_live(
    person: Person, model: FakeOpenAI
) -> None:
    page = person.page
    lease = "# Lease\n\n## Pets\n\nCats are allowed.\n"
    added = await person.api("POST", "/documents", json={"title": "Lease", "text": lease})
    assert added.status_code == 201, added.text
    # Added elsewhere (the API): the page lists it, from the document.created event.
    await expect(page.locator("#document-list")).to_contain_text("Lease")

    model.script(
        tool_calls(call("search_documents", {"query": "pets", "list": None})),
        reply("Your Lease says under Pets: cats are allowed."),
    )
    await person.send("what does the lease say about pets?")
    answer = page.locator(".message.assistant").last
    await expect(answer.locator(".text")).to_have_text(
        "Your Lease says under Pets: cats are allowed."
    )
    source = answer.get_by_role("list", name="Sources").get_by_role("button")
    await expect(source).to_have_text(re.compile(r"^Lease .*Pets$"))
    await source.click()
    viewer = page.get_by_role("dialog", name="Lease")
    await expect(viewer.locator("#document-text")).to_contain_text("Cats are allowed.")
    await page.keyboard.press("Escape")

    # Deleted elsewhere: it leaves the page's list (document.deleted).
    document_id = added.json()["id"]
    assert (await person.api("DELETE", f"/documents/{document_id}")).status_code == 204
    await expect(page.locator("#document-list > li")).to_have_count(0)


# ---------------------------------------------------------------- an installable page


async def _notifications_shown(page: Page) -> list[dict[str, Any]]:
    shown: list[dict[str, Any]] = await page.evaluate(
        """navigator.serviceWorker.ready
            .then((registration) => registration.getNotifications())
            .then((all) => all.map((n) => ({
                title: n.title, body: n.body, tag: n.tag, data: n.data,
                actions: n.actions.map((a) => [a.action, a.title]),
            })))"""
    )
    return shown


async def test_the_page_installs_and_its_service_worker_shows_a_pushed_reminder(
    person: Person,
) -> None:
    page, origin = person.page, person.server.url
    cdp = await page.context.new_cdp_session(page)

    # Chromium reads the manifest (allowed by the policy) and finds nothing wrong with it.
    parsed = await cdp.send("Page.getAppManifest")
    assert parsed["url"] == f"{origin}/manifest.webmanifest"
    assert parsed["errors"] == []
    assert json.loads(parsed["data"])["display"] == "standalone"

    # The page registered its worker, from the root: it controls the whole page.
    worker = await page.evaluate(
        "navigator.serviceWorker.ready.then((r) => [r.active.scriptURL, r.scope])"
    )
    assert worker == [f"{origin}/sw.js", f"{origin}/"]

    # A push as the service sends it (Chromium delivers it to the worker as a push service
    # would): a notification with Done and Snooze, tagged as the page tags the same reminder.
    registrations: list[dict[str, Any]] = []
    cdp.on(
        "ServiceWorker.workerRegistrationUpdated",
        lambda event: registrations.extend(event["registrations"]),
    )
    await cdp.send("ServiceWorker.enable")

    async def registered() -> bool:
        return bool(registrations)

    await until(registered, timeout_s=10, message="no service worker registration")
    registration_id = registrations[0]["registrationId"]
    await page.context.grant_permissions(["notifications"], origin=origin)
    reminder = {
        "type": "reminder.due",
        "title": "Reminder",
        "body": "Call the <b>plumber</b>",
        "task": {"id": "3f0c", "number": 4, "title": "Call the <b>plumber</b>", "due_at": None},
        "url": f"{origin}/#task=3f0c",
        "actions": [
            {"action": "done", "title": "Done", "token": "done-token"},
            {"action": "snooze", "title": "Snooze 1 h", "token": "snooze-token"},
        ],
    }
    digest = {"type": "digest", "title": "Today", "body": "2 due today", "url": f"{origin}/"}
    for payload in (reminder, digest):
        await cdp.send(
            "ServiceWorker.deliverPushMessage",
            {"origin": origin, "registrationId": registration_id, "data": json.dumps(payload)},
        )

    async def both_shown() -> bool:
        return len(await _notifications_shown(page)) == 2

    # A loaded machine (the whole suite on four workers) can take its time to wake the
    # worker for each push.
    await until(both_shown, timeout_s=30, message="the pushes were not shown")
    shown = {n["tag"]: n for n in await _notifications_shown(page)}
    assert shown["reminder-3f0c"]["title"] == "Reminder"
    assert shown["reminder-3f0c"]["body"] == "Call the <b>plumber</b>"  # text: not rendered
    assert shown["reminder-3f0c"]["actions"] == [["done", "Done"], ["snooze", "Snooze 1 h"]]
    assert shown["reminder-3f0c"]["data"]["url"] == f"{origin}/#task=3f0c"
    assert shown["digest"]["title"] == "Today"  # the daily plan has its own tag

    # Done acts from the notification with its token alone: a POST, no bearer token, no page.
    sw = next(w for w in page.context.service_workers if w.url == f"{origin}/sw.js")
    sent = await sw.evaluate(
        """async () => {
            const sent = [];
            const real = self.fetch;
            self.fetch = (url, init) => {
                sent.push({ url, method: init.method, headers: init.headers, body: init.body,
                            credentials: init.credentials });
                return Promise.resolve(new Response(null, { status: 204 }));
            };
            try {
                await act("done", "done-token", { url: "/", title: "Reminder" });
            } finally {
                self.fetch = real;
            }
            return sent;
        }"""
    )
    assert sent == [
        {
            "url": "/notifications/actions",
            "method": "POST",
            "headers": {"Content-Type": "application/json"},
            "body": json.dumps({"token": "done-token"}, separators=(",", ":")),
            "credentials": "omit",
        }
    ]
