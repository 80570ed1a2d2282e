"""ModelHttpClient builds the very request httpx would, for what the SDK sends."""

from typing import Any

import httpx2
import pytest
from openai import AsyncOpenAI, DefaultAioHttpClient
from openai._models import FinalRequestOptions

from backend.services.model_http import ModelHttpClient


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
        assert request.content == b'{"b":2}' and request.headers["x-a"] == "1"
