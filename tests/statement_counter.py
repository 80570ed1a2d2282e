"""A TCP proxy between a server under test and PostgreSQL that counts the statements the
server sends, read off the wire (PostgreSQL's frontend/backend protocol, version 3).

A statement is a message that makes the server run one: a simple `Query` ('Q', BEGIN and
COMMIT included) or an extended-protocol `Execute` ('E', of the statement its portal was
bound to). Parse, Bind, Describe and Sync prepare or frame a statement and are not counted;
a statement prepared once and executed a hundred times counts a hundred. Each is counted
under its SQL text, so a count says what was sent, not only how much. Nothing is changed on
the way: the bytes are passed on as they come, both ways.

It needs the connection in the clear: a PostgreSQL with TLS off (`SHOW ssl`), which the
local and embedded ones of the tests and the bench are.
"""

import asyncio
import contextlib
import struct
import threading
from collections import Counter
from types import TracebackType
from typing import Self

from sqlalchemy.engine import make_url

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104
_CANCEL_REQUEST = 80877102


class _Reader:
    """The client's side of one connection: framing its messages as they pass."""

    def __init__(self, counter: "StatementCounter") -> None:
        self._counter = counter
        self._buffer = bytearray()
        self._startup = True
        self._statements: dict[bytes, str] = {}  # prepared statement name -> SQL
        self._portals: dict[bytes, str] = {}  # portal name -> SQL

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while True:
            if self._startup:
                if len(self._buffer) < 8:
                    return
                (length,) = struct.unpack("!i", self._buffer[:4])
                if len(self._buffer) < length:
                    return
                (code,) = struct.unpack("!i", self._buffer[4:8])
                del self._buffer[:length]
                # SSL or GSS asked first: the startup message itself comes next.
                self._startup = code in (_SSL_REQUEST, _GSSENC_REQUEST)
                continue
            if len(self._buffer) < 5:
                return
            kind = bytes(self._buffer[0:1])
            (length,) = struct.unpack("!i", self._buffer[1:5])
            if len(self._buffer) < 1 + length:
                return
            body = bytes(self._buffer[5 : 1 + length])
            del self._buffer[: 1 + length]
            self._message(kind, body)

    def _message(self, kind: bytes, body: bytes) -> None:
        if kind == b"Q":
            self._counter.count(body.split(b"\0", 1)[0].decode(errors="replace"))
        elif kind == b"P":
            name, sql = body.split(b"\0", 2)[:2]
            self._statements[name] = sql.decode(errors="replace")
        elif kind == b"B":
            portal, statement = body.split(b"\0", 2)[:2]
            self._portals[portal] = self._statements.get(statement, "?")
        elif kind == b"E":
            portal = body.split(b"\0", 1)[0]
            self._counter.count(self._portals.get(portal, "?"))


class StatementCounter:
    """Listens on a loopback port and forwards every connection to `url`'s PostgreSQL (TCP
    or a Unix socket), counting what clients send (see the module's docstring). Runs its
    own event loop in a thread; a context manager."""

    def __init__(self, url: str) -> None:
        parsed = make_url(url)
        socket_dir = parsed.query.get("host")
        if parsed.host is None and isinstance(socket_dir, str):
            self._unix: str | None = f"{socket_dir}/.s.PGSQL.{parsed.port or 5432}"
        else:
            self._unix = None
        self._host = parsed.host or "127.0.0.1"
        self._port = parsed.port or 5432
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self.port = 0

    def __enter__(self) -> Self:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def url_for(self, url: str) -> str:
        """`url` (a database URL) as a server reaches it through this proxy."""
        parsed = make_url(url)
        query = {k: v for k, v in parsed.query.items() if k != "host"}
        proxied = parsed.set(host="127.0.0.1", port=self.port, query=query)
        return proxied.render_as_string(hide_password=False)

    def count(self, sql: str) -> None:
        with self._lock:
            self._counts[" ".join(sql.split())] += 1

    def snapshot(self) -> Counter[str]:
        """The statements counted so far, by their SQL (whitespace folded)."""
        with self._lock:
            return Counter(self._counts)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self._unix is not None:
                up_reader, up_writer = await asyncio.open_unix_connection(self._unix)
            else:
                up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
        except OSError:
            writer.close()
            return
        parser = _Reader(self)

        async def pump(
            source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, parse: bool
        ) -> None:
            try:
                while data := await source.read(65536):
                    if parse:
                        parser.feed(data)
                    sink.write(data)
                    await sink.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    sink.close()

        await asyncio.gather(
            pump(reader, up_writer, parse=True),
            pump(up_reader, writer, parse=False),
            return_exceptions=True,
        )
