"""The HTTP client of push and ntfy sends: aiohttp, whose C parser and plain connection pool
cost a fraction of httpx's CPU per request (httpx's pool took half the delivery loop's CPU at
a few hundred pushes a second: bench/notify.py). Every request goes through the
AddressGuard, to the address it checked, and is never redirected.

As many connections are kept open as sends run at once: a push service is one host, and
each connection closed and opened again would cost a TCP handshake (and TLS). The session
is made on first use, inside the running event loop (as aiohttp wants)."""

import aiohttp

from backend.services.notify.addresses import AddressGuard
from backend.tls import client_tls

# What a send may fail with short of an answer: retried (no connection, reset, timeout).
SEND_ERRORS = (aiohttp.ClientError, TimeoutError)


class Outbound:
    def __init__(self, *, guard: AddressGuard, timeout_s: float, connections: int) -> None:
        self._guard = guard
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def post(self, url: str, *, content: bytes, headers: dict[str, str]) -> int:
        """POST `content` to `url`, on its checked address (AddressRefused if refused); the
        answer's status. Its body is read (and dropped) so the connection can be used again."""
        target = await self._guard.check(url)
        sent = dict(headers)
        if target.host_header is not None:
            sent["Host"] = target.host_header
        async with self._open().post(
            target.url,
            data=content,
            headers=sent,
            allow_redirects=False,
            server_hostname=target.server_name,
        ) as response:
            await response.read()
            return response.status

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._connections, limit_per_host=self._connections, ssl=client_tls()
            )
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, cookie_jar=aiohttp.DummyCookieJar()
            )
        return self._session
