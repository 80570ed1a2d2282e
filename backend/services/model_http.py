"""The openai SDK client the model requests go through, and the HTTP client under it.

The SDK's own `AsyncOpenAI` on its own aiohttp client (`DefaultAioHttpClient`: its
defaults, transport, timeouts, retries and errors), doing less work per request where the
SDK and httpx repeat work already done. A no-tool turn is one model request, and these
layers cost more CPU than the rest of the turn's own work (bench/README.md):

- `ModelClient._build_request`, the SDK's hook for building a request (the SDK's Azure
  client overrides it too). For what the agent posts (bytes to an absolute URL, no query,
  files or extra headers) the URL is parsed and merged once per distinct URL instead of
  three times per call, and the headers are the SDK's own (`_build_headers`: auth,
  platform, retry count, read timeout) under the client's defaults, merged as httpx merges
  them, built once for what they are made of (never for a key a provider refreshes).
- `ModelClient.post_bytes`: the SDK's `request` with the options the SDK's `post` would
  build, copied from a template instead of being constructed (and validated) again.
- `ModelHttpClient.send`: a request the SDK reads whole goes straight to the transport,
  without httpx's auth-flow, redirect and stream-wrapping layers, none of which does
  anything here; `ModelTransport.read_whole` reads its answer from aiohttp at once.

Anything else goes through the SDK's and httpx's own methods, and tests check that both
ways build the same request.
"""

import ssl
import time
from datetime import timedelta
from typing import Any

import httpx2
from aiohttp import ClientSession, ClientTimeout
from httpx2 import USE_CLIENT_DEFAULT, ByteStream, Request, Response, Timeout
from openai import AsyncOpenAI, DefaultAioHttpClient, NotGiven
from openai._models import FinalRequestOptions
from openai._utils import get_async_library
from openai._vendor.httpx_aiohttp.transport import AiohttpTransport, map_aiohttp_exceptions

from backend.tls import client_tls

_SET_BY_HTTPX = frozenset({b"host", b"content-length", b"transfer-encoding"})


class ModelTransport(AiohttpTransport):
    """The SDK's aiohttp transport, which can also send a request whose answer is read
    whole (`read_whole`): the answer is read from aiohttp at once, instead of through the
    streaming wrapper the SDK's transport returns, and what does not change from request to
    request (the URL as text, the aiohttp timeout) is converted once."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._url: tuple[httpx2.URL, str] | None = None
        self._timeouts: dict[tuple[Any, ...], ClientTimeout] = {}

    async def read_whole(self, request: Request) -> Response:
        """`handle_async_request`, then `aread`: the same request sent, the same errors."""
        content = request.content
        if self.proxy is not None or "sni_hostname" in request.extensions or not content:
            response = await self.handle_async_request(request)
            await response.aread()
            return response
        if not isinstance(self.client, ClientSession):
            self.client = self.get_client()
        if self._url is None or self._url[0] is not request.url:
            self._url = (request.url, str(request.url))
        timeout = request.extensions.get("timeout", {})
        key = (timeout.get("connect"), timeout.get("read"), timeout.get("pool"))
        if (client_timeout := self._timeouts.get(key)) is None:
            client_timeout = self._timeouts[key] = ClientTimeout(
                sock_connect=key[0], sock_read=key[1], connect=key[2]
            )
        encoding = request.headers.encoding
        headers = [
            (name.decode(encoding), value.decode(encoding)) for name, value in request.headers.raw
        ]
        with map_aiohttp_exceptions():
            async with self.client.request(
                method=request.method,
                url=self._url[1],
                headers=headers,
                data=content,
                allow_redirects=False,
                auto_decompress=False,
                compress=False,
                timeout=client_timeout,
            ) as answer:
                body = await answer.read()
        extensions = {"http_version": b"HTTP/1.1"}
        if answer.reason:
            extensions["reason_phrase"] = answer.reason.encode()
        response = Response(
            answer.status,
            headers=answer.raw_headers,
            stream=ByteStream(body),
            request=request,
            extensions=extensions,
        )
        if "content-encoding" in answer.headers:
            response.read()  # decoded as httpx decodes it
        else:
            # What `read()` leaves, without walking httpx's decoders, chunkers and context
            # managers over bytes already whole: read, closed, its length counted (a test
            # compares every property with a response the transport streamed).
            response._content = body
            response._num_bytes_downloaded = len(body)
            response.is_stream_consumed = response.is_closed = True
        return response


class ModelHttpClient(DefaultAioHttpClient):
    def _init_transport(
        self,
        verify: ssl.SSLContext | str | bool = True,
        cert: Any = None,
        trust_env: bool = True,
        http1: bool = True,
        http2: bool = False,
        limits: httpx2.Limits = httpx2.Limits(max_connections=100, max_keepalive_connections=20),
        transport: httpx2.AsyncBaseTransport | None = None,
        **kwargs: Any,
    ) -> httpx2.AsyncBaseTransport:
        """The SDK's aiohttp transport, as `ModelTransport` (a given transport is kept)."""
        if transport is not None:
            return transport
        return ModelTransport(
            verify=verify, cert=cert, trust_env=trust_env, http1=http1, http2=http2, limits=limits
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
        transport = self._transport_for_url(request.url)
        if isinstance(transport, ModelTransport):
            response = await transport.read_whole(request)
        else:
            response = await transport.handle_async_request(request)
            try:
                await response.aread()
            except BaseException:
                await response.aclose()
                raise
        response.request = request
        response.default_encoding = self._default_encoding
        if 300 <= response.status_code < 400 and response.has_redirect_location:
            return await super().send(request, auth=auth, follow_redirects=follow_redirects)
        response.elapsed = timedelta(seconds=time.perf_counter() - started)
        return response


class ModelClient(AsyncOpenAI):
    """`AsyncOpenAI` on a `ModelHttpClient` (unless given another), building the requests
    it sends with less work: see the module's docstring."""

    @property
    def user_agent(self) -> str:
        return f"AsyncOpenAI/Python {self._version}"  # as the SDK's own client says

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("http_client", ModelHttpClient(verify=client_tls()))
        super().__init__(**kwargs)
        self._merged_urls: dict[str, httpx2.URL] = {}
        self._built_headers: dict[tuple[Any, ...], httpx2.Headers] = {}
        self._default_timeout: tuple[object, dict[str, Any]] | None = None
        self._post_options = FinalRequestOptions.construct(
            method="post", url="", security={"bearer_auth": True}
        )

    async def post_bytes(self, url: str, content: bytes) -> bytes:
        """`post(url, cast_to=bytes, content=content, options={"security": {"bearer_auth":
        True}})`: the answer's body, with the SDK's retries, timeouts and errors."""
        options = self._post_options.model_copy(update={"url": url, "content": content})
        return await self.request(bytes, options)

    def _build_request(
        self, options: FinalRequestOptions, *, retries_taken: int = 0
    ) -> httpx2.Request:
        content = options.content
        http = self._client
        if (
            options.method != "post"
            or not isinstance(content, bytes)
            or options.json_data is not None
            or options.extra_json is not None
            or options.files is not None
            or not isinstance(options.headers, NotGiven)
            or not isinstance(options.timeout, NotGiven)
            or options.params
            or self.default_query
            or self._auth_query(options.security)
            or self._custom_headers
            or not isinstance(http, ModelHttpClient)
            or http.params
            or http.cookies
            or not content
        ):
            return super()._build_request(options, retries_taken=retries_taken)
        url = self._merged_urls.get(options.url)
        if url is None:
            url = self._merged_urls[options.url] = http._merge_url(
                str(self._prepare_url(options.url))
            )
        timeout = self._timeout()  # as httpx hands it to the transport
        headers = self._headers(options, retries_taken, http, timeout, url)
        if headers is None:
            return super()._build_request(options, retries_taken=retries_taken)
        # What `Request(content=...)` makes of them: Host first, Content-Length last, the
        # body read; built from headers already normalised instead of normalising them all
        # again.
        headers = httpx2.Headers(headers)
        headers["Content-Length"] = str(len(content))
        request = Request(
            "post",
            url,
            headers=headers,
            stream=ByteStream(content),
            extensions={"timeout": timeout},
        )
        request.read()
        return request

    def _idempotency_key(self) -> str:
        # The SDK draws a key (a uuid4) for every request, for a header this client does
        # not send (`_idempotency_header` is None for OpenAI).
        return "" if self._idempotency_header is None else super()._idempotency_key()

    def _headers(
        self,
        options: FinalRequestOptions,
        retries_taken: int,
        http: httpx2.AsyncClient,
        timeout: dict[str, Any],
        url: httpx2.URL,
    ) -> httpx2.Headers | None:
        """The Host header, then the SDK's headers (`_build_headers`) under the client's
        defaults, as httpx merges them (those the SDK sets too, names compared
        case-insensitively, give way to the SDK's); None if they set Host or the body's
        length themselves. Built once for what they are made of: the SDK's headers come from
        the client's keys, organization, project, timeout, the async library and the retry
        count, and the client's own defaults; a key that a provider refreshes or an identity
        signs is never cached."""
        key = None
        if self._provider_runtime is None and self._api_key_provider is None:
            key = (
                url.netloc,
                retries_taken,
                tuple(options.security.items()),
                self.api_key,
                self.admin_api_key,
                self.organization,
                self.project,
                tuple(timeout.values()),
                get_async_library(),
                tuple(http.headers.raw),
            )
            if (cached := self._built_headers.get(key)) is not None:
                return cached
        built = self._build_headers(options, retries_taken=retries_taken).raw
        given = {name.lower() for name, _ in built}
        merged = [(name, value) for name, value in http.headers.raw if name.lower() not in given]
        if ({name.lower() for name, _ in merged} | given) & _SET_BY_HTTPX:
            return None
        headers = httpx2.Headers([(b"Host", url.netloc), *merged, *built])
        if key is not None:
            if len(self._built_headers) >= 64:
                self._built_headers.clear()
            self._built_headers[key] = headers
        return headers

    def _timeout(self) -> dict[str, Any]:
        """The client's timeout as httpx hands it to the transport (`Timeout.as_dict`)."""
        timeout = self.timeout
        if self._default_timeout is None or self._default_timeout[0] is not timeout:
            as_dict = Timeout(timeout).as_dict()
            self._default_timeout = (timeout, as_dict)
        return dict(self._default_timeout[1])
