"""How a chat turn is kept in PostgreSQL: admission, the session lease, history, records.

A turn touches the database in short transactions only, never while the model thinks:
  begin:  admit the user (rate limit, timezone), take the session's lease, store the user
          message and read the recent history (3 statements, one transaction);
  tools:  each tool call commits its effect together with its record in the conversation;
  finish: store the reply, bump the session, release the lease, count tokens (1 statement).
The lease lives in the session row, so it holds across processes and replicas, and it
expires, so a process that dies mid-turn cannot wedge the session.

This is the hot path of every chat turn, so its statements are written once, as SQL over
the tables of `backend.models.session` and `backend.models.user`, and run on a Core
connection: building and caching SQLAlchemy constructs per call cost more CPU than the
database spent answering them.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.errors import SessionNotFound
from backend.models.session import Usage

TITLE_CHARS = 60
# (role, content, tool_calls, tool_results)
HistoryRow = tuple[str, str | None, list[dict[str, Any]] | None, list[dict[str, Any]] | None]


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

_CREATE_SESSION = text(
    """
    INSERT INTO agent_sessions (id, user_id, title, lease_owner, lease_expires_at)
    VALUES (:session, :owner, :title, :turn, now() + make_interval(secs => :lease))
    """
)

_TAKE_LEASE = text(
    """
    UPDATE agent_sessions
    SET lease_owner = :turn, lease_expires_at = now() + make_interval(secs => :lease)
    WHERE id = :session AND user_id = :owner
      AND (lease_expires_at IS NULL OR lease_expires_at < now())
    RETURNING id
    """
)

_SESSION_EXISTS = text("SELECT 1 FROM agent_sessions WHERE id = :session AND user_id = :owner")

_RENEW_LEASE = text(
    """
    UPDATE agent_sessions SET lease_expires_at = now() + make_interval(secs => :lease)
    WHERE id = :session AND lease_owner = :turn
    RETURNING id
    """
)

_RELEASE_LEASE = text(
    """
    UPDATE agent_sessions SET lease_owner = NULL, lease_expires_at = NULL
    WHERE id = :session AND lease_owner = :turn
    """
)

# Store the user message and read the history before it, in one statement: the SELECT runs
# on the statement's snapshot, so it does not see the row being inserted. The history is the
# latest messages, newest first: one index range scan on (session_id, seq), the same cost
# whatever the length of the session.
_ADD_USER_MESSAGE_READ_HISTORY = text(
    """
    WITH added AS (
        INSERT INTO agent_messages (id, session_id, user_id, role, content, created_at)
        VALUES (:message, :session, :owner, 'user', :content, clock_timestamp())
    )
    SELECT role, content, tool_calls, tool_results FROM agent_messages
    WHERE session_id = :session AND user_id = :owner
    ORDER BY seq DESC LIMIT :limit
    """
)

# The turn's assistant message is created by its first tool call and grows with each one.
_RECORD_TOOL_CALL = text(
    """
    INSERT INTO agent_messages
        (id, session_id, user_id, role, tool_calls, tool_results, created_at)
    VALUES (:message, :session, :owner, 'assistant', :calls, :results, clock_timestamp())
    ON CONFLICT (id) DO UPDATE SET
        tool_calls = agent_messages.tool_calls || EXCLUDED.tool_calls,
        tool_results = agent_messages.tool_results || EXCLUDED.tool_results
    """
).bindparams(bindparam("calls", type_=JSONB), bindparam("results", type_=JSONB))

# The reply (completing the tool-call record if there is one), the user's daily tokens, and
# the session: activity time, token totals, and the lease, released only if still ours.
_FINISH = text(
    """
    WITH reply AS (
        INSERT INTO agent_messages (id, session_id, user_id, role, content, using_stub,
                                    prompt_tokens, completion_tokens, created_at)
        VALUES (:message, :session, :owner, 'assistant', :content, :stub,
                :prompt, :completion, clock_timestamp())
        ON CONFLICT (id) DO UPDATE SET
            content = EXCLUDED.content,
            using_stub = EXCLUDED.using_stub,
            prompt_tokens = EXCLUDED.prompt_tokens,
            completion_tokens = EXCLUDED.completion_tokens
        RETURNING created_at
    ), spent AS (
        UPDATE users SET
            tokens_used = CASE WHEN tokens_day = CURRENT_DATE THEN tokens_used ELSE 0 END
                          + :total,
            tokens_day = CURRENT_DATE
        WHERE id = :owner
    )
    UPDATE agent_sessions SET
        updated_at = now(),
        prompt_tokens = prompt_tokens + :prompt,
        completion_tokens = completion_tokens + :completion,
        total_tokens = total_tokens + :total,
        lease_owner = CASE WHEN lease_owner = :turn THEN NULL ELSE lease_owner END,
        lease_expires_at = CASE WHEN lease_owner = :turn THEN NULL ELSE lease_expires_at END
    WHERE id = :session AND user_id = :owner
    RETURNING (SELECT created_at FROM reply)
    """
)


async def admit(
    db: AsyncConnection, *, owner: str, timezone: str | None, per_minute: int
) -> Admission:
    """Count a chat turn against the user's rate limit; remember their timezone."""
    interval = 60.0 / per_minute if per_minute else 0.0
    tau = 60.0 - interval if per_minute else 1e9
    row = (
        await db.execute(
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
    db: AsyncConnection, *, owner: str, title: str, turn_id: uuid.UUID, lease_s: float
) -> uuid.UUID:
    """A new session, already leased to the turn that creates it."""
    session_id = uuid.uuid4()
    await db.execute(
        _CREATE_SESSION,
        {"session": session_id, "owner": owner, "title": title, "turn": turn_id, "lease": lease_s},
    )
    return session_id


async def take_lease(
    db: AsyncConnection,
    *,
    owner: str,
    session_id: uuid.UUID,
    turn_id: uuid.UUID,
    lease_s: float,
) -> bool:
    """Take the session for this turn if nobody holds it. False: busy. Unknown: 404."""
    key = {"session": session_id, "owner": owner}
    taken = await db.execute(_TAKE_LEASE, {**key, "turn": turn_id, "lease": lease_s})
    if taken.first() is not None:
        return True
    if (await db.execute(_SESSION_EXISTS, key)).first() is None:
        raise SessionNotFound()
    return False


async def renew_lease(
    db: AsyncConnection, *, session_id: uuid.UUID, turn_id: uuid.UUID, lease_s: float
) -> bool:
    """Extend our lease; False if it is no longer ours."""
    renewed = await db.execute(
        _RENEW_LEASE, {"session": session_id, "turn": turn_id, "lease": lease_s}
    )
    return renewed.first() is not None


async def release_lease(db: AsyncConnection, *, session_id: uuid.UUID, turn_id: uuid.UUID) -> None:
    await db.execute(_RELEASE_LEASE, {"session": session_id, "turn": turn_id})


async def add_user_message(
    db: AsyncConnection, *, owner: str, session_id: uuid.UUID, content: str, history: int
) -> tuple[uuid.UUID, list[HistoryRow]]:
    """Store the user message; return its id and the session's latest `history` messages
    ending with it, oldest first."""
    message_id = uuid.uuid4()
    rows = await db.execute(
        _ADD_USER_MESSAGE_READ_HISTORY,
        {
            "message": message_id,
            "session": session_id,
            "owner": owner,
            "content": content,
            "limit": history - 1,
        },
    )
    earlier: list[HistoryRow] = [(r[0], r[1], r[2], r[3]) for r in reversed(rows.all())]
    return message_id, [*earlier, ("user", content, None, None)]


async def record_tool_call(
    db: AsyncConnection,
    *,
    owner: str,
    session_id: uuid.UUID,
    message_id: uuid.UUID,
    call: dict[str, Any],
    result: dict[str, Any],
) -> None:
    """Append a call and its result to the turn's assistant message, in the transaction
    that carried out the call: no effect without its record."""
    await db.execute(
        _RECORD_TOOL_CALL,
        {
            "message": message_id,
            "session": session_id,
            "owner": owner,
            "calls": [call],
            "results": [result],
        },
    )


async def finish(
    db: AsyncConnection,
    *,
    owner: str,
    session_id: uuid.UUID,
    message_id: uuid.UUID,
    turn_id: uuid.UUID,
    content: str,
    using_stub: bool,
    usage: Usage,
) -> datetime:
    """Store the reply and close the turn; returns the reply's time."""
    row = (
        await db.execute(
            _FINISH,
            {
                "message": message_id,
                "session": session_id,
                "owner": owner,
                "turn": turn_id,
                "content": content,
                "stub": using_stub,
                "prompt": usage.prompt_tokens,
                "completion": usage.completion_tokens,
                "total": usage.total_tokens,
            },
        )
    ).first()
    if row is None:
        raise SessionNotFound()
    created_at: datetime = row[0]
    return created_at
