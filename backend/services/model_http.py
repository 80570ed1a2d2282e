"""The HTTP client the openai SDK sends the model requests through.

The SDK's own aiohttp client (`DefaultAioHttpClient`: its defaults, transport, timeouts and
errors), doing less work per request where httpx repeats what the SDK already did:

- `build_request`: the SDK hands over a complete request (URL, headers, body, timeout),
  and httpx parses the URL again and merges the headers through two more `Headers`
  objects. For what the SDK sends (a string URL, a header list, a byte body, no query,
  cookies or other extensions) the same `Request` is built directly: the merged URL parsed
  once per distinct URL, the client's default headers merged as httpx merges them (the
  request's own win, names compared case-insensitively).
- `send`: a request the SDK reads whole goes straight to the transport, without httpx's
  auth-flow, redirect and stream-wrapping layers, none of which does anything here.

Anything else goes through httpx's own methods. About 60 us less CPU per model call, an
eighth of the SDK's (`python -m bench` profile; bench/README.md).
"""

import time
from datetime import timedelta
from typing import Any

import httpx2
from httpx2 import USE_CLIENT_DEFAULT, Request, Response, Timeout
from openai import AsyncOpenAI, DefaultAioHttpClient


class ModelHttpClient(DefaultAioHttpClient):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._urls: dict[str, httpx2.URL] = {}

    def build_request(
        self,
        method: str,
        url: httpx2.URL | str,
        *,
        content: Any = None,
        data: Any = None,
        files: Any = None,
        json: Any = None,
        params: Any = None,
        headers: Any = None,
        cookies: Any = None,
        timeout: Any = USE_CLIENT_DEFAULT,
        extensions: Any = None,
    ) -> Request:
        if (
            not isinstance(url, str)
            or not isinstance(headers, list)
            or not isinstance(content, bytes | None)
            or data is not None
            or files is not None
            or json is not None
            or params
            or cookies
            or extensions is not None
            or self.params
            or self.cookies
        ):
            return super().build_request(
                method,
                url,
                content=content,
                data=data,
                files=files,
                json=json,
                params=params,
                headers=headers,
                cookies=cookies,
                timeout=timeout,
                extensions=extensions,
            )
        merged_url = self._urls.get(url)
        if merged_url is None:
            merged_url = self._urls[url] = self._merge_url(url)
        given = {name.lower() for name, _ in headers}
        merged = [(name, value) for name, value in self.headers.multi_items() if name not in given]
        merged.extend(headers)
        chosen = self.timeout if timeout is USE_CLIENT_DEFAULT else Timeout(timeout)
        return Request(
            method,
            merged_url,
            content=content,
            headers=merged,
            extensions={"timeout": chosen.as_dict()},
        )

    async def send(
        self,
        request: Request,
        *,
        stream: bool = False,
        auth: Any = USE_CLIENT_DEFAULT,
        follow_redirects: Any = USE_CLIENT_DEFAULT,
    ) -> Response:
        """httpx's `send` for what the SDK sends whole (no auth, hooks or cookies on the
        client, not streamed): the request goes to the transport without httpx's auth-flow,
        redirect and stream-wrapping machinery; a redirect, which the model API does not
        send, is sent again through all of it."""
        if (
            stream
            or auth is not USE_CLIENT_DEFAULT
            or self.auth is not None
            or self.event_hooks["request"]
            or self.event_hooks["response"]
            or self.cookies
        ):
            return await super().send(
                request, stream=stream, auth=auth, follow_redirects=follow_redirects
            )
        if self.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        started = time.perf_counter()
        response = await self._transport_for_url(request.url).handle_async_request(request)
        response.request = request
        try:
            if response.has_redirect_location:
                await response.aclose()
                return await super().send(request, auth=auth, follow_redirects=follow_redirects)
            response.default_encoding = self._default_encoding
            await response.aread()
        except BaseException:
            await response.aclose()
            raise
        response.elapsed = timedelta(seconds=time.perf_counter() - started)
        return response


def completions_url(client: AsyncOpenAI) -> str:
    """The chat completions endpoint under the client's base_url, merged as the SDK merges
    a relative path (httpx's `_merge_url`: appended to the base path, which ends in '/')."""
    base = client.base_url
    return str(base.copy_with(raw_path=base.raw_path + b"chat/completions"))
