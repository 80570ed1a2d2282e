"""The chat page and development sign-in, as the app serves them (over ASGI)."""

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
