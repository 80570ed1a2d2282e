"""A deploy drains a replica: real `todo-agent serve` processes, real SIGTERMs.

On SIGTERM the listener stays open: `/ready` answers 503 at once (the load balancer learns
from an answer, not from a refused connection), new turns are refused with 503 and
Retry-After, the turns in flight finish within SHUTDOWN_GRACE_S, and those that would not
are handed over (their session's lease lapses at once, and another replica finishes them);
the process exits 0.
"""

import asyncio
import signal
import threading
from pathlib import Path

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.chat_helpers import chat
from tests.conftest import auth, server_env
from tests.fake_openai import FakeOpenAI, hang, held, reply
from tests.servers import ServerProcess, server_processes, start_all, until
from tests.test_turn_streams import SSE

# Starting takes seconds, and much longer on a machine busy with other tests.
START_S = 180
NEW_TURNS = (
    ("/chat", {"message": "one more thing"}),
    ("/chat/stream", {"message": "one more thing"}),
    (
        "/chat/ui",
        {
            "id": "chat-1",
            "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
        },
    ),
)


async def _sigterm(server: ServerProcess) -> None:
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    await until(
        lambda: _draining(server), timeout_s=10, message="/ready never said it was draining"
    )


async def _draining(server: ServerProcess) -> bool:
    async with httpx.AsyncClient(base_url=server.url) as c:
        status: str = (await c.get("/ready")).json()["status"]
    return status == "draining"


async def _exit_code(server: ServerProcess) -> int:
    assert server.process is not None
    return await asyncio.to_thread(server.process.wait, 60)


async def test_sigterm_refuses_new_turns_while_the_turn_in_flight_finishes_then_exits_zero(
    tmp_path: Path, database_url: str, model: FakeOpenAI, engine: AsyncEngine
) -> None:
    answer_now = threading.Event()
    model.script(held(answer_now, reply("Here it is, in the end.")))
    env = server_env(database_url, model, SHUTDOWN_GRACE_S="60")
    server = ServerProcess(env, log=tmp_path / "serve.log").start(START_S)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
            in_flight = asyncio.create_task(chat(c, "take your time", user="alice"))
            await asyncio.to_thread(model.wait_for_requests, 1, 10)
            await _sigterm(server)

            ready = await c.get("/ready")
            health = await c.get("/health")
            tasks = await c.get("/api/bob/tasks", headers=auth("bob"))
            refused = [
                await c.post(f"/api/bob{path}", json=body, headers=auth("bob"))
                for path, body in NEW_TURNS
            ]
            still_running = not in_flight.done()
            answer_now.set()
            answer = await in_flight
        exit_code = await _exit_code(server)
    finally:
        answer_now.set()
        server.kill()

    assert ready.status_code == 503
    assert ready.json()["status"] == "draining"
    assert health.status_code == 200  # alive: no restart, it is on its way out
    assert tasks.status_code == 200  # what is not a turn is still served meanwhile
    for response in refused:
        assert response.status_code == 503, response.text
        assert int(response.headers["Retry-After"]) >= 1
    assert still_running
    assert answer["response"] == "Here it is, in the end."
    assert exit_code == 0, server.logs()
    assert model.requests_count == 1  # the refused turns never reached the model

    async with engine.connect() as db:
        stored = (
            await db.execute(
                text("SELECT user_id, role, content FROM agent_messages ORDER BY created_at")
            )
        ).all()
    # Nothing of the refused turns was stored.
    assert [tuple(row) for row in stored] == [
        ("alice", "user", "take your time"),
        ("alice", "assistant", "Here it is, in the end."),
    ]


async def test_a_turn_longer_than_the_grace_is_handed_over_and_finished_by_another_replica(
    tmp_path: Path, database_url: str, model: FakeOpenAI, engine: AsyncEngine
) -> None:
    # The lease is long: the other replica takes the turn over because the drain ended the
    # lease at once, not because it ran out.
    env = server_env(database_url, model, SHUTDOWN_GRACE_S="1", CHAT_SESSION_LEASE_S="600")
    model.script(hang(), reply("Finished elsewhere."))
    body = {"message": "a long one"}
    headers = {**auth("alice"), "Idempotency-Key": "long-one"}
    with server_processes(env, tmp_path, ["draining", "other"]) as (draining, other):
        start_all([draining, other], timeout_s=START_S)
        async with httpx.AsyncClient(timeout=60) as c:
            in_flight = asyncio.create_task(
                c.post(f"{draining.url}/api/alice/chat", json=body, headers=headers)
            )
            await asyncio.to_thread(model.wait_for_requests, 1, 10)
            await _sigterm(draining)
            cut_short = await in_flight
            exit_code = await _exit_code(draining)

            async def answered() -> bool:
                retry = await c.post(f"{other.url}/api/alice/chat", json=body, headers=headers)
                assert retry.status_code in (200, 409), retry.text
                return retry.status_code == 200

            await until(answered, timeout_s=30, message="the other replica never finished it")
            answer = await c.post(f"{other.url}/api/alice/chat", json=body, headers=headers)

    assert cut_short.status_code == 503, cut_short.text
    assert int(cut_short.headers["Retry-After"]) >= 1
    assert "Idempotency-Key" in cut_short.json()["detail"]
    assert exit_code == 0, draining.logs()
    assert answer.json()["response"] == "Finished elsewhere."
    assert model.requests_count == 2  # once here, once there: never a third run
    async with engine.connect() as db:
        stored = (
            await db.execute(
                text(
                    "SELECT role, content FROM agent_messages WHERE user_id = 'alice'"
                    " ORDER BY created_at"
                )
            )
        ).all()
    assert [tuple(row) for row in stored] == [
        ("user", "a long one"),
        ("assistant", "Finished elsewhere."),
    ]


async def test_a_stream_joined_on_another_replica_follows_a_handed_over_turn_to_its_done(
    tmp_path: Path, database_url: str, model: FakeOpenAI
) -> None:
    """The contract's "any replica, any moment": a client following the turn on the other
    replica's `GET /sessions/{id}/stream` sees it through to `done`, told by the replica
    that took it over; the client that posted it to the draining one is told to retry."""
    env = server_env(database_url, model, SHUTDOWN_GRACE_S="1", CHAT_SESSION_LEASE_S="600")
    model.script(hang(), reply("Finished elsewhere."))
    headers = {**auth("alice"), "Idempotency-Key": "followed"}
    with server_processes(env, tmp_path, ["draining", "other"]) as (draining, other):
        start_all([draining, other], timeout_s=START_S)
        async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as c:
            posted = SSE(
                c,
                "POST",
                f"{draining.url}/api/alice/chat/stream",
                json={"message": "a long one"},
                headers=headers,
            ).start()
            await posted.wait_for(1)
            session_id = posted.events[0].data["session_id"]
            await asyncio.to_thread(model.wait_for_requests, 1, 10)
            url = f"{other.url}/api/alice/sessions/{session_id}/stream"
            joined = SSE(c, "GET", url, headers=auth("alice")).start()
            await joined.wait_for(1)  # the draining replica told it the turn's start
            await _sigterm(draining)
            told_there = await posted.finish(timeout_s=60)
            told_here = await joined.finish(timeout_s=60)

    assert joined.status == 200
    assert [event.event for event in told_here] == ["session", "session", "done"]
    assert told_here[-1].data["response"] == "Finished elsewhere."
    assert [event.id for event in told_here] == ["0-1", "1-1", "1-2"]
    # The client that posted to the draining replica: its stream ends asking for a retry.
    assert told_there[-1].event == "error"
    assert "Idempotency-Key" in told_there[-1].data["detail"]
