"""Reminders that reach phones, under load: N reminders spread over a window, each to one
browser's push subscription at a push service on loopback (tests/push_service.py), and the
time from each reminder's `remind_at` to its push arriving there (the p99 target: 2 s).

    .venv/bin/python -m bench.notify [--reminders 10000] [--window-s 60] [--users 100]

Same database rule as `python -m bench` (BENCH_DATABASE_URL, else an embedded PostgreSQL).
Writes bench/results/notify.{md,json}.
"""

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from backend.auth import create_token
from backend.services.notify.keys import generate_private_key
from bench.harness import Server, one_service, write_results
from tests.push_service import BrowserSubscription, FakePushService

SECRET = "bench-secret-" + "x" * 40
TARGET_P99_S = 2.0


async def _measure(
    server: Server, service: FakePushService, reminders: int, window_s: float, users: int
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
        # Made ahead of time (creating them is not what is measured), due from `start` on.
        start = datetime.now(UTC) + timedelta(seconds=30 + reminders / 50)
        remind_at: dict[str, datetime] = {}
        limit = asyncio.Semaphore(16)

        async def make(n: int) -> None:
            user = f"bench-{n % users}"
            at = start + timedelta(seconds=window_s * n / reminders)
            async with limit:
                response = await http.post(
                    f"/api/{user}/tasks",
                    headers={"Authorization": f"Bearer {tokens[user]}"},
                    json={"title": f"reminder {n}", "remind_at": at.isoformat()},
                )
            response.raise_for_status()
            remind_at[response.json()["id"].replace("-", "")] = at

        made = time.perf_counter()
        await asyncio.gather(*(make(n) for n in range(reminders)))
        made_s = time.perf_counter() - made
        if datetime.now(UTC) > start:
            raise RuntimeError("making the reminders took longer than planned")
        # Arrival times on the monotonic clock, mapped to wall time once.
        offset = time.time() - time.monotonic()
        deadline = time.monotonic() + (start - datetime.now(UTC)).total_seconds() + window_s
        while len(service.received) < reminders and time.monotonic() < deadline + 60:
            await asyncio.sleep(0.5)
    lags = sorted(
        received.at + offset - remind_at[received.headers["topic"]].timestamp()
        for received in service.received
        if received.headers.get("topic") in remind_at
    )
    if not lags:
        raise RuntimeError("no push arrived")
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    return {
        "reminders": reminders,
        "window_s": window_s,
        "users": users,
        "pushes_arrived": len(lags),
        "lag_median_s": round(statistics.median(lags), 3),
        "lag_p99_s": round(p99, 3),
        "lag_max_s": round(lags[-1], 3),
        "target_p99_s": TARGET_P99_S,
        "pass": len(lags) == reminders and p99 <= TARGET_P99_S,
        "making_reminders_s": round(made_s, 1),
    }


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
            f"| pushes arrived | {result['pushes_arrived']} | all |",
            f"| `remind_at` to the push service, p99 | {result['lag_p99_s']} s "
            f"(median {result['lag_median_s']} s, max {result['lag_max_s']} s) | "
            f"<= {result['target_p99_s']} s: {verdict} |",
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
        ) as (server, _url, where),
    ):
        result = asyncio.run(_measure(server, service, args.reminders, args.window_s, args.users))
    write_results("notify", report(result, where), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
