"""A running turn's stream joined on another replica: what it costs and how late it is.

Two `todo-agent serve` replicas (A, B) on one database and the scripted model of the tests
(tests/fake_openai.py, in this process) streaming a long answer a chunk at a time. For
each turn the client posts `/chat/stream` to A and, while the model has not begun,
joins the turn on B (`GET /sessions/{id}/stream`) and on A itself; every event's arrival
is timed on each stream, and the delay of a joined stream is its arrival minus the
posting stream's, per event (p50, p99, max). Also the SQL statements of a no-tool turn:
`/chat`, `/chat/stream` that nobody joins, and `/chat/stream` joined from B (on A, the
runner: its events go out as NOTIFYs on the event hub's own connection, not counted). And
the floor: a bare NOTIFY from one connection to another that LISTENs.

    .venv/bin/python -m bench.turn_streams [--turns 10] [--chunks 100] [--interval-ms 20]

Same database rule as `python -m bench` (BENCH_DATABASE_URL, else an embedded PostgreSQL).
Writes bench/results/turn_streams.{md,json}.
"""

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx

from backend.auth import create_token
from bench.harness import (
    BIN,
    Server,
    asyncpg_dsn,
    clean_env,
    database,
    reset_schema,
    statements_total,
    write_results,
)
from tests.fake_openai import FakeOpenAI, reply

SECRET = "bench-secret-" + "x" * 40
USER = "bench-joiner"


class Timed:
    """A server-sent event stream read in the background: when each event id arrived."""

    def __init__(self, client: httpx.AsyncClient, method: str, url: str, **request: Any) -> None:
        self.arrived: dict[str, float] = {}
        self.first: dict[str, Any] | None = None
        self.opened = asyncio.Event()
        self.began = asyncio.Event()
        self._task = asyncio.create_task(self._read(client, method, url, request))

    async def _read(
        self, client: httpx.AsyncClient, method: str, url: str, request: dict[str, Any]
    ) -> None:
        async with client.stream(method, url, **request) as response:
            if response.status_code != 200:
                raise RuntimeError(f"{method} {url}: {response.status_code}")
            self.opened.set()
            event_id = None
            async for line in response.aiter_lines():
                now = time.perf_counter()
                if line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("data: ") and event_id is not None:
                    self.arrived[event_id] = now
                    if self.first is None:
                        self.first = json.loads(line[6:])
                        self.began.set()
                    event_id = None

    async def done(self) -> None:
        await asyncio.wait_for(self._task, timeout=120)


async def bare_notify(dsn: str, count: int, interval_s: float) -> list[float]:
    """The floor: one NOTIFY from a connection to another that LISTENs, timed."""
    listener, sender = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    heard: asyncio.Queue[float] = asyncio.Queue()
    try:
        await listener.add_listener("bench", lambda *_: heard.put_nowait(time.perf_counter()))
        delays = []
        for i in range(count):
            sent = time.perf_counter()
            await sender.execute("SELECT pg_notify('bench', $1)", str(i))
            delays.append(await asyncio.wait_for(heard.get(), 10) - sent)
            await asyncio.sleep(interval_s)
        return delays
    finally:
        await listener.close()
        await sender.close()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


async def post_stream(http: httpx.AsyncClient, server: Server, session: str) -> Timed:
    """POST /chat/stream, timed, once its first event (`session`) has come."""
    posted = Timed(
        http,
        "POST",
        f"{server.url}/api/{USER}/chat/stream",
        json={"message": "stream it", "session_id": session},
    )
    await asyncio.wait_for(posted.began.wait(), 30)
    return posted


async def turn_statements(
    http: httpx.AsyncClient, server: Server, path: str, session: str
) -> float:
    before = statements_total(server)
    response = await http.post(
        f"{server.url}/api/{USER}/{path}", json={"message": "count me", "session_id": session}
    )
    response.raise_for_status()
    return statements_total(server) - before


async def _measure(
    a: Server, b: Server, dsn: str, model: FakeOpenAI, turns: int, chunks: int, interval_s: float
) -> dict[str, Any]:
    token = create_token(secret=SECRET, user_id=USER, ttl_s=3600)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=None)) as http:
        model.script(reply("warm up"))
        warm = await http.post(f"{a.url}/api/{USER}/chat", json={"message": "hello"})
        session = warm.json()["session_id"]
        model.script(reply("plain"), reply("streamed"))
        plain = await turn_statements(http, a, "chat", session)
        streamed = await turn_statements(http, a, "chat/stream", session)

        words = [f"w{i} " for i in range(chunks)]
        answer = reply("".join(words), chunks=words, chunk_interval_s=interval_s, delay=1.0)
        remote: list[float] = []
        local: list[float] = []
        url = f"/api/{USER}/sessions/{session}/stream"
        for _ in range(turns):
            # The model waits a second before its first chunk: both joins are in place by
            # then, so every delta is timed live, not replayed.
            model.script(answer)
            posted = await post_stream(http, a, session)
            on_b = Timed(http, "GET", f"{b.url}{url}")
            on_a = Timed(http, "GET", f"{a.url}{url}")
            await asyncio.gather(posted.done(), on_b.done(), on_a.done())
            deltas = [i for i in posted.arrived if i in on_b.arrived and i != "0-1"]
            remote += [on_b.arrived[i] - posted.arrived[i] for i in deltas]
            local += [on_a.arrived[i] - posted.arrived[i] for i in deltas if i in on_a.arrived]
        # One more, joined from B only: what the runner's turn costs when it is watched.
        model.script(answer)
        before = statements_total(a)
        posted = await post_stream(http, a, session)
        await asyncio.gather(posted.done(), Timed(http, "GET", f"{b.url}{url}").done())
        joined = statements_total(a) - before
    floor = await bare_notify(dsn, len(remote), interval_s)
    ms = 1000.0
    return {
        "turns": turns,
        "events_per_turn": chunks + 2,
        "chunk_interval_ms": interval_s * ms,
        "events_timed": len(remote),
        "statements_chat": plain,
        "statements_chat_stream_unjoined": streamed,
        "statements_chat_stream_joined_on_runner": joined,
        "remote_delay_p50_ms": round(percentile(remote, 0.5) * ms, 2),
        "remote_delay_p99_ms": round(percentile(remote, 0.99) * ms, 2),
        "remote_delay_max_ms": round(max(remote) * ms, 2),
        "notify_p50_ms": round(percentile(floor, 0.5) * ms, 2),
        "notify_p99_ms": round(percentile(floor, 0.99) * ms, 2),
        "local_delay_p50_ms": round(percentile(local, 0.5) * ms, 2),
        "local_delay_p99_ms": round(percentile(local, 0.99) * ms, 2),
    }


def report(result: dict[str, Any], where: str) -> str:
    return "\n".join(
        [
            "# A turn's stream joined on another replica",
            "",
            f"Two replicas, {where}; {result['turns']} turns of {result['events_per_turn']} "
            f"events (a chunk every {result['chunk_interval_ms']:.0f} ms), "
            f"{result['events_timed']} events timed.",
            "",
            "| what | measured |",
            "| --- | ---: |",
            f"| delay a stream joined on another replica adds per event, p50 / p99 / max | "
            f"{result['remote_delay_p50_ms']} / {result['remote_delay_p99_ms']} / "
            f"{result['remote_delay_max_ms']} ms |",
            f"| the same, joined on the replica running the turn, p50 / p99 | "
            f"{result['local_delay_p50_ms']} / {result['local_delay_p99_ms']} ms |",
            f"| the floor: a bare NOTIFY to another connection, p50 / p99 | "
            f"{result['notify_p50_ms']} / {result['notify_p99_ms']} ms |",
            f"| SQL statements of a no-tool `/chat` turn | {result['statements_chat']:.0f} |",
            "| SQL statements of a no-tool `/chat/stream` turn nobody joins | "
            f"{result['statements_chat_stream_unjoined']:.0f} |",
            "| ... joined on another replica, on the replica running it | "
            f"{result['statements_chat_stream_joined_on_runner']:.0f} |",
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=100)
    parser.add_argument("--interval-ms", type=float, default=20.0)
    args = parser.parse_args(argv)
    with database() as (url, where), FakeOpenAI() as model:
        env = clean_env(
            DATABASE_URL=url,
            JWT_SECRET=SECRET,
            CHAT_RATE_LIMIT_PER_MINUTE="0",
            LOG_LEVEL="WARNING",
            OPENAI_API_KEY="sk-bench",
            OPENAI_BASE_URL=model.base_url,
        )
        reset_schema(url, env)
        logs = Path(tempfile.mkdtemp(prefix="bench-turn-streams-"))
        command = [str(BIN / "todo-agent"), "serve", "--workers", "1"]
        with (
            Server("a", command, env, logs / "a.log") as a,
            Server("b", command, env, logs / "b.log") as b,
        ):
            result = asyncio.run(
                _measure(
                    a, b, asyncpg_dsn(url), model, args.turns, args.chunks, args.interval_ms / 1000
                )
            )
    write_results("turn_streams", report(result, where), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
