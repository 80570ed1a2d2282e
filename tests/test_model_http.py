"""ModelHttpClient builds the very request httpx would, for what the SDK sends."""

import json
from typing import Any

import httpx2
import pytest
from aiohttp import web
from openai import AsyncOpenAI, DefaultAioHttpClient
from openai._models import FinalRequestOptions

from backend.services.model_http import ModelHttpClient, completions_url


def _sent(request: httpx2.Request) -> tuple[Any, ...]:
    return (
        request.method,
        str(request.url),
        request.headers.multi_items(),
        request.content,
        request.extensions,
    )


@pytest.mark.parametrize(
    "options",
    [
        {"content": b'{"model": "m"}'},
        {"content": b"{}", "headers": {"X-Custom": "1", "Accept": "text/plain"}},
        {"content": b"{}", "timeout": 3.5},
        {"json_data": {"model": "m"}},
        {"content": b"{}", "params": {"api-version": "1"}},
    ],
)
async def test_the_sdk_requests_are_built_as_httpx_builds_them(options: dict[str, Any]) -> None:
    built = []
    for http_client in (DefaultAioHttpClient(), ModelHttpClient()):
        client = AsyncOpenAI(
            api_key="sk-test", base_url="http://127.0.0.1:9/v1", http_client=http_client
        )
        request = FinalRequestOptions.construct(
            method="post", url="/chat/completions", security={"bearer_auth": True}, **options
        )
        built.append(_sent(client._build_request(request)))
        await client.close()
    standard, lean = built
    assert lean == standard


async def test_other_requests_are_left_to_httpx() -> None:
    async with ModelHttpClient(base_url="http://127.0.0.1:9/") as client:
        request = client.build_request("GET", httpx2.URL("/x"), params={"a": "1"})
        assert str(request.url) == "http://127.0.0.1:9/x?a=1"
        request = client.build_request("POST", "/y", json={"b": 2}, headers={"X-A": "1"})
        assert request.content == b'{"b":2}'
        assert request.headers["x-a"] == "1"


async def test_a_redirect_is_followed_as_httpx_follows_it() -> None:
    """The model API does not redirect; if it did, the request goes through httpx's own
    redirect handling, as the SDK's client would send it."""

    async def moved(_: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect("/v2/chat/completions")

    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"echo": (await request.read()).decode()})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", moved)
    app.router.add_post("/v2/chat/completions", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        client = AsyncOpenAI(
            api_key="sk-test",
            base_url=f"http://127.0.0.1:{port}/v1",
            max_retries=0,
            http_client=ModelHttpClient(),
        )
        body = await client.post("/chat/completions", cast_to=bytes, content=b'{"a": 1}')
        assert json.loads(body) == {"echo": '{"a": 1}'}
        await client.close()
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    "base_url",
    [
        "https://api.openai.com/v1",
        "https://api.openai.com/v1/",
        "http://127.0.0.1:8080",
        "https://example.test/openai/deployments/x?api-version=2024-10-21",
    ],
)
def test_the_completions_url_is_the_one_the_sdk_would_merge(base_url: str) -> None:
    client = AsyncOpenAI(api_key="sk-test", base_url=base_url)
    assert completions_url(client) == str(client._prepare_url("/chat/completions"))
