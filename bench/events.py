"""The event streams under load: open N streams on one worker, make one change, and time
until every stream has it; memory per open stream; database connections while they are
open; and the SQL statements a task change costs (its event is written by the trigger
inside the change's own statement, so it should add none).

    .venv/bin/python -m bench.events [--streams 1000]

Same database rule as `python -m bench` (BENCH_DATABASE_URL, else an embedded PostgreSQL).
Writes bench/results/events.{md,json}.
"""

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx

from backend.auth import create_token
from bench.harness import (
    Server,
    asyncpg_dsn,
    one_service,
    rss_mib,
    statements_total,
    write_results,
)

SECRET = "bench-secret-" + "x" * 40
TARGET_S = 1.0


async def connections(dsn: str) -> int:
    """The service's connections to PostgreSQL (pool and listener), from pg_stat_activity."""
    connection = await asyncpg.connect(dsn)
    try:
        count: int = await connection.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'todo-agent%'"
        )
        return count
    finally:
        await connection.close()


class RawStream:
    """One /events stream on a bare socket: as little client work as a stream can take, so
    that the server is what is measured."""

    def __init__(self, port: int, user: str, token: str) -> None:
        self.port, self.user, self.token = port, user, token
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(
            f"GET /api/{self.user}/events HTTP/1.1\r\nHost: bench\r\n"
            f"Authorization: Bearer {self.token}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(head.decode(errors="replace"))
        await self.reader.readuntil(b": connected\n\n")

    async def wait_for(self, marker: bytes) -> float:
        assert self.reader is not None
        await self.reader.readuntil(marker)
        return time.perf_counter()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _measure(server: Server, dsn: str, streams: int) -> dict[str, Any]:
    user = "bench-user"
    token = create_token(secret=SECRET, user_id=user, ttl_s=3600)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:
        # The user exists, and one change before counting, so nothing is first-time work.
        await http.post(f"/api/{user}/tasks", json={"title": "warm up"})
        before_statements = statements_total(server)
        await http.post(f"/api/{user}/tasks", json={"title": "counted"})
        create_statements = statements_total(server) - before_statements
        await http.patch(f"/api/{user}/tasks/2", json={"title": "counted again"})
        update_statements = statements_total(server) - before_statements - create_statements

        opened = [RawStream(server.port, user, token) for _ in range(streams)]
        await opened[0].open()
        await asyncio.sleep(0.5)
        connections_idle = await connections(dsn)
        rss_before = rss_mib(server.pid)
        started = time.perf_counter()
        for chunk in range(1, streams, 100):
            await asyncio.gather(*(s.open() for s in opened[chunk : chunk + 100]))
        open_s = time.perf_counter() - started
        await asyncio.sleep(1.0)
        rss_open = rss_mib(server.pid)
        connections_open = await connections(dsn)

        marker = b"fan-out-" + str(time.time_ns()).encode()
        waiting = [asyncio.create_task(s.wait_for(marker)) for s in opened]
        changed_at = time.perf_counter()
        await http.post(f"/api/{user}/tasks", json={"title": marker.decode()})
        arrived = await asyncio.wait_for(asyncio.gather(*waiting), timeout=60)
        latencies = sorted(t - changed_at for t in arrived)
        for s in opened:
            s.close()
    return {
        "streams": streams,
        "open_all_s": round(open_s, 3),
        "fan_out_all_s": round(latencies[-1], 4),
        "fan_out_median_s": round(statistics.median(latencies), 4),
        "fan_out_target_s": TARGET_S,
        "fan_out_pass": latencies[-1] < TARGET_S,
        "memory_per_stream_kib": round((rss_open - rss_before) * 1024 / streams, 1),
        "rss_before_mib": round(rss_before, 1),
        "rss_open_mib": round(rss_open, 1),
        "db_connections_idle": connections_idle,
        "db_connections_with_streams_open": connections_open,
        "db_connections_flat": connections_open <= connections_idle,
        "statements_task_create": create_statements,
        "statements_task_update": update_statements,
    }


def report(result: dict[str, Any], where: str) -> str:
    verdict = "PASS" if result["fan_out_pass"] else "FAIL"
    flat = "PASS" if result["db_connections_flat"] else "FAIL"
    return "\n".join(
        [
            "# Event streams",
            "",
            f"One worker, {result['streams']} open `/events` streams of one user, {where}.",
            "",
            "| what | measured | target |",
            "| --- | ---: | --- |",
            f"| one change reaches every stream | {result['fan_out_all_s'] * 1000:.0f} ms "
            f"(median {result['fan_out_median_s'] * 1000:.0f} ms) | < 1 s: {verdict} |",
            f"| memory per open stream | {result['memory_per_stream_kib']} KiB | |",
            f"| database connections, one stream / all streams open | "
            f"{result['db_connections_idle']} / {result['db_connections_with_streams_open']} "
            f"| flat: {flat} |",
            f"| SQL statements for a task create / update (event included) | "
            f"{result['statements_task_create']} / {result['statements_task_update']} | "
            "the event adds none |",
            f"| time to open all streams | {result['open_all_s']} s | |",
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=1000)
    args = parser.parse_args(argv)
    with one_service("events", SECRET, EVENTS_KEEPALIVE_S="30") as (server, url, where):
        result = asyncio.run(_measure(server, asyncpg_dsn(url), args.streams))
    write_results("events", report(result, where), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
