"""The HTTP client the openai SDK sends the model requests through.

The SDK's own aiohttp client (`DefaultAioHttpClient`: its defaults, transport, timeouts and
errors), building each request with less work. The SDK hands `build_request` a complete
request (URL, headers, body, timeout), and httpx's `build_request` then parses the URL
again and merges the headers through two more `Headers` objects: a sixth of the SDK's CPU
per call. For the requests the SDK sends (a string URL, a header list, a byte body, no
query, cookies or other extensions) this builds the same `Request` directly: the merged
URL parsed once per distinct URL, the client's default headers merged as httpx merges
them (the request's own win, names compared case-insensitively). Anything else goes to
httpx's own `build_request`.
"""

from typing import Any

import httpx2
from httpx2 import USE_CLIENT_DEFAULT, Request, Timeout
from openai import DefaultAioHttpClient


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
