"""ModelClient and ModelHttpClient send the very requests the SDK would, and read the same
answers and errors, for what the agent sends."""

import gzip
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
import pytest
from aiohttp import web
from openai import AsyncOpenAI, DefaultAioHttpClient
from openai._models import FinalRequestOptions

from backend.services.model_http import ModelClient, ModelHttpClient


def _sent(request: httpx2.Request) -> tuple[Any, ...]:
    return (
        request.method,
        str(request.url),
        request.headers.multi_items(),
        request.content,
        request.extensions,
        type(request.stream),
    )


@pytest.mark.parametrize("retries_taken", [0, 2])
@pytest.mark.parametrize(
    "options",
    [
        {"content": b'{"model": "m"}'},
        {"url": "http://127.0.0.1:9/v1/chat/completions", "content": b"{}"},
        {"content": b"{}", "headers": {"X-Custom": "1", "Accept": "text/plain"}},
        {"content": b"{}", "timeout": 3.5},
        {"json_data": {"model": "m"}},
        {"content": b"{}", "params": {"api-version": "1"}},
        {"content": b""},
    ],
)
async def test_the_sdk_requests_are_built_as_the_sdk_builds_them(
    options: dict[str, Any], retries_taken: int
) -> None:
    """Also after the client's key, organization or timeout change: what the lean client
    built before is not reused for them."""
    standard = AsyncOpenAI(
        api_key="sk-test", base_url="http://127.0.0.1:9/v1", http_client=DefaultAioHttpClient()
    )
    lean = ModelClient(api_key="sk-test", base_url="http://127.0.0.1:9/v1", timeout=42.0)
    standard.timeout = lean.timeout
    changes: list[dict[str, Any]] = [
        {},
        {"api_key": "sk-other"},
        {"organization": "org-1"},
        {"timeout": httpx2.Timeout(7.0, connect=2.0)},
    ]
    for change in changes:
        for client in (standard, lean):
            for name, value in change.items():
                setattr(client, name, value)
        built = [
            _sent(client._build_request(_options(options), retries_taken=retries_taken))
            for client in (standard, lean, lean)
        ]
        assert built[1] == built[0], change
        assert built[2] == built[0], change
    await standard.close()
    await lean.close()


def _options(options: dict[str, Any]) -> FinalRequestOptions:
    return FinalRequestOptions.construct(
        method="post", **{"url": "/chat/completions", **options}, security={"bearer_auth": True}
    )


@pytest.fixture(scope="module")
async def model_api() -> AsyncIterator[str]:
    """A model API that echoes what it was sent; `/gzip` answers compressed, `/moved`
    redirects to `/v1/chat/completions`, `/fail` answers 503."""

    async def echo(request: web.Request) -> web.Response:
        sent = {
            "path": request.path,
            "headers": sorted((k.lower(), v) for k, v in request.headers.items()),
            "body": (await request.read()).decode(),
        }
        return web.json_response(sent, headers={"X-Answer": "1"})

    async def compressed(request: web.Request) -> web.Response:
        body = gzip.compress(json.dumps({"zipped": True}).encode())
        return web.Response(
            body=body, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}
        )

    async def moved(_: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect("/v1/chat/completions")

    async def fail(_: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "busy"}}, status=503)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", echo)
    app.router.add_post("/v1/gzip", compressed)
    app.router.add_post("/v1/moved", moved)
    app.router.add_post("/v1/fail", fail)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


async def test_post_bytes_sends_what_post_sends(model_api: str) -> None:
    standard = AsyncOpenAI(
        api_key="sk-test", base_url=model_api, max_retries=0, http_client=DefaultAioHttpClient()
    )
    lean = ModelClient(api_key="sk-test", base_url=model_api, max_retries=0)
    url = "/chat/completions"
    posted = await standard.post(
        url, cast_to=bytes, content=b'{"a": 1}', options={"security": {"bearer_auth": True}}
    )
    assert await lean.post_bytes(url, b'{"a": 1}') == posted
    assert json.loads(posted)["body"] == '{"a": 1}'
    await standard.close()
    await lean.close()


async def test_answers_are_read_as_the_sdk_reads_them(model_api: str) -> None:
    """A compressed answer is decoded, a redirect followed (the model API sends none), and
    an error status is the SDK's own error, with its response."""
    standard = AsyncOpenAI(
        api_key="sk-test", base_url=model_api, max_retries=0, http_client=DefaultAioHttpClient()
    )
    lean = ModelClient(api_key="sk-test", base_url=model_api, max_retries=0)
    for path in ("/gzip", "/moved"):
        expected = await standard.post(path, cast_to=bytes, content=b'{"a": 1}')
        assert await lean.post_bytes(f"{model_api}{path}", b'{"a": 1}') == expected
    with pytest.raises(openai.APIStatusError) as failure:
        await lean.post_bytes(f"{model_api}/fail", b"{}")
    assert failure.value.status_code == 503
    assert failure.value.response.headers["content-type"].startswith("application/json")
    await standard.close()
    await lean.close()


def _received(response: httpx2.Response) -> tuple[Any, ...]:
    return (
        response.status_code,
        response.headers.multi_items(),
        response.content,
        response.text,
        list(response.iter_bytes()),
        response.is_closed,
        response.is_stream_consumed,
        response.num_bytes_downloaded,
        response.http_version,
        response.reason_phrase,
        response.encoding,
    )


@pytest.mark.parametrize("path", ["/chat/completions", "/gzip", "/fail"])
async def test_a_response_read_whole_is_the_response_the_transport_streams(
    model_api: str, path: str
) -> None:
    async with ModelHttpClient() as client:
        request = client.build_request("POST", f"{model_api}{path}", content=b"{}")
        whole = await client.send(request)
        streamed = await client.send(request, stream=True)
        await streamed.aread()
        for response in (whole, streamed):
            assert response.request is request
            assert response.http_version == "HTTP/1.1"
        assert _received(whole) == _received(streamed)
        assert whole.json() == streamed.json()
        if path == "/chat/completions":
            assert whole.headers["x-answer"] == "1"
            assert whole.reason_phrase == "OK"


async def test_a_refused_connection_is_the_sdk_s_connection_error() -> None:
    for http_client in (DefaultAioHttpClient(), ModelHttpClient()):
        client = AsyncOpenAI(
            api_key="sk-test",
            base_url="http://127.0.0.1:9/v1",
            max_retries=0,
            http_client=http_client,
        )
        with pytest.raises(openai.APIConnectionError) as failure:
            await client.post("/chat/completions", cast_to=bytes, content=b"{}")
        assert type(failure.value.__cause__) is httpx2.ConnectTimeout
        await client.close()


@pytest.mark.parametrize(
    "base_url",
    [
        "https://api.openai.com/v1",
        "https://api.openai.com/v1/",
        "http://127.0.0.1:8080",
        "https://example.test/openai/deployments/x?api-version=2024-10-21",
    ],
)
async def test_a_relative_url_is_merged_into_base_url_as_the_sdk_merges_it(base_url: str) -> None:
    standard = AsyncOpenAI(api_key="sk-test", base_url=base_url, http_client=DefaultAioHttpClient())
    lean = ModelClient(api_key="sk-test", base_url=base_url)
    options = {"content": b"{}"}
    built = [str(client._build_request(_options(options)).url) for client in (standard, lean, lean)]
    assert built[1] == built[2] == built[0]
    await standard.close()
    await lean.close()
