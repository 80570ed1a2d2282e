"""CalDAV at scale: a client's initial sync of a 5,000-task list, and a `sync-collection`
with nothing changed, each against a plain SELECT of the same tasks in the same run.

    .venv/bin/python -m bench.caldav [--tasks 5000] [--rounds 20]

One `todo-agent serve` worker. The list (the person's Inbox) is seeded straight into the
tables. Then, each the median of `--rounds`:

- select: `SELECT * FROM tasks WHERE list_id = $1 AND deleted_at IS NULL` by asyncpg from
  this process (the floor: the rows themselves, no HTTP, no ICS);
- initial sync: `REPORT sync-collection` with no token asking for `getetag` and
  `calendar-data`, read to the end (what DAVx5 and the caldav library send first): the
  first one, which renders every item with icalendar, then again (the median), when the
  process has kept the renderings (by task and revision, so never stale);
- etags: `PROPFIND Depth: 1` of `getetag` (what vdirsyncer sends first), which reads no task;
- empty sync: `REPORT sync-collection` with the current token; also on a list of 10 tasks,
  and its SQL statements counted (`/metrics`): with nothing changed it must cost the same
  whatever the list's size, and not read the tasks.

Same database rule as `python -m bench` (BENCH_DATABASE_URL, else an embedded PostgreSQL).
Writes bench/results/caldav.{md,json}.
"""

import argparse
import asyncio
import base64
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
from lxml import etree  # type: ignore[import-untyped]

from backend.auth import create_token
from bench.harness import Server, asyncpg_dsn, one_service, statements_total, write_results

SECRET = "bench-secret-" + "x" * 40
USER = "bench-caldav"
SMALL = 10

_SYNC = (
    '<d:sync-collection xmlns:d="DAV:" xmlns:c="urn:ietf:params:xml:ns:caldav">'
    "<d:sync-token>{token}</d:sync-token><d:sync-level>1</d:sync-level>"
    "<d:prop><d:getetag/>{data}</d:prop></d:sync-collection>"
)
_ETAGS = '<d:propfind xmlns:d="DAV:"><d:prop><d:getetag/></d:prop></d:propfind>'


async def median_s(action: Callable[[], Awaitable[Any]], rounds: int) -> float:
    await action()  # warm
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def seed(dsn: str, list_name: str, count: int, http: httpx.AsyncClient) -> str:
    """A list of `count` tasks (dated, some done, tagged); its id."""
    headers = {"Authorization": f"Bearer {create_token(secret=SECRET, user_id=USER)}"}
    made = await http.post(f"/api/{USER}/lists", json={"name": list_name}, headers=headers)
    list_id = str(made.json()["id"])
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(
            "INSERT INTO tasks (id, list_id, created_by, title, description, due_at,"
            " completed, tags, priority)"
            " SELECT gen_random_uuid(), $1, $2, 'Task ' || n, 'Details of task ' || n,"
            " now() + (n % 40 - 10) * interval '1 day', n % 4 = 0,"
            " ARRAY['tag' || (n % 7)], (ARRAY['low', 'medium', 'high'])[n % 3 + 1]"
            " FROM generate_series(1, $3) AS n",
            list_id,
            USER,
            count,
        )
        await connection.execute("VACUUM ANALYZE")
    finally:
        await connection.close()
    return list_id


async def measure(server: Server, url: str, tasks: int, rounds: int) -> dict[str, Any]:
    dsn = asyncpg_dsn(url)
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as http:
        headers = {"Authorization": f"Bearer {create_token(secret=SECRET, user_id=USER)}"}
        made = await http.post(f"/api/{USER}/app-passwords", json={"name": "bench"},
                               headers=headers)  # fmt: skip
        basic = base64.b64encode(f"{USER}:{made.json()['password']}".encode()).decode()
        dav = {"Authorization": f"Basic {basic}", "Content-Type": "application/xml"}
        big = await seed(dsn, "Big", tasks, http)
        small = await seed(dsn, "Small", SMALL, http)

        def path(list_id: str) -> str:
            return f"/dav/calendars/{USER}/{list_id}/"

        async def report(list_id: str, token: str = "", data: bool = True) -> bytes:
            body = _SYNC.format(token=token, data="<c:calendar-data/>" if data else "")
            answer = await http.request("REPORT", path(list_id), content=body, headers=dav)
            assert answer.status_code == 207, answer.text[:300]
            return answer.content

        def token_of(body: bytes) -> str:
            return str(etree.fromstring(body).findtext("{DAV:}sync-token"))

        started = time.perf_counter()
        first = await report(big)
        cold_s = time.perf_counter() - started
        items = len(etree.fromstring(first).findall("{DAV:}response"))
        big_token = token_of(first)
        small_token = token_of(await report(small, data=False))
        connection = await asyncpg.connect(dsn)
        try:
            rows = len(await connection.fetch(
                "SELECT * FROM tasks WHERE list_id = $1 AND deleted_at IS NULL", big))  # fmt: skip

            async def select() -> None:
                await connection.fetch(
                    "SELECT * FROM tasks WHERE list_id = $1 AND deleted_at IS NULL", big
                )

            select_s = await median_s(select, rounds)
        finally:
            await connection.close()

        async def etags() -> None:
            answer = await http.request("PROPFIND", path(big), content=_ETAGS,
                                        headers={**dav, "Depth": "1"})  # fmt: skip
            assert answer.status_code == 207

        initial_s = await median_s(lambda: report(big), max(3, rounds // 4))
        etags_s = await median_s(etags, rounds)
        empty_s = await median_s(lambda: report(big, big_token, data=False), rounds)
        empty_small_s = await median_s(lambda: report(small, small_token, data=False), rounds)
        before = statements_total(server)
        await report(big, big_token, data=False)
        empty_statements = statements_total(server) - before
    return {
        "tasks": tasks,
        "items_synced": items,
        "rows_selected": rows,
        "rounds": rounds,
        "select_ms": select_s * 1000,
        "initial_sync_cold_ms": cold_s * 1000,
        "initial_sync_cold_vs_select": cold_s / select_s,
        "initial_sync_ms": initial_s * 1000,
        "initial_sync_vs_select": initial_s / select_s,
        "etags_ms": etags_s * 1000,
        "etags_vs_select": etags_s / select_s,
        "empty_sync_ms": empty_s * 1000,
        "empty_sync_vs_select": empty_s / select_s,
        "empty_sync_small_list_ms": empty_small_s * 1000,
        "empty_sync_statements": empty_statements,
    }


def report_text(result: dict[str, Any], where: str) -> str:
    r = result
    return (
        f"# CalDAV: a {r['tasks']:,}-task list\n\n"
        f"Database: {where}. Medians of {r['rounds']} rounds (the initial sync of fewer).\n\n"
        "| what | ms | against the plain SELECT |\n| --- | ---: | ---: |\n"
        f"| plain `SELECT` of the list's {r['rows_selected']:,} tasks (asyncpg) "
        f"| {r['select_ms']:.1f} | 1 |\n"
        f"| initial `sync-collection` ({r['items_synced']:,} items, ETags and ICS), the "
        f"first (every item rendered) | {r['initial_sync_cold_ms']:.1f} "
        f"| {r['initial_sync_cold_vs_select']:.1f} x |\n"
        "| the same again (another device: the renderings kept) "
        f"| {r['initial_sync_ms']:.1f} | {r['initial_sync_vs_select']:.1f} x |\n"
        f"| `PROPFIND Depth: 1` of ETags | {r['etags_ms']:.1f} | {r['etags_vs_select']:.2f} x |\n"
        f"| `sync-collection` with nothing changed | {r['empty_sync_ms']:.2f} "
        f"| {r['empty_sync_vs_select']:.3f} x |\n"
        f"| the same on a list of {SMALL} tasks | {r['empty_sync_small_list_ms']:.2f} | |\n\n"
        f"The empty sync ran {r['empty_sync_statements']:.0f} SQL statements (the password "
        "check, the collection's counter), and read no task.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with one_service("caldav", SECRET) as (server, url, where):
        result = asyncio.run(measure(server, url, args.tasks, args.rounds))
    write_results("caldav", report_text(result, where), result)


if __name__ == "__main__":
    main()
