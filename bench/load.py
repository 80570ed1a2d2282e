"""The load generator: closed-loop clients, in a process of its own.

`run(workload)` is called in a child process (so the generator never shares an event loop,
or a GIL, with anything it measures) and returns every request it made, with
`time.monotonic()` stamps (system-wide on Linux, so comparable with the fake model's
records in the parent process).

Each client sends its next request as soon as the previous one is answered. A run is:
warm-up (until `warmup_s` has passed and every client has made `warmup_requests`), then
the measured window (until `duration_s` has passed and `min_samples` requests have been
made, or `max_duration_s`), then clients stop and their last requests finish. Requests
started in the window are the latency samples; requests finished in it give throughput.

The HTTP client is a minimal HTTP/1.1 one on asyncio streams (one keep-alive connection per
client; Content-Length and chunked bodies), not httpx: on this machine an httpx 0.28
`AsyncClient` shared by 64 concurrent requests tops out near 60 requests/s against a
300 ms server (a raw client: 216/s), and costs several times the CPU per request, so it
would have measured itself instead of the servers.
"""

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

import uvloop

Kind = Literal["chat", "stream", "get"]
REQUEST_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Target:
    """One request a client makes: `path` (e.g. `/api/u1/chat`), the user's token, and for
    chat the session to continue (None: the client's own, started by its first message)."""

    path: str
    token: str
    session: str | None = None


@dataclass(frozen=True)
class Client:
    """One simulated user, requesting its targets in turn (so that two kinds of request
    made by one client meet the same conditions)."""

    targets: tuple[Target, ...]

    @classmethod
    def of(cls, path: str, token: str, *sessions: str) -> "Client":
        return cls(tuple(Target(path, token, s) for s in sessions) or (Target(path, token),))


@dataclass(frozen=True)
class Workload:
    base_url: str
    kind: Kind
    clients: tuple[Client, ...]
    message: str = "Please add a task to buy oat milk and bread on the way home."
    warmup_s: float = 1.0
    warmup_requests: int = 1
    ramp_s: float = 0.0  # client i of n sends its first request at i / n * ramp_s
    duration_s: float = 5.0
    min_samples: int = 0
    max_duration_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Sample:
    start: float
    end: float
    first: float | None  # stream: the first `event: delta` line
    ok: bool
    measured: bool  # started inside the measured window
    target: int  # which of its client's targets


@dataclass
class Outcome:
    samples: list[Sample]
    window: tuple[float, float]
    errors: dict[str, int]
    cpu_s: float  # this process's CPU time during the window
    total_cpu_s: float  # this process's CPU time for the whole run
    sessions: list[str] = field(default_factory=list)  # the session each chat client used

    @property
    def measured(self) -> list[Sample]:
        return [s for s in self.samples if s.measured]

    @property
    def throughput(self) -> float:
        start, end = self.window
        done = sum(1 for s in self.samples if s.ok and start <= s.end <= end)
        return done / (end - start) if end > start else 0.0


def throughput(outcomes: list[Outcome]) -> float:
    """Turns per second over several runs' windows together."""
    seconds = sum(o.window[1] - o.window[0] for o in outcomes)
    return sum(o.throughput * (o.window[1] - o.window[0]) for o in outcomes) / seconds


# --------------------------------------------------------------------------- HTTP/1.1


class HTTPFailure(Exception):
    pass


class Connection:
    """One keep-alive HTTP/1.1 connection, reopened when the server closes it."""

    def __init__(self, base_url: str) -> None:
        url = urlsplit(base_url)
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or 80
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def request(
        self,
        method: str,
        path: str,
        token: str,
        body: bytes | None = None,
        on_line: Callable[[bytes], None] | None = None,
    ) -> tuple[int, bytes]:
        """(status, body); with `on_line`, the body's lines are also handed over as they
        arrive (for server-sent events)."""
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        reader, writer = self._reader, self._writer
        assert reader is not None
        head = f"{method} {path} HTTP/1.1\r\nhost: {self.host}\r\nauthorization: Bearer {token}\r\n"
        if body is not None:
            head += f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
        writer.write(head.encode() + b"\r\n" + (body or b""))
        try:
            status, headers = _head(await reader.readuntil(b"\r\n\r\n"))
            if "content-length" in headers:
                data = await reader.readexactly(int(headers["content-length"]))
                if on_line is not None:
                    for line in data.split(b"\n"):
                        on_line(line)
            elif "chunked" in headers.get("transfer-encoding", ""):
                data = await _chunked(reader, on_line)
            else:
                raise HTTPFailure("a response without a length")
        except BaseException:
            self.close()
            raise
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, data

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


def _head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    return status, headers


async def _chunked(reader: asyncio.StreamReader, on_line: Callable[[bytes], None] | None) -> bytes:
    parts: list[bytes] = []
    pending = b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            break
        chunk = await reader.readexactly(size)
        await reader.readexactly(2)
        parts.append(chunk)
        if on_line is not None:
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                on_line(line)
    if on_line is not None and pending:
        on_line(pending)
    return b"".join(parts)


# --------------------------------------------------------------------------- the run


class _Run:
    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.samples: list[Sample] = []
        self.measured = 0
        self.errors: Counter[str] = Counter()
        self.window_start = float("inf")
        self.stop = False
        self.started = asyncio.Event()  # every client has made its warm-up requests
        self.warm = 0
        self.sessions: list[str] = ["" for _ in workload.clients]

    async def client(self, index: int, client: Client) -> None:
        connection = Connection(self.workload.base_url)
        count = 0
        if self.workload.ramp_s:
            await asyncio.sleep(index / len(self.workload.clients) * self.workload.ramp_s)
        while not self.stop:
            slot = count % len(client.targets)
            target = client.targets[slot]
            session = target.session or self.sessions[index] or None
            start = time.monotonic()
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    ok, first, created = await self.request(connection, target, session)
            except (OSError, asyncio.IncompleteReadError, HTTPFailure, ValueError) as failure:
                ok, first, created = False, None, None
                self.errors[type(failure).__name__] += 1
            end = time.monotonic()
            if created and not target.session and not self.sessions[index]:
                self.sessions[index] = created
            measured = start >= self.window_start
            self.measured += measured
            self.samples.append(Sample(start, end, first, ok, measured, slot))
            count += 1
            if count == self.workload.warmup_requests:
                self.warm += 1
                if self.warm == len(self.workload.clients):
                    self.started.set()
        connection.close()

    async def request(
        self, connection: Connection, target: Target, session: str | None
    ) -> tuple[bool, float | None, str | None]:
        """(answered 200, first delta time, the session id when a chat started one)."""
        kind = self.workload.kind
        if kind == "get":
            status, _ = await connection.request("GET", target.path, target.token)
            return self._ok(status), None, None
        request: dict[str, str] = {"message": self.workload.message}
        if session:
            request["session_id"] = session
        body = json.dumps(request).encode()
        if kind == "chat":
            status, answer = await connection.request("POST", target.path, target.token, body)
            ok = self._ok(status)
            created = json.loads(answer)["session_id"] if ok and not session else None
            return ok, None, created

        first: float | None = None
        created = None
        event = b""

        def on_line(line: bytes) -> None:
            nonlocal first, created, event
            if line.startswith(b"event: "):
                event = line[7:].strip()
                if event == b"delta" and first is None:
                    first = time.monotonic()
            elif line.startswith(b"data: ") and event == b"session" and not session:
                created = json.loads(line[6:])["session_id"]

        status, _ = await connection.request("POST", target.path, target.token, body, on_line)
        if not self._ok(status):
            return False, None, None
        if event != b"done":
            self.errors[f"stream ended with {event.decode() or 'nothing'}"] += 1
            return False, first, created
        return True, first, created

    def _ok(self, status: int) -> bool:
        if status == 200:
            return True
        self.errors[f"HTTP {status}"] += 1
        return False

    async def control(self) -> tuple[float, float, float]:
        workload = self.workload
        began = time.monotonic()
        await self.started.wait()
        await asyncio.sleep(max(0.0, workload.warmup_s - (time.monotonic() - began)))
        cpu = time.process_time()
        self.window_start = start = time.monotonic()
        while True:
            await asyncio.sleep(0.02)
            elapsed = time.monotonic() - start
            done = elapsed >= workload.duration_s and self.measured >= workload.min_samples
            if done or elapsed >= workload.max_duration_s:
                break
        self.stop = True
        return start, time.monotonic(), time.process_time() - cpu


async def _main(workload: Workload) -> Outcome:
    began = time.process_time()
    run = _Run(workload)
    clients = [
        asyncio.create_task(run.client(i, client)) for i, client in enumerate(workload.clients)
    ]
    start, end, cpu = await run.control()
    await asyncio.gather(*clients)
    return Outcome(
        samples=run.samples,
        window=(start, end),
        errors=dict(run.errors),
        cpu_s=cpu,
        total_cpu_s=time.process_time() - began,
        sessions=run.sessions,
    )


def run(workload: Workload) -> Outcome:
    """Drive the workload to the end (the entry point in the child process)."""
    return uvloop.run(_main(workload))
