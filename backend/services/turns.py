"""How a chat turn is kept in PostgreSQL: admission, the session lease, history, records.

A turn touches the database in short transactions only, never while the model thinks:
  begin:  admit the user (rate limit, timezone), take the session's lease, store the user
          message, read the recent history (4 statements, one transaction);
  tools:  each tool call commits its effect together with its record in the conversation;
  finish: store the reply, bump the session, release the lease, count tokens (1 statement).
The lease lives in the session row, so it holds across processes and replicas, and it
expires, so a process that dies mid-turn cannot wedge the session.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, case, func, insert, literal, text, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import SessionNotFound
from backend.models.session import AgentMessage, AgentSession, Usage
from backend.models.user import User

TITLE_CHARS = 60


@dataclass(frozen=True, slots=True)
class Admission:
    name: str | None
    timezone: str
    allowed: bool
    retry_after_s: float
    tokens_today: int


# GCRA over the user row: `chat_tat` is when the user's "bucket" is next empty. A turn is
# admitted when that is at most `tau` ahead of now (a burst of `per_minute` turns), and then
# moves it `interval` further. The row lock makes it exact across replicas; it is a NO KEY
# UPDATE lock so that it does not conflict with the KEY SHARE locks that inserting a session
# (a foreign key to users) takes in a concurrent turn of the same user.
_ADMIT = text(
    """
    UPDATE users AS u SET
        chat_tat = CASE WHEN g.allowed THEN g.base + make_interval(secs => :interval)
                        ELSE u.chat_tat END,
        timezone = COALESCE(:timezone, u.timezone)
    FROM (
        SELECT id,
               GREATEST(COALESCE(chat_tat, now()), now()) AS base,
               GREATEST(COALESCE(chat_tat, now()), now()) - now()
                   <= make_interval(secs => :tau) AS allowed
        FROM users WHERE id = :owner FOR NO KEY UPDATE
    ) AS g
    WHERE u.id = g.id
    RETURNING u.name, u.timezone, g.allowed,
              EXTRACT(EPOCH FROM g.base - now())::float8 - :tau AS retry_after_s,
              CASE WHEN u.tokens_day = CURRENT_DATE THEN u.tokens_used ELSE 0 END AS tokens_today
    """
)


async def admit(
    db: AsyncSession, *, owner: str, timezone: str | None, per_minute: int
) -> Admission:
    """Count a chat turn against the user's rate limit; remember their timezone."""
    interval = 60.0 / per_minute if per_minute else 0.0
    tau = 60.0 - interval if per_minute else 1e9
    connection = await db.connection()
    row = (
        await connection.execute(
            _ADMIT, {"owner": owner, "timezone": timezone, "interval": interval, "tau": tau}
        )
    ).one()
    return Admission(
        name=row.name,
        timezone=row.timezone,
        allowed=row.allowed,
        retry_after_s=max(row.retry_after_s, 0.0),
        tokens_today=row.tokens_today,
    )


def title_from(message: str) -> str:
    """A session title from its first message: the first line, cut at a word boundary."""
    line = " ".join(message.split())
    if len(line) <= TITLE_CHARS:
        return line
    cut = line[:TITLE_CHARS].rsplit(" ", 1)[0]
    return (cut or line[:TITLE_CHARS]) + "…"


async def create_session(
    db: AsyncSession, *, owner: str, title: str, turn_id: uuid.UUID, lease_s: float
) -> uuid.UUID:
    session_id = uuid.uuid4()
    await db.exec(
        insert(AgentSession).values(
            id=session_id,
            user_id=owner,
            title=title,
            lease_owner=turn_id,
            lease_expires_at=func.now() + func.make_interval(0, 0, 0, 0, 0, 0, lease_s),
        )
    )
    return session_id


async def take_lease(
    db: AsyncSession, *, owner: str, session_id: uuid.UUID, turn_id: uuid.UUID, lease_s: float
) -> bool:
    """Take the session for this turn if nobody holds it. False: busy. Unknown: 404."""
    taken = (
        await db.exec(
            update(AgentSession)
            .where(
                col(AgentSession.id) == session_id,
                col(AgentSession.user_id) == owner,
                (col(AgentSession.lease_expires_at).is_(None))
                | (col(AgentSession.lease_expires_at) < func.now()),
            )
            .values(
                lease_owner=turn_id,
                lease_expires_at=func.now() + func.make_interval(0, 0, 0, 0, 0, 0, lease_s),
            )
            .returning(col(AgentSession.id))
        )
    ).first()
    if taken is not None:
        return True
    exists = await db.exec(
        select(literal(1)).where(
            col(AgentSession.id) == session_id, col(AgentSession.user_id) == owner
        )
    )
    if exists.first() is None:
        raise SessionNotFound()
    return False


async def renew_lease(
    db: AsyncSession, *, session_id: uuid.UUID, turn_id: uuid.UUID, lease_s: float
) -> bool:
    """Extend our lease; False if it is no longer ours."""
    renewed = await db.exec(
        update(AgentSession)
        .where(col(AgentSession.id) == session_id, col(AgentSession.lease_owner) == turn_id)
        .values(lease_expires_at=func.now() + func.make_interval(0, 0, 0, 0, 0, 0, lease_s))
        .returning(col(AgentSession.id))
    )
    return renewed.first() is not None


async def release_lease(db: AsyncSession, *, session_id: uuid.UUID, turn_id: uuid.UUID) -> None:
    await db.exec(
        update(AgentSession)
        .where(col(AgentSession.id) == session_id, col(AgentSession.lease_owner) == turn_id)
        .values(lease_owner=None, lease_expires_at=None)
    )


async def add_user_message(
    db: AsyncSession, *, owner: str, session_id: uuid.UUID, content: str
) -> tuple[uuid.UUID, datetime]:
    message_id = uuid.uuid4()
    row = (
        await db.exec(
            insert(AgentMessage)
            .values(
                id=message_id,
                session_id=session_id,
                user_id=owner,
                role="user",
                content=content,
                created_at=func.clock_timestamp(),
            )
            .returning(col(AgentMessage.created_at))
        )
    ).one()
    return message_id, row[0]


# (role, content, tool_calls, tool_results)
HistoryRow = tuple[str, str | None, list[dict[str, Any]] | None, list[dict[str, Any]] | None]


async def recent_messages(
    db: AsyncSession, *, owner: str, session_id: uuid.UUID, limit: int
) -> list[HistoryRow]:
    """The latest `limit` messages, oldest first: one index range scan on (session_id, seq),
    the same cost whatever the length of the session."""
    rows = (
        await db.exec(
            select(
                col(AgentMessage.role),
                col(AgentMessage.content),
                col(AgentMessage.tool_calls),
                col(AgentMessage.tool_results),
            )
            .where(col(AgentMessage.session_id) == session_id, col(AgentMessage.user_id) == owner)
            .order_by(col(AgentMessage.seq).desc())
            .limit(limit)
        )
    ).all()
    return [(row[0], row[1], row[2], row[3]) for row in reversed(rows)]


async def record_tool_call(
    db: AsyncSession,
    *,
    owner: str,
    session_id: uuid.UUID,
    message_id: uuid.UUID,
    call: dict[str, Any],
    result: dict[str, Any],
) -> None:
    """Append a call and its result to the turn's assistant message (created by the first
    call), in the transaction that carried out the call: no effect without its record."""
    table = AgentMessage.__table__  # type: ignore[attr-defined]
    statement = pg_insert(table).values(
        id=message_id,
        session_id=session_id,
        user_id=owner,
        role="assistant",
        tool_calls=bindparam("calls", [call], type_=JSONB),
        tool_results=bindparam("results", [result], type_=JSONB),
        created_at=func.clock_timestamp(),
    )
    statement = statement.on_conflict_do_update(
        index_elements=[table.c.id],
        set_={
            "tool_calls": table.c.tool_calls.op("||")(statement.excluded.tool_calls),
            "tool_results": table.c.tool_results.op("||")(statement.excluded.tool_results),
        },
    )
    await db.exec(statement)


async def finish(
    db: AsyncSession,
    *,
    owner: str,
    session_id: uuid.UUID,
    message_id: uuid.UUID,
    turn_id: uuid.UUID,
    content: str,
    using_stub: bool,
    usage: Usage,
) -> datetime:
    """Store the reply (completing the tool-call record if there is one), bump the
    session's activity and token totals, release the lease and count the user's tokens:
    one statement."""
    messages = AgentMessage.__table__  # type: ignore[attr-defined]
    reply = pg_insert(messages).values(
        id=message_id,
        session_id=session_id,
        user_id=owner,
        role="assistant",
        content=content,
        using_stub=using_stub,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        created_at=func.clock_timestamp(),
    )
    reply_cte = (
        reply.on_conflict_do_update(
            index_elements=[messages.c.id],
            set_={
                "content": reply.excluded.content,
                "using_stub": reply.excluded.using_stub,
                "prompt_tokens": reply.excluded.prompt_tokens,
                "completion_tokens": reply.excluded.completion_tokens,
            },
        )
        .returning(messages.c.created_at)
        .cte("reply")
    )
    tokens_cte = (
        update(User)
        .where(col(User.id) == owner)
        .values(
            tokens_used=func.coalesce(
                text("CASE WHEN users.tokens_day = CURRENT_DATE THEN users.tokens_used END"), 0
            )
            + usage.total_tokens,
            tokens_day=func.current_date(),
        )
        .cte("tokens")
    )
    session = AgentSession.__table__  # type: ignore[attr-defined]
    statement = (
        update(session)
        .where(session.c.id == session_id, session.c.user_id == owner)
        .values(
            updated_at=func.now(),
            prompt_tokens=session.c.prompt_tokens + usage.prompt_tokens,
            completion_tokens=session.c.completion_tokens + usage.completion_tokens,
            total_tokens=session.c.total_tokens + usage.total_tokens,
            # A turn that outlived its lease must not free someone else's.
            lease_owner=case((session.c.lease_owner == turn_id, None), else_=session.c.lease_owner),
            lease_expires_at=case(
                (session.c.lease_owner == turn_id, None), else_=session.c.lease_expires_at
            ),
        )
        .add_cte(reply_cte)
        .add_cte(tokens_cte)
        .returning(select(reply_cte.c.created_at).scalar_subquery())
    )
    row = (await db.exec(statement)).one()
    return row[0]  # type: ignore[no-any-return]
