"""Tokens from a real Better Auth (tests/js/better-auth): its jwt() plugin signs them with
its own keys (EdDSA by default, RS256, ES256), serves them at /api/auth/jwks, and rotates
them; the service verifies them over HTTP exactly as docs/identity.md configures it.

A user signs up with email and password and gets a JWT the way a Next.js app does (GET
/api/auth/token with the session cookie); Better Auth's user id is the path's user id.
"""

import asyncio
import base64
import json
import re
import select
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.settings import Settings
from tests.conftest import server_env, serving
from tests.node import JS_DIR, require_node
from tests.servers import ServerProcess, free_port
from tests.test_erasure import ONLY_USER_DELETED, rows_naming

pytestmark = pytest.mark.asyncio

ROTATION_S = 3  # jwks.rotationInterval of the rotating instance
GRACE_S = 3  # jwks.gracePeriod: how long a rotated-out key stays in its JWKS
CACHE_S = 2.0  # a JWT_JWKS_CACHE_S short enough to watch a revoked key stop working
SHORT_EXPIRY_S = 3  # jwt.expirationTime of the short-lived instance

Instances = dict[str, str]  # instance name -> base URL (and "todo-agent", where one calls)
OpenApi = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]


@pytest.fixture(scope="module")
def better_auth() -> Iterator[Instances]:
    """One Node process serving every Better Auth instance the tests need, each on its own
    loopback port with its own keys; it exits when its stdin closes."""
    node = require_node("better-auth")
    ports = {name: free_port() for name in ("EdDSA", "RS256", "ES256", "other")}
    ports |= {"rotating": free_port(), "short-lived": free_port(), "erasing": free_port()}
    # The todo-agent server the "erasing" instance calls when a user is deleted there.
    todo_agent = f"http://127.0.0.1:{free_port()}"
    eddsa_url = f"http://127.0.0.1:{ports['EdDSA']}"
    configs: dict[str, dict[str, Any]] = {
        "EdDSA": {},
        "RS256": {"alg": "RS256"},
        "ES256": {"alg": "ES256"},
        # A second app with its own keys, claiming to be the first one.
        "other": {"issuer": eddsa_url, "audience": eddsa_url},
        "rotating": {"rotationInterval": ROTATION_S, "gracePeriod": GRACE_S},
        "short-lived": {"expirationTime": f"{SHORT_EXPIRY_S}s"},
        "erasing": {"todoAgentUrl": todo_agent},
    }
    for name, config in configs.items():
        config["port"] = ports[name]
    process = subprocess.Popen(
        [node, "server.mjs", json.dumps(configs)],
        cwd=JS_DIR / "better-auth",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdin is not None
    try:
        started, _, _ = select.select([process.stdout], [], [], 60)
        ready = json.loads(process.stdout.readline() if started else "{}")
        assert ready.get("ready"), f"Better Auth did not start (exit {process.poll()})"
        yield ready["instances"] | {"todo-agent": todo_agent}
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class BetterAuthUser:
    """A user signed in to a Better Auth instance, holding the session cookie like a browser."""

    id: str
    browser: httpx.AsyncClient

    async def jwt(self) -> str:
        """A JWT for this user, obtained as a Next.js app does: /api/auth/token with the cookie."""
        response = await self.browser.get("/api/auth/token")
        assert response.status_code == 200, response.text
        token: str = response.json()["token"]
        return token


@pytest.fixture
async def sign_up(better_auth: Instances) -> AsyncIterator[Callable[..., Any]]:
    browsers: list[httpx.AsyncClient] = []

    async def sign_up(instance: str = "EdDSA", name: str = "Alice") -> BetterAuthUser:
        base_url = better_auth[instance]
        browser = httpx.AsyncClient(base_url=base_url, headers={"Origin": base_url})
        browsers.append(browser)
        email = f"{name.lower()}-{time.monotonic_ns()}@example.com"
        response = await browser.post(
            "/api/auth/sign-up/email",
            json={"email": email, "password": "correct horse battery", "name": name},
        )
        assert response.status_code == 200, response.text
        assert "better-auth.session_token" in browser.cookies
        return BetterAuthUser(id=response.json()["user"]["id"], browser=browser)

    yield sign_up
    for browser in browsers:
        await browser.aclose()


@pytest.fixture
def open_api(
    make_settings: Callable[..., Settings], engine: AsyncEngine, better_auth: Instances
) -> OpenApi:
    """The service trusting one Better Auth instance, set up as docs/identity.md says: the JWKS
    URL, and issuer and audience both the instance's base URL; changed by `overrides`."""

    @asynccontextmanager
    async def open_api(instance: str, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
        base_url = better_auth[instance]
        settings = make_settings(
            **{
                "jwt_secret": None,
                "jwt_jwks_url": f"{base_url}/api/auth/jwks",
                "jwt_issuer": base_url,
                "jwt_audience": base_url,
                "jwt_algorithms": ["EdDSA", "RS256", "ES256"],
            }
            | overrides
        )
        async with serving(settings) as api:
            yield api

    return open_api


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A JWT's header and claims, for looking at what Better Auth put in them."""
    header, payload = (
        json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
        for part in token.split(".")[:2]
    )
    return header, payload


async def jwks_kids(instance_url: str) -> set[str]:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{instance_url}/api/auth/jwks")
    return {key["kid"] for key in response.json()["keys"]}


async def list_tasks(api: httpx.AsyncClient, user_id: str, token: str) -> httpx.Response:
    return await api.get(f"/api/{user_id}/tasks", headers=bearer(token))


def assert_unauthorized(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"] == "Bearer"


# --- A Better Auth user, end to end -------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["EdDSA", "RS256", "ES256"])
async def test_better_auth_user_chats_lists_tasks_and_reads_sessions(
    open_api: OpenApi,
    sign_up: Callable[..., Any],
    better_auth: Instances,
    engine: AsyncEngine,
    algorithm: str,
) -> None:
    user: BetterAuthUser = await sign_up(algorithm)
    token = await user.jwt()
    header, claims = unverified(token)
    assert header["alg"] == algorithm
    assert claims["sub"] == user.id
    assert re.fullmatch("[A-Za-z0-9]{32}", user.id)  # not a UUID
    assert claims["iss"] == claims["aud"] == better_auth[algorithm]
    headers = bearer(token)

    async with open_api(algorithm, jwt_algorithms=[algorithm]) as api:
        chat = await api.post(
            f"/api/{user.id}/chat", headers=headers, json={"message": "Add a task to buy milk"}
        )
        assert chat.status_code == 200, chat.text
        session_id = chat.json()["session_id"]

        tasks = await api.get(f"/api/{user.id}/tasks", headers=headers)
        assert tasks.status_code == 200, tasks.text
        assert [task["title"] for task in tasks.json()["data"]] == ["Buy milk"]

        sessions = await api.get(f"/api/{user.id}/sessions", headers=headers)
        assert sessions.status_code == 200, sessions.text
        assert [session["id"] for session in sessions.json()["data"]] == [session_id]
        messages = await api.get(f"/api/{user.id}/sessions/{session_id}/messages", headers=headers)
        assert messages.status_code == 200, messages.text
        assert [message["role"] for message in messages.json()["data"]] == ["user", "assistant"]

    async with engine.connect() as connection:
        stored = await connection.execute(text("SELECT id, email, name FROM users"))
        assert [tuple(row) for row in stored] == [(user.id, claims["email"], "Alice")]


# --- Rotation -----------------------------------------------------------------------------


async def test_rotated_key_is_accepted_at_once_and_a_revoked_key_stops_working(
    open_api: OpenApi, sign_up: Callable[..., Any], better_auth: Instances
) -> None:
    """Better Auth rotates (jwks.rotationInterval): the first token after the rotation carries
    a new kid, which a running service (default settings: keys cached an hour) fetches on
    sight. The old key stays valid through Better Auth's grace period; once it leaves
    Better Auth's JWKS, a service stops accepting it within its JWT_JWKS_CACHE_S."""
    instance = better_auth["rotating"]
    user: BetterAuthUser = await sign_up("rotating")
    async with (
        open_api("rotating") as api,
        open_api("rotating", jwt_jwks_cache_s=CACHE_S) as quick_to_revoke,
    ):
        old_token = await user.jwt()
        old_kid = unverified(old_token)[0]["kid"]
        for service in (api, quick_to_revoke):
            assert (await list_tasks(service, user.id, old_token)).status_code == 200

        deadline = time.monotonic() + ROTATION_S + 10
        new_token = old_token
        while unverified(new_token)[0]["kid"] == old_kid:
            assert time.monotonic() < deadline, "Better Auth did not rotate its key"
            await asyncio.sleep(0.2)
            new_token = await user.jwt()
        issued = time.monotonic()
        response = await list_tasks(api, user.id, new_token)
        accepted = time.monotonic()
        assert response.status_code == 200, response.text
        print(f"\nnew kid accepted {1000 * (accepted - issued):.0f} ms after it was issued")

        # Rotated out, not revoked yet: the old key is in its grace period.
        if old_kid in await jwks_kids(instance):
            assert (await list_tasks(api, user.id, old_token)).status_code == 200

        while old_kid in await jwks_kids(instance):
            assert time.monotonic() < deadline + GRACE_S, "the old key never left the JWKS"
            await asyncio.sleep(0.2)
        await asyncio.sleep(CACHE_S + 0.2)
        assert_unauthorized(await list_tasks(quick_to_revoke, user.id, old_token))
        assert (await list_tasks(quick_to_revoke, user.id, new_token)).status_code == 200


# --- Real tokens that must not pass -------------------------------------------------------


@pytest.mark.parametrize(
    ("issuer_instance", "overrides"),
    [
        pytest.param("EdDSA", {"jwt_audience": "https://app.example.com"}, id="wrong-audience"),
        pytest.param("EdDSA", {"jwt_issuer": "https://auth.example.com"}, id="wrong-issuer"),
        pytest.param("other", {}, id="another-better-auth-instance"),
        pytest.param("RS256", {"jwt_algorithms": ["EdDSA"]}, id="algorithm-not-allowed"),
    ],
)
async def test_real_token_the_service_does_not_trust_is_unauthorized(
    open_api: OpenApi, sign_up: Callable[..., Any], issuer_instance: str, overrides: Any
) -> None:
    user: BetterAuthUser = await sign_up(issuer_instance)
    token = await user.jwt()
    trusted = "RS256" if issuer_instance == "RS256" else "EdDSA"
    async with open_api(trusted, **overrides) as api:
        assert_unauthorized(await list_tasks(api, user.id, token))


async def test_token_expired_by_better_auth_is_unauthorized(
    open_api: OpenApi, sign_up: Callable[..., Any]
) -> None:
    user: BetterAuthUser = await sign_up("short-lived")
    token = await user.jwt()
    exp = unverified(token)[1]["exp"]
    async with open_api("short-lived", jwt_leeway_s=0) as api:
        assert (await list_tasks(api, user.id, token)).status_code == 200
        await asyncio.sleep(exp + 0.5 - time.time())
        assert_unauthorized(await list_tasks(api, user.id, token))


# --- Deleting the user in Better Auth erases them here -------------------------------------


async def test_deleting_a_better_auth_user_erases_them_here_from_its_before_delete_hook(
    sign_up: Callable[..., Any],
    better_auth: Instances,
    database_url: str,
    engine: AsyncEngine,
    tmp_path: Any,
) -> None:
    """The hook of docs/data.md (tests/js/better-auth/server.mjs): Better Auth's
    `user.deleteUser.beforeDelete` calls DELETE /api/{id} with a token the jwt() plugin
    signs for the user; when it fails, Better Auth keeps its user too."""
    base_url = better_auth["erasing"]
    env = server_env(
        database_url,
        JWT_JWKS_URL=f"{base_url}/api/auth/jwks",
        JWT_ISSUER=base_url,
        JWT_AUDIENCE=base_url,
        JWT_ALGORITHMS="EdDSA",
    )
    port = int(better_auth["todo-agent"].rsplit(":", 1)[1])
    server = ServerProcess(env, port=port, log=tmp_path / "serve.log")
    user: BetterAuthUser = await sign_up("erasing", name="Leaving")
    kept: BetterAuthUser = await sign_up("erasing", name="Staying")
    with server:
        async with httpx.AsyncClient(base_url=server.url) as api:
            for who in (user, kept):
                made = await api.post(
                    f"/api/{who.id}/tasks", json={"title": "Mine"}, headers=bearer(await who.jwt())
                )
                assert made.status_code == 201, made.text
        deleted = await user.browser.post(
            "/api/auth/delete-user", json={"password": "correct horse battery"}
        )
        assert deleted.status_code == 200, deleted.text
    assert await rows_naming(engine, user.id) == ONLY_USER_DELETED
    session = await user.browser.get("/api/auth/get-session")
    assert session.json() is None  # gone from Better Auth too

    # The service is down now: the hook throws, and Better Auth keeps its user.
    refused = await kept.browser.post(
        "/api/auth/delete-user", json={"password": "correct horse battery"}
    )
    assert refused.status_code >= 400
    session = await kept.browser.get("/api/auth/get-session")
    assert session.json()["user"]["id"] == kept.id
    assert (await rows_naming(engine, kept.id)).get(("users", "id")) == 1
