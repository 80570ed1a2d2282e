"""Erasure: every row about a person removed, in short transactions, and one `user.deleted`
event left to tell the outside world.

The order is the design:

1. **Begin** (one transaction): mark the user row (`erasing_at`). From that commit on no
   event is written for them (a reminder of theirs never fires, migration 0009), and
   signing in again is refused (409) instead of writing the row again; every process
   forgets them (KnownUsers), so none acts for them on an old "exists". Then, while they
   are still a member of everything: the lists they own lose their other members, each of
   whom gets `list.deleted`; their invitations go; they leave the lists others shared with
   them (`list.member_removed` to the rest, and their tasks there unassigned, as leaving
   does); the reminders still pending in their lists are cleared.
2. **Batches** of at most BATCH rows each, every one its own transaction: their undo
   records, held calls, messages (session by session) and sessions, the tasks of their
   lists (steps go with their parent), their documents (passages first) and the lists,
   their memories, idempotency records, events, answered MCP questions; then, as the
   worker (these rows are in others' lists, which the user no longer reaches), their name
   comes off the tasks (and documents) they made or were given there,
   and their id out of others' events and undo records.
   Each batch ends by renewing the mark: should it be gone (another erasure of the same
   user finished, and a new account was made since), the batch rolls back and the
   erasure stops, so it never touches the new account. Other users' transactions wait for
   one batch at most, never for the whole account.
3. **Finish** (one transaction, `todo_finish_erasure`): the user row goes (its foreign keys
   cascade to anything a request of theirs still wrote meanwhile), with the rest of their
   events and idempotency records, and the `user.deleted` event is written: the one row
   left with their id, delivered to WEBHOOK_URL like every event.

Every step is idempotent, so an erasure interrupted anywhere is finished by running it
again: DELETE again, the identity provider's retry, or the upkeep loop, which resumes an
erasure that has made no progress for STALLED_AFTER_S. Two erasures of one user at once
do the same work twice and write one `user.deleted` (the user row is deleted once).
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy import delete, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.db import Database
from backend.models.list import ListInvitation, ListMember, TodoList
from backend.models.task import Task
from backend.services import lists

logger = logging.getLogger("todo_agent.erasure")
T = TypeVar("T")

BATCH = 2000
# Sessions emptied of their messages and deleted together in one batch.
SESSIONS_PER_BATCH = 100
STALLED_AFTER_S = 300.0
# A batch that lost a deadlock (with a turn or a reminder of a list member) runs again.
_RETRIES = 5
_RETRYABLE = ("40P01", "40001")  # deadlock detected, serialization failure

_BEGIN = text("UPDATE users SET erasing_at = now() WHERE id = :me RETURNING id")
_FORGET = text("SELECT pg_notify('todo_agent_forget_user', :me)")
# The end of every batch: still this erasure's user (else roll the batch back).
_PROGRESS = text(
    "UPDATE users SET erasing_at = now() WHERE id = :me AND erasing_at IS NOT NULL RETURNING id"
)
_FINISH = text("SELECT todo_finish_erasure()")
_STALLED = text(
    "SELECT id FROM users WHERE erasing_at < now() - make_interval(secs => :stalled_s)"
    " ORDER BY erasing_at LIMIT 10"
)

# Batches: (what, a statement deleting or updating at most :n rows, whether as the worker).
_STEPS: list[tuple[str, str, bool]] = [
    # First, so that no CalDAV client of theirs signs in while the rest goes.
    ("app_passwords", "DELETE FROM app_passwords WHERE id IN"
     " (SELECT id FROM app_passwords WHERE user_id = :me LIMIT :n)", False),
    ("dav_sign_ins", "DELETE FROM dav_sign_ins WHERE user_id = :me", False),
    # Where notifications go, first: nothing more is sent to them (pending deliveries go
    # with their subscriptions; action tokens die with the subscriptions and the account).
    ("notify_deliveries", "DELETE FROM notify_deliveries WHERE id IN"
     " (SELECT id FROM notify_deliveries WHERE user_id = :me LIMIT :n)", False),
    ("push_subscriptions", "DELETE FROM push_subscriptions WHERE id IN"
     " (SELECT id FROM push_subscriptions WHERE user_id = :me LIMIT :n)", False),
    ("notify_digests", "DELETE FROM notify_digests WHERE (user_id, local_date) IN"
     " (SELECT user_id, local_date FROM notify_digests WHERE user_id = :me LIMIT :n)", False),
    ("notification_settings", "DELETE FROM notification_settings WHERE user_id = :me", False),
    ("task_changes", "DELETE FROM task_changes WHERE id IN"
     " (SELECT id FROM task_changes WHERE user_id = :me LIMIT :n)", False),
    ("approvals", "DELETE FROM approvals WHERE id IN"
     " (SELECT id FROM approvals WHERE user_id = :me LIMIT :n)", False),
    # Top-level tasks of their lists first (each takes its steps), then whatever is left.
    ("tasks", "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE list_id IN"
     " (SELECT id FROM lists WHERE owner_id = :me) AND parent_id IS NULL LIMIT :n)", False),
    ("tasks", "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE list_id IN"
     " (SELECT id FROM lists WHERE owner_id = :me) LIMIT :n)", False),
    # Their lists' documents: the passages first (there may be thousands to a document).
    ("passages", "DELETE FROM passages WHERE id IN (SELECT id FROM passages WHERE list_id IN"
     " (SELECT id FROM lists WHERE owner_id = :me) LIMIT :n)", False),
    ("documents", "DELETE FROM documents WHERE id IN (SELECT id FROM documents WHERE list_id IN"
     " (SELECT id FROM lists WHERE owner_id = :me) LIMIT :n)", False),
    ("lists", "DELETE FROM lists WHERE id IN"
     " (SELECT id FROM lists WHERE owner_id = :me LIMIT :n)", False),
    ("idempotency_keys", "DELETE FROM idempotency_keys WHERE (user_id, key) IN"
     " (SELECT user_id, key FROM idempotency_keys WHERE user_id = :me LIMIT :n)", False),
    ("memories", "DELETE FROM memories WHERE id IN"
     " (SELECT id FROM memories WHERE user_id = :me LIMIT :n)", False),
    ("events", "DELETE FROM events WHERE id IN"
     " (SELECT id FROM events WHERE user_id = :me LIMIT :n)", False),
    ("mcp_request_states", "DELETE FROM mcp_request_states WHERE nonce IN"
     " (SELECT nonce FROM mcp_request_states WHERE user_id = :me LIMIT :n)", False),
    ("created_by", "UPDATE tasks SET created_by = NULL WHERE id IN"
     " (SELECT id FROM tasks WHERE created_by = :me LIMIT :n)", True),
    ("assignee_id", "UPDATE tasks SET assignee_id = NULL, updated_at = now() WHERE id IN"
     " (SELECT id FROM tasks WHERE assignee_id = :me LIMIT :n)", True),
    ("documents' created_by", "UPDATE documents SET created_by = NULL WHERE id IN"
     " (SELECT id FROM documents WHERE created_by = :me LIMIT :n)", True),
    # What others keep that names them (their own rows went above): the events of their
    # lists' members (a task they were given, their leaving) and those members' undo
    # records (so an undo restores no one who is gone, and sees no change in the way).
    ("events (others')", "UPDATE events SET data = todo_without(data, :me) WHERE id IN"
     " (SELECT id FROM events WHERE jsonb_path_exists(data, '$.** ? (@ == $me)',"
     " jsonb_build_object('me', CAST(:me AS text))) LIMIT :n)", True),
    ("task_changes (others')", "UPDATE task_changes SET before = todo_without(before, :me),"
     " after = todo_without(after, :me) WHERE id IN (SELECT id FROM task_changes"
     " WHERE jsonb_path_exists(jsonb_build_array(before, after), '$.** ? (@ == $me)',"
     " jsonb_build_object('me', CAST(:me AS text))) LIMIT :n)", True),
]  # fmt: skip
# The messages of the sessions least recently active (a window of them), then, once those
# are empty, the window's sessions.
_MESSAGES = text(
    "DELETE FROM agent_messages WHERE id IN (SELECT m.id FROM"
    " (SELECT id FROM agent_sessions WHERE user_id = :me ORDER BY updated_at, id"
    "  LIMIT :sessions) AS s"
    " CROSS JOIN LATERAL (SELECT id FROM agent_messages WHERE session_id = s.id"
    "  ORDER BY seq LIMIT :n) AS m LIMIT :n)"
)
_SESSIONS = text(
    "DELETE FROM agent_sessions WHERE id IN (SELECT id FROM agent_sessions WHERE user_id = :me"
    " ORDER BY updated_at, id LIMIT :sessions)"
)


class _Stopped(Exception):
    """The user is not being erased any more: another erasure finished first."""


class Erasure:
    """One user's erasure (see the module): `await Erasure(...).run()`."""

    def __init__(
        self, database: Database, user_id: str, *, forget: Callable[[str], None] | None = None
    ) -> None:
        self._database = database
        self._user = user_id
        self._forget = forget or (lambda _: None)
        self.counts: dict[str, int] = {}

    async def run(self) -> bool:
        """Erase the user; False when there was no such user (nothing is done then)."""
        started = time.perf_counter()
        try:
            if not await self._retrying(self._begin):
                return False
            self._forget(self._user)
            await self._sessions()
            for what, sql, as_worker in _STEPS:
                await self._batches(what, text(sql), as_worker=as_worker)
            erased = await self._retrying(self._finish)
        except _Stopped:
            return False
        finally:
            self._forget(self._user)
        elapsed_ms = round(1000 * (time.perf_counter() - started))
        logger.info(
            "account erased" if erased else "account erased by another erasure",
            extra={"rows": self.counts, "duration_ms": elapsed_ms},
        )
        return erased

    # -- the steps --------------------------------------------------------------------

    async def _begin(self) -> bool:
        async with self._database.transaction(as_user=self._user) as db:
            connection = await db.connection()
            if (await connection.execute(_BEGIN, {"me": self._user})).first() is None:
                return False
            await self._cut_off(db)
            await connection.execute(_FORGET, {"me": self._user})
        return True

    async def _cut_off(self, db: AsyncSession) -> None:
        """What must happen while the user is still a member of everything: the members of
        their lists lose them (`list.deleted`), they leave the lists of others, and the
        reminders in their lists are cleared (no event says so: they are being erased)."""
        me = self._user
        owned = select(col(TodoList.id)).where(col(TodoList.owner_id) == me)
        shared = (
            select(col(ListMember.list_id))
            .where(col(ListMember.list_id).in_(owned), col(ListMember.user_id) != me)
            .distinct()
        )
        for list_id in (await db.exec(shared)).all():
            await lists.announce(db, list_id=list_id, kind="list.deleted")
            await db.exec(
                delete(ListMember).where(
                    col(ListMember.list_id) == list_id, col(ListMember.user_id) != me
                )
            )
        await db.exec(delete(ListInvitation).where(col(ListInvitation.list_id).in_(owned)))
        others = select(col(ListMember.list_id)).where(
            col(ListMember.user_id) == me, col(ListMember.list_id).not_in(owned)
        )
        for list_id in (await db.exec(others)).all():
            await lists.remove_member(db=db, user=me, list_id=list_id, member=me)
        await db.exec(
            update(Task)
            .where(
                col(Task.list_id).in_(owned),
                col(Task.remind_at).is_not(None),
                col(Task.reminded_at).is_(None),
            )
            .values(remind_at=None)
        )

    async def _sessions(self) -> None:
        """Messages, BATCH at a time, from the sessions least recently active; each window
        of sessions is deleted once its messages are."""
        params = {"me": self._user, "n": BATCH, "sessions": SESSIONS_PER_BATCH}

        async def batch() -> tuple[int, int]:
            async with self._database.connection(as_user=self._user) as connection:
                messages = (await connection.execute(_MESSAGES, params)).rowcount
                sessions = 0
                if messages < BATCH:
                    sessions = (await connection.execute(_SESSIONS, params)).rowcount
                await self._progress(connection)
            return messages, sessions

        while True:
            messages, sessions = await self._retrying(batch)
            self._count("agent_messages", messages)
            self._count("agent_sessions", sessions)
            if messages < BATCH and sessions < SESSIONS_PER_BATCH:
                return
            await asyncio.sleep(0)  # the loop's other work first

    async def _batches(self, what: str, statement: Any, *, as_worker: bool) -> None:
        params = {"me": self._user, "n": BATCH}

        async def batch() -> int:
            opened = (
                self._database.system()
                if as_worker
                else self._database.connection(as_user=self._user)
            )
            async with opened as connection:
                done = int((await connection.execute(statement, params)).rowcount)
                await self._progress(connection)
            return done

        while True:
            done = await self._retrying(batch)
            self._count(what, done)
            if done < BATCH:
                return
            await asyncio.sleep(0)

    async def _progress(self, connection: AsyncConnection) -> None:
        if (await connection.execute(_PROGRESS, {"me": self._user})).first() is None:
            raise _Stopped()  # rolls this batch back

    async def _finish(self) -> bool:
        async with self._database.connection(as_user=self._user) as connection:
            return bool((await connection.execute(_FINISH)).scalar_one())

    # -- helpers ----------------------------------------------------------------------

    def _count(self, what: str, rows: int) -> None:
        if rows:
            self.counts[what] = self.counts.get(what, 0) + rows

    async def _retrying(self, step: Callable[[], Awaitable[T]]) -> T:
        """Run one transaction of the erasure, again when it lost a deadlock."""
        for attempt in range(_RETRIES):
            try:
                return await step()
            except DBAPIError as error:
                sqlstate = getattr(error.orig, "sqlstate", None)
                if sqlstate not in _RETRYABLE or attempt == _RETRIES - 1:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")


async def erase(
    database: Database, user_id: str, *, forget: Callable[[str], None] | None = None
) -> bool:
    """Erase the user (see the module); False when the service holds no such user."""
    return await Erasure(database, user_id, forget=forget).run()


async def resume_stalled(database: Database, *, stalled_s: float = STALLED_AFTER_S) -> int:
    """Finish the erasures that stopped midway (the process running them died): the upkeep
    loop's, as the worker finds them. How many were finished."""
    async with database.system() as connection:
        stalled = [row[0] for row in await connection.execute(_STALLED, {"stalled_s": stalled_s})]
    finished = 0
    for user_id in stalled:
        finished += await erase(database, user_id)
    return finished
