"""The chat page and development sign-in, as the app serves them (over ASGI)."""

import re
from collections.abc import Callable
from typing import Any

import pytest

from backend.services.dev_sign_in import dev_user_id
from backend.settings import Settings
from tests.conftest import serving


def _own_dev_secret(make_settings: Callable[..., Settings], **overrides: Any) -> Settings:
    """Settings as `serve` builds them in development with no JWT settings."""
    return make_settings(jwt_secret=None, **overrides).with_development_secret()


async def test_the_page_is_served_with_a_strict_policy(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings()) as client:
        page = await client.get("/")
        script = await client.get("/static/app.js")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert '<script type="module" src="/static/app.js"></script>' in page.text
    assert "<script>" not in page.text  # no inline script
    assert script.status_code == 200
    assert "javascript" in script.headers["content-type"]
    assert script.headers["content-security-policy"] == policy


@pytest.mark.parametrize(
    "overrides",
    [{"environment": "production"}, {"web_ui": False}],
    ids=["production-default", "web-ui-off"],
)
async def test_without_the_web_ui_there_is_no_page_and_no_static_route(
    make_settings: Callable[..., Settings], overrides: dict[str, Any]
) -> None:
    async with serving(make_settings(**overrides)) as client:
        assert (await client.get("/")).status_code == 404
        assert (await client.get("/static/app.js")).status_code == 404
        assert (await client.get("/health")).status_code == 200


async def test_production_may_turn_the_page_on_without_dev_sign_in(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings(environment="production", web_ui=True)) as client:
        page = await client.get("/")
        minted = await client.post("/dev/token", json={"name": "Ada"})
    assert page.status_code == 200
    assert 'data-dev-sign-in="off"' in page.text
    assert minted.status_code == 404


async def test_dev_sign_in_gives_a_token_for_a_name(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(_own_dev_secret(make_settings)) as client:
        page = await client.get("/")
        minted = await client.post("/dev/token", json={"name": "Ada Lovelace"})
        body = minted.json()
        headers = {"Authorization": f"Bearer {body['token']}"}
        tasks = await client.get(f"/api/{body['user_id']}/tasks", headers=headers)
        other = await client.get("/api/dev-someone-else/tasks", headers=headers)
    assert 'data-dev-sign-in="on"' in page.text
    assert minted.status_code == 200
    assert body["user_id"] == "ada-lovelace"
    assert body["name"] == "Ada Lovelace"
    assert tasks.status_code == 200
    assert other.status_code == 403


async def test_dev_sign_in_refuses_a_blank_name(make_settings: Callable[..., Settings]) -> None:
    async with serving(_own_dev_secret(make_settings)) as client:
        assert (await client.post("/dev/token", json={"name": "  "})).status_code == 422
        assert (await client.post("/dev/token", json={})).status_code == 422


@pytest.mark.parametrize(
    "settings_for",
    [
        lambda make: make(),  # JWT_SECRET configured: a name is not proof of anything
        lambda make: make(environment="production", web_ui=True),
    ],
    ids=["configured-secret", "production"],
)
async def test_dev_sign_in_does_not_exist_with_a_real_secret_or_in_production(
    make_settings: Callable[..., Settings], settings_for: Callable[..., Settings]
) -> None:
    async with serving(settings_for(make_settings)) as client:
        minted = await client.post("/dev/token", json={"name": "Ada"})
        schema = (await client.get("/openapi.json")).json()
    assert minted.status_code == 404
    assert "/dev/token" not in schema["paths"]


def test_the_dev_user_id_is_stable_and_safe_in_a_path() -> None:
    assert dev_user_id("Ada Lovelace") == dev_user_id("  ada lovelace ") == "ada-lovelace"
    assert dev_user_id("alice") == "alice"  # the user `todo-agent token alice` names
    assert dev_user_id("../../etc") == "etc"
    odd = dev_user_id("李雷")
    assert odd.isascii()
    assert odd.isalnum()
    assert odd != dev_user_id("韩梅梅")


# ---------------------------------------------------------------- an installable page

# Exactly what the page needs, and nothing more: its own files, its own API, its manifest
# and its service worker; no inline script or style, no frames, no other origin.
PAGE_POLICY = {
    "default-src": ["'none'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "manifest-src": ["'self'"],
    "worker-src": ["'self'"],
    "base-uri": ["'none'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}
PAGE_PATHS = ["/", "/static/app.js", "/sw.js", "/manifest.webmanifest"]


def _directives(policy: str) -> dict[str, list[str]]:
    parts = [directive.split() for directive in policy.split(";") if directive.strip()]
    return {name: sources for name, *sources in parts}


def _png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (the first, right after the signature)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


async def test_the_policy_allows_exactly_the_page_its_manifest_and_its_service_worker(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings()) as client:
        answers = [await client.get(path) for path in PAGE_PATHS]
    for path, answer in zip(PAGE_PATHS, answers, strict=True):
        assert answer.status_code == 200, path
        policy = answer.headers["content-security-policy"]
        assert _directives(policy) == PAGE_POLICY, path
        assert policy.count(";") == len(PAGE_POLICY) - 1, path  # no directive twice


async def test_the_manifest_makes_the_page_installable_with_icons_of_192_and_512_pixels(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings()) as client:
        page = await client.get("/")
        answer = await client.get("/manifest.webmanifest")
        manifest = answer.json()
        icons = {icon["src"]: (icon, await client.get(icon["src"])) for icon in manifest["icons"]}
    assert '<link rel="manifest" href="/manifest.webmanifest">' in page.text
    assert answer.headers["content-type"].startswith("application/manifest+json")
    assert manifest["name"] == "todo-agent"
    assert manifest["short_name"]
    assert manifest["display"] == "standalone"
    assert manifest["start_url"] == manifest["scope"] == "/"
    assert re.fullmatch(r"#[0-9a-f]{6}", manifest["theme_color"])
    sizes = set()
    for src, (icon, image) in icons.items():
        assert image.status_code == 200, src
        assert image.headers["content-type"] == icon["type"] == "image/png"
        width, height = _png_size(image.content)
        assert icon["sizes"] == f"{width}x{height}", src  # what it says is what it is
        sizes.add(width)
    assert {192, 512} <= sizes


async def test_the_service_worker_is_javascript_served_from_the_root(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings()) as client:
        worker = await client.get("/sw.js")
        page = await client.get("/")
    assert worker.status_code == 200
    assert worker.headers["content-type"].startswith("text/javascript")
    assert worker.headers["x-content-type-options"] == "nosniff"
    # From the root, its scope is the whole page: no Service-Worker-Allowed needed.
    assert "service-worker-allowed" not in worker.headers
    assert 'addEventListener("push"' in worker.text
    assert worker.headers["content-security-policy"] == page.headers["content-security-policy"]


async def test_without_the_web_ui_there_is_no_manifest_and_no_service_worker(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings(web_ui=False)) as client:
        assert (await client.get("/sw.js")).status_code == 404
        assert (await client.get("/manifest.webmanifest")).status_code == 404
