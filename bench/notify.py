"""Reminders that reach phones, under load: N reminders spread over a window, each to one
browser's push subscription at a push service on loopback (tests/push_service.py), and the
time from each reminder's `remind_at` to its push arriving there (the p99 target: 2 s),
over all N. The push service runs in this process (threads of its own), checks each push's
VAPID token and stamps its arrival once the body is read. The reminders are written ahead
of time with one INSERT (the database's triggers number them and announce their times, as
for the service's own inserts): made over HTTP they took minutes on a loaded machine, and
their making is not what is measured. Also reported: how late the reminders fired.

    .venv/bin/python -m bench.notify [--reminders 10000] [--window-s 60] [--users 100]

Same database rule as `python -m bench` (BENCH_DATABASE_URL, else an embedded PostgreSQL).
Writes bench/results/notify.{md,json}.
"""

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import asyncpg  # type: ignore[import-untyped]
import httpx

from backend.auth import create_token
from backend.services.notify.keys import generate_private_key
from bench.harness import (
    Seeder,
    Server,
    asyncpg_dsn,
    cpu_seconds,
    one_service,
    postgres_cpu,
    write_results,
)
from tests.push_service import BrowserSubscription, FakePushService

SECRET = "bench-secret-" + "x" * 40
TARGET_P99_S = 2.0


async def _make_reminders(
    url: str, users: int, reminders: int, start: datetime, window_s: float
) -> dict[str, datetime]:
    """Task n is person n % users's, in their Inbox, its reminder at start + window * n / N:
    {task id as its push's Topic: remind_at}."""
    connection = await asyncpg.connect(asyncpg_dsn(url))
    try:
        rows = await connection.fetch(
            "INSERT INTO tasks (id, list_id, created_by, title, remind_at)"
            " SELECT gen_random_uuid(), l.id, l.owner_id, 'reminder ' || n,"
            " $2::timestamptz + make_interval(secs => $3::float8 * n / $1)"
            " FROM generate_series(0, $1 - 1) AS n"
            " JOIN lists l ON l.inbox AND l.owner_id = 'bench-' || (n % $4)"
            " ORDER BY n RETURNING id, remind_at",
            reminders,
            start,
            window_s,
            users,
        )
    finally:
        await connection.close()
    if len(rows) != reminders:
        raise RuntimeError(f"made {len(rows)} reminders of {reminders}")
    return {row["id"].hex: row["remind_at"] for row in rows}


async def _measure(
    server: Server,
    url: str,
    service: FakePushService,
    reminders: int,
    window_s: float,
    users: int,
) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        tokens = {
            f"bench-{n}": create_token(secret=SECRET, user_id=f"bench-{n}", ttl_s=7200)
            for n in range(users)
        }
        for user, token in tokens.items():
            browser = BrowserSubscription(next(service.endpoints(1)))
            response = await http.post(
                f"/api/{user}/push/subscriptions",
                headers={"Authorization": f"Bearer {token}"},
                json=browser.to_json(),
            )
            response.raise_for_status()
        # Made ahead of time, in one statement (creating them is not what is measured; the
        # database's triggers number them and announce their times as the service's
        # inserts do), due from `start` on.
        start = datetime.now(UTC) + timedelta(seconds=30 + reminders / 100)
        made = time.perf_counter()
        remind_at = await _make_reminders(url, users, reminders, start, window_s)
        made_s = time.perf_counter() - made
        if datetime.now(UTC) > start:
            raise RuntimeError("making the reminders took longer than planned")
        print(
            f"{reminders} reminders made in {made_s:.0f} s, due from {start:%H:%M:%S}", flush=True
        )
        service_cpu, database_cpu = cpu_seconds(server.pids()), postgres_cpu()
        # Arrival times on the monotonic clock, mapped to wall time once.
        offset = time.time() - time.monotonic()
        deadline = time.monotonic() + (start - datetime.now(UTC)).total_seconds() + window_s
        while len(service.received) < reminders and time.monotonic() < deadline + 60:
            await asyncio.sleep(0.5)
        service_cpu = cpu_seconds(server.pids()) - service_cpu
        database_cpu_s = await _database_cpu_since(url, database_cpu)
    # Each reminder's first push (a push sent again, after an answer that came too late,
    # is counted apart: it arrived already).
    first: dict[str, float] = {}
    pushes = 0
    for received in service.received:
        topic = received.headers.get("topic")
        if topic in remind_at:
            pushes += 1
            first[topic] = min(first.get(topic, received.at), received.at)
    lags = sorted(at + offset - remind_at[topic].timestamp() for topic, at in first.items())
    if not lags:
        raise RuntimeError("no push arrived")
    # The worst lag of the reminders due in each tenth of the window: a stall shows where.
    worst = [0.0] * 10
    for topic, at in first.items():
        due = remind_at[topic]
        tenth = min(9, int((due - start).total_seconds() * 10 / window_s))
        worst[tenth] = max(worst[tenth], at + offset - due.timestamp())
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    return {
        "reminders": reminders,
        "window_s": window_s,
        "users": users,
        "pushes_arrived": len(lags),
        "pushes_sent_again": pushes - len(lags),
        "lag_median_s": round(statistics.median(lags), 3),
        "lag_p99_s": round(p99, 3),
        "lag_max_s": round(lags[-1], 3),
        "target_p99_s": TARGET_P99_S,
        "pass": len(lags) == reminders and p99 <= TARGET_P99_S,
        "lag_max_by_tenth_s": [round(lag, 2) for lag in worst],
        "making_reminders_s": round(made_s, 1),
        # CPU per reminder, whatever else runs: the service's process and its database
        # backends, from the reminders' making to the last push.
        "service_cpu_ms_per_reminder": round(1000 * service_cpu / reminders, 2),
        "database_cpu_ms_per_reminder": round(1000 * database_cpu_s / reminders, 2),
        # Other work on the machine (the numbers are noisy when it is busy).
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }


async def _database_cpu_since(url: str, before: dict[int, float]) -> float:
    """CPU seconds the bench database's backends used since `before` (as
    harness.database_cpu_since, from inside the event loop)."""
    connection = await asyncpg.connect(asyncpg_dsn(url))
    try:
        rows = await connection.fetch(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await connection.close()
    now = postgres_cpu()
    return sum(now[row["pid"]] - before.get(row["pid"], 0.0) for row in rows if row["pid"] in now)


def _firing(url: str) -> dict[str, Any]:
    """How late the reminders fired (`reminded_at` past `remind_at`): the first half of the
    lag, told apart from the sending that follows."""
    (row,) = Seeder(url).fetch(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY lag),"
        " percentile_cont(0.99) WITHIN GROUP (ORDER BY lag) FROM"
        " (SELECT EXTRACT(EPOCH FROM reminded_at - remind_at)::float8 AS lag FROM tasks"
        " WHERE reminded_at IS NOT NULL) AS fired"
    )
    median, p99 = cast(tuple[float, float], row)
    return {"fired_median_s": round(median, 3), "fired_p99_s": round(p99, 3)}


def report(result: dict[str, Any], where: str) -> str:
    verdict = "PASS" if result["pass"] else "FAIL"
    return "\n".join(
        [
            "# Reminders to phones",
            "",
            f"One worker, {result['reminders']} reminders over {result['window_s']:.0f} s for "
            f"{result['users']} people, each to a push subscription at a push service on "
            f"loopback; {where}.",
            "",
            "| what | measured | target |",
            "| --- | ---: | --- |",
            f"| reminders whose push arrived | {result['pushes_arrived']} | all |",
            f"| pushes that arrived twice | {result['pushes_sent_again']} | |",
            f"| `remind_at` to the push service, p99 | {result['lag_p99_s']} s "
            f"(median {result['lag_median_s']} s, max {result['lag_max_s']} s) | "
            f"<= {result['target_p99_s']} s: {verdict} |",
            f"| `remind_at` to the reminder firing, p99 | {result['fired_p99_s']} s "
            f"(median {result['fired_median_s']} s) | |",
            "",
            "Worst lag of the reminders due in each tenth of the window (s): "
            + ", ".join(str(lag) for lag in result["lag_max_by_tenth_s"])
            + f". Load average at the end: {result['load_average_1m_at_end']}"
            + f" ({os.cpu_count()} cores).",
            f"CPU per reminder: the service {result['service_cpu_ms_per_reminder']} ms, its"
            f" database backends {result['database_cpu_ms_per_reminder']} ms.",
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reminders", type=int, default=10_000)
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--users", type=int, default=100)
    args = parser.parse_args(argv)
    with (
        FakePushService() as service,
        one_service(
            "notify",
            SECRET,
            NOTIFY_ALLOWED_HOSTS="127.0.0.1",
            VAPID_PRIVATE_KEY=generate_private_key(),
        ) as (server, url, where),
    ):
        result = asyncio.run(
            _measure(server, url, service, args.reminders, args.window_s, args.users)
        )
        result.update(_firing(url))
    write_results("notify", report(result, where), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
