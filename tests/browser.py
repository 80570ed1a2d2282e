"""A real browser for the tests: Debian's Chromium driven by Playwright (no browser download).

Missing Chromium: a failure under CI=true (CI installs it), a loud skip elsewhere."""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright

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
