"""A replica's death to the turn's reply elsewhere: two `todo-agent serve` replicas on one
database; a turn (one committed `add_todo` call, then a model that never answers) runs on
one, which is SIGKILLed; the time until the other has stored the turn's reply is measured
from the kill, and from the moment the dead turn's lease lapsed (what the sweeper adds).

    .venv/bin/python -m bench.takeover [--trials 5] [--lease 5]

Same database rule as `python -m bench` (BENCH_DATABASE_URL, else an embedded PostgreSQL).
Writes bench/results/takeover.{md,json}.
"""

import argparse
import asyncio
import contextlib
import signal
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import httpx

from backend.auth import create_token
from bench.harness import BIN, Server, asyncpg_dsn, clean_env, database, reset_schema, write_results
from tests.fake_openai import FakeOpenAI, call, delay, reply, tool_calls

SECRET = "bench-secret-" + "x" * 40
USER = "bench-takeover"


async def trial(victim: Server, model: FakeOpenAI, dsn: str, token: str) -> tuple[float, float]:
    """One kill: (seconds from the kill to the reply, from the lease's lapse to the reply)."""
    model.script(
        tool_calls(call("add_todo", {"title": f"Trial {uuid.uuid4().hex[:6]}"})),
        delay(600, then=reply("never sent")),
        reply("Added it."),
    )
    seen = model.requests_count
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": uuid.uuid4().hex}
    async with httpx.AsyncClient(timeout=30) as http:
        doomed = asyncio.create_task(
            http.post(f"{victim.url}/api/{USER}/chat", json={"message": "add it"}, headers=headers)
        )
        await asyncio.to_thread(model.wait_for_requests, seen + 2, 30)
        victim.stop(signal.SIGKILL)
        killed_at = time.monotonic()
        with contextlib.suppress(httpx.HTTPError):
            await doomed
    connection = await asyncpg.connect(dsn)
    try:
        message_id, lapses_in = await connection.fetchrow(
            "SELECT m.id, EXTRACT(EPOCH FROM s.lease_expires_at - now())::float8"
            " FROM agent_messages m JOIN agent_sessions s ON s.id = m.session_id"
            " WHERE m.role = 'user' ORDER BY m.seq DESC LIMIT 1"
        )
        lapsed_at = killed_at + lapses_in  # the clocks differ, the intervals do not
        while not await connection.fetchval(
            "SELECT count(*) FROM agent_messages WHERE reply_to = $1 AND content IS NOT NULL",
            message_id,
        ):
            await asyncio.sleep(0.01)
        replied_at = time.monotonic()
    finally:
        await connection.close()
    return replied_at - killed_at, replied_at - lapsed_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--lease", type=float, default=5.0, help="CHAT_SESSION_LEASE_S")
    args = parser.parse_args()
    with FakeOpenAI() as model, database() as (url, where):
        env = clean_env(
            DATABASE_URL=url,
            JWT_SECRET=SECRET,
            CHAT_RATE_LIMIT_PER_MINUTE="0",
            CHAT_SESSION_LEASE_S=str(args.lease),
            LOG_LEVEL="WARNING",
            OPENAI_API_KEY="sk-bench",
            OPENAI_BASE_URL=model.base_url,
        )
        reset_schema(url, env)
        logs = Path(tempfile.mkdtemp(prefix="bench-takeover-"))
        command = [str(BIN / "todo-agent"), "serve", "--workers", "1"]
        servers = [Server(name, command, env, logs / f"{name}.log") for name in ("a", "b")]
        token = create_token(secret=SECRET, user_id=USER)
        from_kill, from_lapse = [], []
        try:
            for server in servers:
                server.start(timeout_s=180)
            for n in range(args.trials):
                victim = servers[n % 2]
                if not victim.running:
                    victim.start(timeout_s=180)
                killed, lapsed = asyncio.run(trial(victim, model, asyncpg_dsn(url), token))
                from_kill.append(killed)
                from_lapse.append(lapsed)
                victim.start(timeout_s=180)
        finally:
            for server in servers:
                server.kill()
    result = {
        "lease_s": args.lease,
        "trials": args.trials,
        "kill_to_reply_s": from_kill,
        "lapse_to_reply_s": from_lapse,
        "database": where,
    }
    text = (
        "# A replica's death to the turn's reply elsewhere\n\n"
        f"CHAT_SESSION_LEASE_S={args.lease:g}, {args.trials} kills, {where}.\n\n"
        "| from | median | max |\n| --- | --- | --- |\n"
        f"| the SIGKILL | {statistics.median(from_kill):.2f} s | {max(from_kill):.2f} s |\n"
        f"| the lease's lapse | {statistics.median(from_lapse):.2f} s "
        f"| {max(from_lapse):.2f} s |\n"
    )
    write_results("takeover", text, result)


if __name__ == "__main__":
    main()
