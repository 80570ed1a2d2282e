"""What an idle replica costs the database: one `todo-agent serve` on a fresh database, nobody
using it; the statements it sends PostgreSQL are counted on the wire for a window, then
reminders written straight into the database (as another replica writes them) are timed
from their `remind_at` to their firing.

    .venv/bin/python -m bench.idle [--window 120] [--settle 10] [--rev REV] [--webhooks]

The count is taken from outside, by `tests/statement_counter.py`: a TCP proxy between the
server and PostgreSQL that counts every simple Query and every extended-protocol Execute the
server sends (BEGIN and COMMIT included), by SQL text. Beside it, the database's own count of
transactions (`pg_stat_database.xact_commit + xact_rollback` of the server's database, read
from the `postgres` database so that reading adds none; it also counts autovacuum's).

`--rev REV` measures the service at REV first (its `backend/` exported with `git archive`
and put first on PYTHONPATH, on a database of its own beside the bench's), then this
checkout, each the same way. `--webhooks` sets WEBHOOK_URL (a closed loopback port: nothing
is ever delivered, since nothing happens) so that the webhook dispatcher runs too.

Same database rule as `python -m bench` (BENCH_DATABASE_URL, else an embedded PostgreSQL).
Writes bench/results/idle.{md,json}.
"""

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.engine import make_url

from bench.harness import BIN, Server, asyncpg_dsn, clean_env, database, reset_schema, write_results
from bench.versus import export, own_database
from tests.servers import free_port
from tests.statement_counter import StatementCounter

SECRET = "bench-idle-" + "x" * 40
USER = "bench-idle"
# Seconds from now at which the reminders written after the idle window are due.
REMINDERS_IN_S = (2.0, 4.5, 7.0, 11.0, 16.0)


async def _transactions(url: str) -> int:
    """Transactions committed and rolled back in `url`'s database so far, read from another
    database so that this read is not one of them."""
    name = make_url(url).database
    other = "template1" if name == "postgres" else "postgres"
    connection = await asyncpg.connect(asyncpg_dsn(url), database=other)
    try:
        # Statistics reach the view when a backend reports them (at most once a second).
        await connection.execute("SELECT pg_stat_clear_snapshot()")
        value = await connection.fetchval(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1", name
        )
    finally:
        await connection.close()
    return int(value)


async def _ssl_on(url: str) -> bool:
    connection = await asyncpg.connect(asyncpg_dsn(url))
    try:
        return bool(await connection.fetchval("SHOW ssl") == "on")
    finally:
        await connection.close()


async def _reminders(url: str) -> list[float]:
    """Reminders written now (straight into the database, as another replica would), due at
    REMINDERS_IN_S from now: how late each fired, by the database's clock."""
    connection = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await connection.execute(
            "INSERT INTO users (id, name) VALUES ($1, 'Bench idle') ON CONFLICT DO NOTHING", USER
        )
        await connection.execute(
            "INSERT INTO lists (id, owner_id, name, inbox) VALUES (gen_random_uuid(), $1,"
            " 'Inbox', true) ON CONFLICT (owner_id) WHERE inbox DO NOTHING",
            USER,
        )
        list_id = await connection.fetchval(
            "SELECT id FROM lists WHERE owner_id = $1 AND inbox", USER
        )
        await connection.execute(
            "INSERT INTO list_members (list_id, user_id, role) VALUES ($1, $2, 'owner')"
            " ON CONFLICT DO NOTHING",
            list_id,
            USER,
        )
        ids = []
        for n, in_s in enumerate(REMINDERS_IN_S):
            ids.append(
                await connection.fetchval(
                    "INSERT INTO tasks (id, list_id, created_by, title, remind_at)"
                    " VALUES (gen_random_uuid(), $1, $2, $3,"
                    " now() + make_interval(secs => $4)) RETURNING id",
                    list_id,
                    USER,
                    f"Idle reminder {n}",
                    in_s,
                )
            )
        deadline = time.monotonic() + max(REMINDERS_IN_S) + 30
        while time.monotonic() < deadline:
            lags = await connection.fetch(
                "SELECT EXTRACT(EPOCH FROM reminded_at - remind_at)::float8 FROM tasks"
                " WHERE id = ANY($1::uuid[]) AND reminded_at IS NOT NULL",
                ids,
            )
            if len(lags) == len(ids):
                return sorted(row[0] for row in lags)
            await asyncio.sleep(0.2)
        raise TimeoutError(f"only {len(lags)} of {len(ids)} reminders fired")
    finally:
        await connection.close()


def measure(
    name: str, url: str, env: dict[str, str], logs: Path, *, settle_s: float, window_s: float
) -> dict[str, Any]:
    """One server on `url`'s (migrated) database, through a counting proxy: statements and
    transactions per second over the window after settling, then the reminders' lateness."""
    with StatementCounter(url) as counter, ExitStack() as stack:
        server_env = {**env, "DATABASE_URL": counter.url_for(url)}
        command = [str(BIN / "todo-agent"), "serve", "--workers", "1"]
        server = Server(name, command, server_env, logs / f"{name}.log")
        stack.enter_context(server)
        time.sleep(settle_s)
        before, xacts = counter.snapshot(), asyncio.run(_transactions(url))
        started = time.monotonic()
        time.sleep(window_s)
        after, xacts_after = counter.snapshot(), asyncio.run(_transactions(url))
        elapsed = time.monotonic() - started
        idle = after - before
        lags = asyncio.run(_reminders(url))
        during = counter.snapshot() - after
    total = sum(idle.values())
    return {
        "window_s": round(elapsed, 1),
        "statements": total,
        "statements_per_s": round(total / elapsed, 3),
        "transactions_per_s": round((xacts_after - xacts) / elapsed, 3),
        "by_statement": dict(idle.most_common()),
        "reminder_lag_s": [round(lag, 3) for lag in lags],
        "statements_while_reminding": sum(during.values()),
    }


def _table(runs: dict[str, dict[str, Any]]) -> str:
    rows = [
        "| server | statements / s idle | transactions / s | reminders: lateness median, max |",
        "| --- | ---: | ---: | --- |",
    ]
    for name, run in runs.items():
        lags = run["reminder_lag_s"]
        rows.append(
            f"| {name} | {run['statements_per_s']:.2f} | {run['transactions_per_s']:.2f} "
            f"| {statistics.median(lags):.2f} s, {max(lags):.2f} s ({len(lags)} fired) |"
        )
    return "\n".join(rows) + "\n"


def _breakdown(name: str, run: dict[str, Any]) -> str:
    lines = [f"\n{name}: {run['statements']} statements in {run['window_s']} s\n"]
    for sql, count in Counter(run["by_statement"]).most_common(20):
        lines.append(f"    {count:5}  {sql[:110]}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--window", type=float, default=120.0, help="seconds counted idle")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after start-up")
    parser.add_argument("--rev", help="also measure the service at this commit, first")
    parser.add_argument("--webhooks", action="store_true", help="with WEBHOOK_URL set")
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="bench-idle-"))
    runs: dict[str, dict[str, Any]] = {}
    with database() as (url, where), ExitStack() as stack:
        if asyncio.run(_ssl_on(url)):
            raise SystemExit("bench.idle counts on the wire: it needs a PostgreSQL with ssl off")
        env = clean_env(
            JWT_SECRET=SECRET,
            LOG_LEVEL="WARNING",
            BENCH_CWD=str(logs),  # away from a developer's .env
        )
        if args.webhooks:
            env |= {
                "WEBHOOK_URL": f"http://127.0.0.1:{free_port()}/hook",
                "WEBHOOK_SECRET": "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            }
        if args.rev:
            earlier = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-idle-")))
            export(args.rev, earlier)
            before_url = own_database(url, "_idle_before")
            before_env = {**env, "DATABASE_URL": before_url, "PYTHONPATH": str(earlier)}
            reset_schema(before_url, before_env)
            runs[args.rev] = measure(
                "before", before_url, before_env, logs, settle_s=args.settle, window_s=args.window
            )
        reset_schema(url, {**env, "DATABASE_URL": url})
        runs["now"] = measure(
            "now",
            url,
            {**env, "DATABASE_URL": url},
            logs,
            settle_s=args.settle,
            window_s=args.window,
        )
    text = (
        "# An idle replica's statements\n\n"
        f"One `todo-agent serve` worker, nobody using it, {args.settle:g} s after start-up,"
        f" counted for {args.window:g} s on the wire"
        f"{', WEBHOOK_URL set' if args.webhooks else ''}; {where}. Then"
        f" {len(REMINDERS_IN_S)} reminders written straight into the database, due"
        f" {', '.join(f'{s:g}' for s in REMINDERS_IN_S)} s later: how late each fired.\n\n"
        + _table(runs)
        + "".join(_breakdown(name, run) for name, run in runs.items())
    )
    name = "idle-webhooks" if args.webhooks else "idle"
    write_results(name, text, {"runs": runs, "database": where})


if __name__ == "__main__":
    main()
