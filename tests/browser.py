"""A real browser for the tests: Debian's Chromium driven by Playwright (no browser download),
and someone at the chat page in it.

Missing Chromium: a failure under CI=true (CI installs it), a loud skip elsewhere."""

import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import (
    Browser,
    BrowserContext,
    Locator,
    Page,
    ViewportSize,
    async_playwright,
    expect,
)

from tests.servers import ServerProcess

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
# Quiet and self-contained: no GPU, no QUIC, no background calls to Google's services.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
SHOTS = ARTIFACTS / "web"  # the page's screenshots


def require_chromium() -> Path:
    if CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    problem = f"{CHROMIUM} is missing (apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: {problem}; the browser tests must run in CI")
    print(f"\n*** SKIPPING browser tests: {problem} ***")
    pytest.skip(f"BROWSER TESTS SKIPPED: {problem}")


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    executable = require_chromium()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(executable), args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture(scope="module")
async def browser(server: ServerProcess) -> AsyncIterator[Browser]:
    """Chromium for a module's page tests, once its `server` is up."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    async with chromium() as launched:
        yield launched


class Person:
    """Someone at the page: signed in by name, with the API at hand to arrange things."""

    def __init__(self, page: Page, server: ServerProcess, name: str) -> None:
        self.page = page
        self.server = server
        self.name = name
        self.user_id = ""
        self.token = ""

    async def sign_in(self, at: str | None = None) -> None:
        """Open the page (or a link to it, `at`) and sign in by name."""
        await self.page.goto(at or self.server.url)
        await self.page.get_by_label("Your name").fill(self.name)
        await self.page.get_by_role("button", name="Sign in").click()
        await expect(self.page.locator("#who-name")).to_have_text(self.name)
        # The task list drawn: the first API call is answered, so the user's row exists
        # (tests that arrange data straight in the database rely on it).
        await expect(self.page.locator("#task-count")).to_have_text(re.compile(r"\(\d+\)"))
        saved = json.loads(await self.page.evaluate("sessionStorage.getItem('todo-agent.session')"))
        self.token, self.user_id = saved["token"], saved["userId"]

    async def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.server.url, timeout=30) as client:
            return await client.request(
                method,
                f"/api/{self.user_id}{path}",
                headers={"Authorization": f"Bearer {self.token}"},
                **kwargs,
            )

    async def send(self, text: str) -> None:
        await self.page.get_by_label("Message").fill(text)
        await self.page.get_by_label("Message").press("Enter")

    async def settings(self) -> Locator:
        """Open the Settings dialog."""
        await self.page.get_by_role("button", name="Settings").click()
        dialog = self.page.get_by_role("dialog", name="Settings")
        await expect(dialog).to_be_visible()
        return dialog

    async def shot(self, name: str, *, full_page: bool = False) -> None:
        await self.page.screenshot(path=SHOTS / f"{name}.png", full_page=full_page)


Arrive = Callable[..., Awaitable[Person]]


@asynccontextmanager
async def arrivals(
    browser: Browser, server: ServerProcess, *, viewport: ViewportSize
) -> AsyncIterator[Arrive]:
    """`await arrive("Alice", at=link)`: someone new (a module's server outlives the tables
    between tests) in a Berlin-time browser context of their own, signed in by name. Their
    pages may raise no script error."""
    contexts: list[BrowserContext] = []
    errors: list[str] = []

    async def arrive(name: str, *, at: str | None = None) -> Person:
        context = await browser.new_context(viewport=viewport, timezone_id="Europe/Berlin")
        contexts.append(context)
        page = await context.new_page()
        page.on("pageerror", lambda error: errors.append(str(error)))
        someone = Person(page, server, f"{name} {uuid.uuid4().hex[:8]}")
        await someone.sign_in(at)
        return someone

    yield arrive
    for context in contexts:
        await context.close()
    assert errors == [], errors  # no script error on any page
