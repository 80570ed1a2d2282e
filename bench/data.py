"""A person's data at scale: export and erase an account of 100,000 messages.

    .venv/bin/python -m bench.data [--messages 100000] [--size 2048] [--users 4]

One `todo-agent serve` worker. The account (its messages of about `--size` characters in
sessions of 1,000, seeded as the tests seed them, and 2,000 tasks) is written straight into
the tables. Then:

- export: `GET /api/{user_id}/export` read to the end three times, each counted in
  messages per second; the server's resident memory is sampled every 5 ms, and its peak
  above the level before the export is the export's extra memory;
- erasure: other users chat (stub turns, `--users` closed-loop clients) for a few seconds
  alone, then while `DELETE /api/{user_id}` erases the account: its time, and their turns'
  p50 / p99 / max before and during.

Same database rule as `python -m bench` (BENCH_DATABASE_URL, else an embedded PostgreSQL).
Writes bench/results/data.{md,json}.
"""

import argparse
import asyncio
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
from sqlalchemy.ext.asyncio import create_async_engine

from backend.auth import create_token
from bench.harness import (
    Server,
    asyncpg_dsn,
    cpu_seconds,
    one_service,
    rss_mib,
    write_results,
)
from tests.accounts import seed_messages

SECRET = "bench-secret-" + "x" * 40
OWNER = "bench-account"
PER_SESSION = 1000
TASKS = 2000
BASELINE_S = 5.0
EXPORTS = 3


class RssPeak:
    """The highest resident set size of a process while the block runs, sampled."""

    def __init__(self, pid: int, every_s: float = 0.005) -> None:
        self.pid, self.every_s = pid, every_s
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib(self.pid))
            self._stop.wait(self.every_s)

    def __enter__(self) -> "RssPeak":
        self.peak = rss_mib(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mib(self.pid))


def headers(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(secret=SECRET, user_id=user, ttl_s=3600)}"}


async def seed(url: str, *, messages: int, size: int) -> None:
    """The account's sessions and messages (every tenth answer with a tool call and its
    result), as the tests seed them, and its tasks, as a long use of the service leaves
    them."""
    engine = create_async_engine(url)
    try:
        sessions = max(1, messages // PER_SESSION)
        per_session = min(PER_SESSION, messages)
        await seed_messages(
            engine, user=OWNER, sessions=sessions, per_session=per_session, size=size
        )
    finally:
        await engine.dispose()
    connection = await asyncpg.connect(asyncpg_dsn(url))
    try:
        inbox = await connection.fetchval(
            "SELECT id FROM lists WHERE owner_id = $1 AND inbox", OWNER
        )
        await connection.execute(
            "INSERT INTO tasks (id, list_id, created_by, title, description, due_at, completed)"
            " SELECT gen_random_uuid(), $1, $2, 'Task ' || n, 'Details of task ' || n,"
            " now() + (n % 40 - 10) * interval '1 day', n % 4 = 0"
            " FROM generate_series(1, $3) AS n",
            inbox,
            OWNER,
            TASKS,
        )
        await connection.execute("VACUUM ANALYZE")
    finally:
        await connection.close()


async def export_once(server: Server) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as http:
        await http.get("/health")
        before_rss = rss_mib(server.pid)
        before_cpu = cpu_seconds([server.pid])
        size = 0
        with RssPeak(server.pid) as peak:
            started = time.perf_counter()
            async with http.stream(
                "GET", f"/api/{OWNER}/export", headers=headers(OWNER)
            ) as response:
                response.raise_for_status()
                async for chunk in response.aiter_raw():
                    size += len(chunk)
            elapsed = time.perf_counter() - started
        cpu = cpu_seconds([server.pid]) - before_cpu
    return {
        "seconds": elapsed,
        "bytes": size,
        "server_cpu_s": cpu,
        "rss_before_mib": before_rss,
        "rss_peak_mib": peak.peak,
        "extra_mib": peak.peak - before_rss,
    }


async def turns(
    server: Server, user: str, until: asyncio.Event, out: list[tuple[float, float]]
) -> None:
    """A closed-loop chat client (a new session each turn): (when it ended, how long it
    took) of each turn."""
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        auth = headers(user)
        number = 0
        while not until.is_set():
            number += 1
            started = time.perf_counter()
            response = await http.post(
                f"/api/{user}/chat", json={"message": f"add task {number}"}, headers=auth
            )
            response.raise_for_status()
            ended = time.perf_counter()
            out.append((ended, ended - started))


def _percentiles(latencies: Sequence[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    if not ordered:
        return {"count": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "count": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(p99 * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


async def erase_with_others(server: Server, users: int) -> dict[str, Any]:
    done = asyncio.Event()
    timings: list[tuple[float, float]] = []
    clients = [
        asyncio.create_task(turns(server, f"bench-other-{i}", done, timings)) for i in range(users)
    ]
    await asyncio.sleep(BASELINE_S)
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as http:
        started = time.perf_counter()
        response = await http.delete(f"/api/{OWNER}", headers=headers(OWNER))
        ended = time.perf_counter()
        response.raise_for_status()
    await asyncio.sleep(1.0)
    done.set()
    await asyncio.gather(*clients)
    baseline = [t for at, t in timings if at < started and at - t > started - BASELINE_S + 1]
    during = [t for at, t in timings if at - t >= started and at <= ended]
    overlapping = [t for at, t in timings if at > started and at - t < ended]
    return {
        "erase_s": round(ended - started, 2),
        "other_users": users,
        "turns_before": _percentiles(baseline),
        "turns_during": _percentiles(during),
        "turns_overlapping": _percentiles(overlapping),
    }


async def _measure(
    server: Server, url: str, messages: int, size: int, users: int
) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        (await http.get(f"/api/{OWNER}/settings", headers=headers(OWNER))).raise_for_status()
    await seed(url, messages=messages, size=size)
    exports = [await export_once(server) for _ in range(EXPORTS)]
    best = min(exports, key=lambda run: run["seconds"])
    erasure = await erase_with_others(server, users)
    connection = await asyncpg.connect(asyncpg_dsn(url))
    try:
        left = await connection.fetchval(
            "SELECT count(*) FROM agent_messages WHERE user_id = $1", OWNER
        )
    finally:
        await connection.close()
    return {
        "messages": messages,
        "message_chars": size,
        "tasks": TASKS,
        "document_mb": round(best["bytes"] / 1e6, 1),
        "export_runs_s": [round(run["seconds"], 2) for run in exports],
        "export_messages_per_s": round(messages / best["seconds"]),
        "export_mb_per_s": round(best["bytes"] / 1e6 / best["seconds"], 1),
        "export_server_cpu_s": round(best["server_cpu_s"], 2),
        "export_extra_memory_mib": round(max(run["extra_mib"] for run in exports), 1),
        "rss_before_mib": round(exports[0]["rss_before_mib"], 1),
        **erasure,
        "messages_left": left,
    }


def report(result: dict[str, Any], where: str) -> str:
    before, during = result["turns_before"], result["turns_during"]
    return "\n".join(
        [
            "# A person's data",
            "",
            f"One worker, {where}; an account of {result['messages']:,} messages of about "
            f"{result['message_chars']:,} characters (sessions of 1,000) and "
            f"{result['tasks']:,} tasks.",
            "",
            "| what | measured |",
            "| --- | ---: |",
            f"| export document | {result['document_mb']} MB |",
            f"| export throughput (best of {len(result['export_runs_s'])}: "
            f"{', '.join(str(s) for s in result['export_runs_s'])} s) | "
            f"{result['export_messages_per_s']:,} messages/s ({result['export_mb_per_s']} MB/s) |",
            f"| server CPU for one export | {result['export_server_cpu_s']} s |",
            f"| server memory above its level before, at the peak of any export | "
            f"{result['export_extra_memory_mib']} MiB (of {result['rss_before_mib']} MiB) |",
            f"| erasure of the account | {result['erase_s']} s |",
            f"| other users' turns ({result['other_users']} clients), p50 / p99 / max: alone | "
            f"{before['p50_ms']} / {before['p99_ms']} / {before['max_ms']} ms "
            f"({before['count']} turns) |",
            f"| the same during the erasure | {during['p50_ms']} / {during['p99_ms']} / "
            f"{during['max_ms']} ms ({during['count']} turns) |",
            f"| messages of the account left after it | {result['messages_left']} |",
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=2048, help="characters per message")
    parser.add_argument("--users", type=int, default=4, help="other users chatting meanwhile")
    args = parser.parse_args(argv)
    with one_service("data", SECRET) as (server, url, where):
        result = asyncio.run(_measure(server, url, args.messages, args.size, args.users))
    write_results("data", report(result, where), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
