"""How a chat turn is kept in PostgreSQL: admission, the session lease, history, records.

A turn touches the database in short transactions only, never while the model thinks:
  begin:  admit the user (rate limit, timezone), take the session's lease, store the user
          message and read the recent history (1 statement);
  tools:  each tool call commits its effect together with its record in the conversation;
  finish: store the reply, bump the session, release the lease, count tokens (1 statement).
The lease lives in the session row, so it holds across processes and replicas, and it
expires: the turn of a process that died mid-turn is taken over and finished by another
replica's sweeper (`take_over`, `resume`; services/sweeper.py), each attempt with its own
token, so that only the attempt holding the session records tool calls or a reply.

This is the hot path of every chat turn, so its statements are written once, as SQL over
the tables of `backend.models.session` and `backend.models.user`: building and caching
SQLAlchemy constructs per call cost more CPU than the database spent answering them. The
turn's two statements (`open_turn`, `finish`) also run on the pool's bare asyncpg
connection (`Database.raw`, prepared once per connection, or behind a pooler parsed with
each run), where even SQLAlchemy's execution path costs more than the database does; there
they run outside any transaction, as functions that set their own role. Inside a
transaction (with an Idempotency-Key) they run on its Core connection.
"""

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import JSON, BigInteger, Boolean, String, bindparam, column, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db import RawConnection, Statement, first_row
from backend.errors import SessionNotFound, TurnTakenOver
from backend.models.session import Usage

if TYPE_CHECKING:
    from backend.services.digest import Fold

TITLE_CHARS = 60
# (role, content, tool_calls, tool_results)
HistoryRow = tuple[str, str | None, list[dict[str, Any]] | None, list[dict[str, Any]] | None]


@dataclass(frozen=True, slots=True)
class Opening:
    """What starting a turn found: the turn started (`session_id` and `history` set), or
    why not: rate limited, the session busy or not the user's, or no such user row."""

    started: bool
    turn_id: uuid.UUID = field(default_factory=uuid.uuid4)
    session_id: uuid.UUID | None = None
    user_message_id: uuid.UUID | None = None  # None: the turn stored no message
    message: str = ""
    earlier_results: list[dict[str, Any]] = field(default_factory=list)
    history: list[HistoryRow] = field(default_factory=list)
    # Beside each history row: its seq (None: the message this turn adds) and when it was
    # sent; the session's digest, and the last message folded into it.
    seqs: list[int | None] = field(default_factory=list)
    sent: list[datetime | None] = field(default_factory=list)
    digest: str | None = None
    folded: int = 0
    name: str | None = None
    timezone: str = "UTC"
    instructions: str | None = None
    model: str | None = None
    confirm: str | None = None
    # The session's calls held for the person's yes (pending; `expired` ones too).
    held: list[dict[str, Any]] = field(default_factory=list)
    # The person's memories, newest first, as many as the turn's budget held (services/memory).
    memories: list[dict[str, Any]] = field(default_factory=list)
    tokens_today: int = 0
    rate_limited: bool = False
    retry_after_s: float = 0.0
    session_found: bool = True
    user_found: bool = True


# The start of a turn, one statement: the database function `todo_open_turn` (migration
# 0007), which names its acting user first (row-level security holds every statement after
# it to that user's rows), then:
#  gate:     the user's settings (name, timezone, instructions, model, confirm), and their
#            rate limit, read under a row lock. GCRA: `chat_tat` is when the user's "bucket"
#            is next empty; a turn is allowed when that is at most `tau` ahead of now (a
#            burst of CHAT_RATE_LIMIT_PER_MINUTE turns), and then moves it `spacing`
#            further. The lock makes it exact across replicas; a NO KEY UPDATE lock does not
#            conflict with the KEY SHARE locks that inserting a session (a foreign key to
#            users) takes in a concurrent turn of the same user.
#  lease:    if allowed, take the session (or create it) for this turn; the lease lives in
#            the session row and expires, so a process that dies mid-turn cannot wedge it.
#  admitted: if the session was taken, count the turn, remember the user's timezone, read
#            the history (`todo_history`: the messages after the session's fold position,
#            migration 0020), store the user message, read the held calls
#            and the person's memories (`todo_memories`, migration 0019; only when an
#            index probe finds they keep some, 0024). The session's digest and fold
#            position come from the row the lease is taken on.
# The history is the latest messages before this one, newest first, walked back a message
# at a time: the `max(seq)` below the last one, then that row, each a probe of the
# (session_id, seq) index, so its cost does not grow with the session. (Not `ORDER BY seq
# DESC LIMIT n`: the planner cannot know which session it reads, so on a generic plan it
# plans for a session of average length, and when those are short it reads the whole
# session and sorts it, 5 ms at 10,000 messages. A probe is the cheapest plan whatever it
# guesses.) Refused turns change nothing.
_OPEN_TURN = Statement(
    text(
        "SELECT * FROM todo_open_turn(:owner, :session, :is_new, :chat, :turn, :lease,"
        " :spacing, :tau, :timezone, :message, :content, :title, :adds, :limit, :memory,"
        " :temporary)"
    )
)
# The user's session by its id or a client's chat id (the id first), and whether a turn
# runs in it: one holds the lease, or held it until `takeover` seconds ago (its replica
# died, and another takes the turn over).
_SESSION_TURN = text(
    """
    SELECT id, lease_owner IS NOT NULL
               AND lease_expires_at > now() - make_interval(secs => :takeover) AS running,
           lease_owner
    FROM agent_sessions
    WHERE user_id = :owner AND (id = CAST(:session AS uuid) OR chat_id = :chat)
    ORDER BY id = CAST(:session AS uuid) DESC NULLS LAST
    LIMIT 1
    """
)

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

# The turn's assistant message is created by its first tool call and grows with each one,
# only while the turn still holds the session: the lock (FOR SHARE) orders this against a
# sweeper taking the turn over (services/sweeper.py), so a call either commits before the
# takeover (and the sweeper reads its record) or writes nothing, its effect rolled back
# with it. No row returned: the turn was taken over.
RECORD_TOOL_CALL = """
    INSERT INTO agent_messages
        (id, session_id, user_id, role, tool_calls, tool_results, reply_to, created_at)
    SELECT :message, s.id, :owner, 'assistant', :calls, :results, :reply_to, clock_timestamp()
    FROM agent_sessions s WHERE s.id = :session AND s.lease_owner = :turn
    FOR SHARE OF s
    ON CONFLICT (id) DO UPDATE SET
        tool_calls = agent_messages.tool_calls || EXCLUDED.tool_calls,
        tool_results = agent_messages.tool_results || EXCLUDED.tool_results
    RETURNING id
"""
_RECORD_TOOL_CALL = text(RECORD_TOOL_CALL).bindparams(
    bindparam("calls", type_=JSONB), bindparam("results", type_=JSONB)
)

# A lapsed lease, taken by a sweeper for a new attempt at its turn: only while it still
# names the attempt that lapsed, so one sweeper wins.
_TAKE_OVER = text(
    """
    UPDATE agent_sessions SET lease_owner = :turn,
                              lease_expires_at = now() + make_interval(secs => :lease),
                              takeovers = takeovers + 1
    WHERE id = :session AND lease_owner = :lapsed AND lease_expires_at < now()
    RETURNING takeovers
    """
)
# What a new attempt at a turn starts from, as `todo_open_turn` reads it for a new turn.
_RESUME = text(
    """
    SELECT COALESCE(u.display_name, u.name) AS name, u.timezone, u.instructions, u.model,
           u.confirm,
           CASE WHEN u.tokens_day = CURRENT_DATE THEN u.tokens_used ELSE 0 END AS tokens_today,
           todo_history(:session, s.digest_seq, :want) AS history, s.digest, s.digest_seq,
           -- A temporary turn (its lease says so) reads no memory, whoever takes it over.
           todo_memories(:owner, CASE WHEN s.lease_temporary THEN 0 ELSE :memory END)
               AS memories, s.lease_temporary AS temporary,
           (SELECT json_agg(a ORDER BY a.created_at) FROM (
                SELECT p.id, p.message_id, p.tool_call_id, p.name, p.arguments, p.summary,
                       p.created_at, p.expires_at <= now() AS expired
                FROM approvals p WHERE p.session_id = :session AND p.state = 'pending'
           ) AS a) AS held
    FROM users u JOIN agent_sessions s ON s.id = :session WHERE u.id = :owner
    """
).columns(
    column("name", String),
    column("timezone", String),
    column("instructions", String),
    column("model", String),
    column("confirm", String),
    column("tokens_today", BigInteger),
    column("history", JSON),
    column("digest", String),
    column("digest_seq", BigInteger),
    column("held", JSON),
    column("memories", JSON),
    column("temporary", Boolean),
)
_LAPSED = text("SELECT session_id, user_id, turn FROM todo_lapsed_turns(:want)")
_NEXT_LAPSE = text("SELECT due, now FROM todo_next_lapse()")
# Draining: the lease ends now, and the sweeper of another replica takes the turn.
_HAND_OVER = text(
    """
    UPDATE agent_sessions SET lease_expires_at = now()
    WHERE id = :session AND lease_owner = :turn
    RETURNING id
    """
)

# The end of a turn, one statement: the database function `todo_finish_turn` (migrations
# 0007, 0013): if the turn still holds the session, the user's daily tokens, the reply
# (completing the tool-call record if there is one; `answers` the user message it answers,
# once: a unique index), and the session: activity time, token totals, the lease released.
# Locks are taken in the order `todo_open_turn` takes them, the user's row before the
# session's: the other order deadlocks with a turn opening in the session.
_FINISH = Statement(
    text(
        "SELECT created_at, taken_over FROM todo_finish_turn(:owner, :session, :message,"
        " :turn, :answers, :content, :stub, :prompt, :completion, :total, :cached, :digest,"
        " :folded, :fold_from)"
    )
)


# A tool call from outside a turn (an MCP client) passes the same gate as a turn: one
# unit of the user's CHAT_RATE_LIMIT_PER_MINUTE. Also reads what the tools need to know.
# One UPDATE decides and spends, so the user's row is locked once: a concurrent call's
# update is waited for and the rule evaluated again on the row it left. (A SELECT ... FOR NO
# KEY UPDATE in a CTE beside the UPDATE locked it twice in one statement, and twenty calls
# at once deadlocked.) Only a refused call reads again, for how long to wait.
_ADMIT_CALL = text(
    """
    UPDATE users
    SET chat_tat = GREATEST(COALESCE(chat_tat, now()), now()) + make_interval(secs => :interval)
    WHERE id = :owner
      AND GREATEST(COALESCE(chat_tat, now()), now()) - now() <= make_interval(secs => :tau)
    RETURNING COALESCE(display_name, name) AS name, timezone, confirm
"""
)
_REFUSED_CALL = text(
    """
    SELECT COALESCE(display_name, name) AS name, timezone, confirm,
           EXTRACT(EPOCH FROM GREATEST(COALESCE(chat_tat, now()), now()) - now())::float8
               - :tau AS retry_after_s
    FROM users WHERE id = :owner
"""
)


@dataclass(frozen=True, slots=True)
class Admission:
    """A single tool call let through (or not), and the user's name, timezone and `confirm`
    setting (None: the default)."""

    allowed: bool
    retry_after_s: float
    name: str | None
    timezone: str
    confirm: str | None


def _gcra(per_minute: int) -> tuple[float, float]:
    """GCRA's emission interval and burst tolerance, in seconds, for `per_minute` (0: none)."""
    interval = 60.0 / per_minute if per_minute else 0.0
    return interval, (60.0 - interval if per_minute else 1e9)


async def admit_call(db: AsyncConnection, *, owner: str, per_minute: int) -> Admission | None:
    """Let one tool call through the user's rate limit; None when there is no such user."""
    interval, tau = _gcra(per_minute)
    values = {"owner": owner, "interval": interval, "tau": tau}
    while True:
        if admitted := (await db.execute(_ADMIT_CALL, values)).first():
            return Admission(True, 0.0, admitted.name, admitted.timezone, admitted.confirm)
        refused = (await db.execute(_REFUSED_CALL, values)).first()
        if refused is None:
            return None
        if refused.retry_after_s > 0:
            return Admission(
                allowed=False,
                retry_after_s=refused.retry_after_s,
                name=refused.name,
                timezone=refused.timezone,
                confirm=refused.confirm,
            )
        # The row was made by another call after the UPDATE looked (the user's first
        # calls at once): that call committed, so the UPDATE now sees it.


def title_from(message: str) -> str:
    """A session title from its first message: the first line, cut at a word boundary."""
    line = " ".join(message.split())
    if len(line) <= TITLE_CHARS:
        return line
    cut = line[:TITLE_CHARS].rsplit(" ", 1)[0]
    return (cut or line[:TITLE_CHARS]) + "…"


async def open_turn(
    db: AsyncConnection | RawConnection,
    *,
    owner: str,
    session_id: uuid.UUID | None,
    message: str | None,
    turn_id: uuid.UUID,
    timezone: str | None,
    per_minute: int,
    lease_s: float,
    history: int,
    chat_id: str | None = None,
    regenerate: bool = False,
    message_id: uuid.UUID | None = None,
    memory_chars: int = 0,
    temporary: bool = False,
) -> Opening:
    """Start a turn: admit it, take (or create) the session, store the user message and
    read the messages after the session's fold position ending with it (up to twice
    `history`: a turn folds what is past `history`, see services/digest/), oldest first,
    the session's digest and its held calls. One statement.

    The session is `session_id`, else the one bound to `chat_id` (created on first use),
    else a new one. `regenerate` answers the stored last user message again, and the
    answers it already had are shown to the model only as the tool calls they made (those
    happened; their words are what is being replaced). `message=None` without it stores
    nothing: the turn goes on from where the session is (answering held calls). The
    person's memories come too, newest first, as many as `memory_chars` holds (0: none).
    A `temporary` turn's lease says so, for whichever replica takes the turn over."""
    interval, tau = _gcra(per_minute)
    message_id = message_id or uuid.uuid4()
    adds = message is not None and not regenerate
    if not adds and session_id is None:
        raise SessionNotFound("There is no message in this chat to answer again.")
    params: dict[str, Any] = {
        "owner": owner,
        "session": session_id or uuid.uuid4(),
        "is_new": session_id is None,
        "chat": chat_id,
        "turn": turn_id,
        "lease": lease_s,
        "spacing": interval,
        "tau": tau,
        "timezone": timezone,
        "message": message_id,
        "content": message,
        "title": title_from(message or ""),
        "adds": adds,
        "limit": 2 * history,
        "memory": memory_chars,
        "temporary": temporary,
    }
    row = await first_row(db, _OPEN_TURN, params)
    if row is None:
        return Opening(started=False, user_found=False)
    if row["session_id"] is None:
        return Opening(
            started=False,
            rate_limited=not row["allowed"],
            retry_after_s=max(row["retry_after_s"], 0.0),
            session_found=row["session_found"],
        )
    stored = row["history"]
    earlier: list[HistoryRow] = [
        (m["role"], m["content"], m["tool_calls"], m["tool_results"]) for m in stored
    ]
    seqs: list[int | None] = [m["seq"] for m in stored]
    sent = [sent_at(m) for m in stored]
    earlier_results: list[dict[str, Any]] = []
    user_message_id: uuid.UUID | None = message_id
    if regenerate:
        last = max((i for i, m in enumerate(stored) if m["role"] == "user"), default=None)
        if last is not None:
            user_message_id, message = uuid.UUID(stored[last]["id"]), earlier[last][1] or ""
            earlier[last + 1 :] = [(r, None, c, t) for r, _, c, t in earlier[last + 1 :]]
            answers = earlier[last + 1 :]
            earlier_results = [r["result"] for *_, results in answers for r in results or ()]
        history_rows = earlier
    elif message is None:
        user_message_id, history_rows = None, earlier
    else:
        history_rows = [*earlier, ("user", message, None, None)]
        seqs, sent = [*seqs, None], [*sent, row["sent_at"]]
    return Opening(
        started=True,
        turn_id=turn_id,
        session_id=row["session_id"],
        user_message_id=user_message_id,
        message=message or "",
        earlier_results=earlier_results,
        history=history_rows,
        seqs=seqs,
        sent=sent,
        digest=row["digest"],
        folded=row["folded"] or 0,
        name=row["name"],
        timezone=row["timezone"],
        instructions=row["instructions"],
        model=row["model"],
        confirm=row["confirm"],
        held=row["held"] or [],
        memories=row["memories"] or [],
        tokens_today=row["tokens_today"],
    )


def sent_at(stored: dict[str, Any]) -> datetime | None:
    """When a message read by `todo_history` was sent: a person's message carries it."""
    at = stored.get("created_at")
    return datetime.fromisoformat(at) if stored["role"] == "user" and at else None


class SessionTurn(NamedTuple):
    session_id: uuid.UUID
    running: bool
    turn_id: uuid.UUID | None  # the turn that holds (or held) the session's lease


async def find_chat_session(db: AsyncConnection, *, owner: str, chat_id: str) -> uuid.UUID | None:
    """The user's session that a client's chat id names: the session with that id, else
    the one bound to it; None when the chat is new. Another user's ids name nothing here."""
    try:
        as_uuid: uuid.UUID | None = uuid.UUID(chat_id)
    except ValueError:
        as_uuid = None
    found = await session_turn(db, owner=owner, session_id=as_uuid, chat_id=chat_id)
    return None if found is None else found[0]


async def session_turn(
    db: AsyncConnection,
    *,
    owner: str,
    session_id: uuid.UUID | None,
    chat_id: str | None,
    takeover_s: float = 0.0,
) -> SessionTurn | None:
    """The user's session with the id, else the one bound to the chat id, and whether a
    turn runs in it (one whose lease lapsed less than `takeover_s` ago still does); None
    when there is none."""
    params = {"owner": owner, "session": session_id, "chat": chat_id, "takeover": takeover_s}
    row = (await db.execute(_SESSION_TURN, params)).first()
    return None if row is None else SessionTurn(row.id, row.running, row.lease_owner)


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


async def record_tool_call(
    db: AsyncConnection,
    *,
    owner: str,
    session_id: uuid.UUID,
    message_id: uuid.UUID,
    turn_id: uuid.UUID,
    reply_to: uuid.UUID | None,
    call: dict[str, Any],
    result: dict[str, Any],
) -> None:
    """Append a call and its result to the turn's assistant message, in the transaction
    that carried out the call: no effect without its record. Raises TurnTakenOver (and the
    transaction must roll back, the effect with it) when the turn no longer holds the
    session."""
    recorded = await db.execute(
        _RECORD_TOOL_CALL,
        {
            "message": message_id,
            "session": session_id,
            "owner": owner,
            "turn": turn_id,
            "reply_to": reply_to,
            "calls": [call],
            "results": [result],
        },
    )
    if recorded.first() is None:
        raise TurnTakenOver()


async def finish(
    db: AsyncConnection | RawConnection,
    *,
    owner: str,
    session_id: uuid.UUID,
    message_id: uuid.UUID,
    turn_id: uuid.UUID,
    reply_to: uuid.UUID | None,
    content: str,
    using_stub: bool,
    usage: Usage,
    fold: "Fold | None" = None,
) -> datetime:
    """Store the reply and close the turn, and write the fold the turn made (if the
    session's fold position is still the one it started from); returns the reply's time.
    Raises TurnTakenOver when the turn no longer holds the session (another replica
    finishes it)."""
    row = await first_row(
        db,
        _FINISH,
        {
            "message": message_id,
            "session": session_id,
            "owner": owner,
            "turn": turn_id,
            "answers": reply_to,
            "content": content,
            "stub": using_stub,
            "prompt": usage.prompt_tokens,
            "completion": usage.completion_tokens,
            "total": usage.total_tokens,
            "cached": usage.cached_tokens,
            "digest": fold.digest if fold else None,
            "folded": fold.through if fold else None,
            "fold_from": fold.since if fold else None,
        },
    )
    if row is None:
        raise SessionNotFound()
    if row["taken_over"]:
        raise TurnTakenOver()
    created_at: datetime = row["created_at"]
    return created_at


async def lapsed_turns(db: AsyncConnection, *, want: int) -> list[tuple[uuid.UUID, str, uuid.UUID]]:
    """Up to `want` turns whose lease lapsed: (session id, user id, the lapsed attempt),
    longest lapsed first. As the worker role, which sees no one's sessions otherwise."""
    rows = await db.execute(_LAPSED, {"want": want})
    return [(row.session_id, row.user_id, row.turn) for row in rows]


async def next_lapse(db: AsyncConnection) -> tuple[float | None, float]:
    """(When the earliest held lease lapses, the database's clock), seconds since the epoch;
    as the worker role (migration 0021)."""
    row = (await db.execute(_NEXT_LAPSE)).one()
    return row[0], row[1]


async def take_over(
    db: AsyncConnection,
    *,
    session_id: uuid.UUID,
    lapsed: uuid.UUID,
    turn_id: uuid.UUID,
    lease_s: float,
) -> int | None:
    """Take a lapsed turn's lease for the attempt `turn_id`: the session's count of
    takeovers, this one included (the attempt's number); None if another took it, or the
    lapsed attempt finished after all."""
    taken = await db.execute(
        _TAKE_OVER, {"session": session_id, "lapsed": lapsed, "turn": turn_id, "lease": lease_s}
    )
    attempt: int | None = taken.scalar()
    return attempt


@dataclass(frozen=True, slots=True)
class Resumption:
    """What a new attempt at a turn starts from: the user's settings, the session's latest
    messages as stored (dicts with `id`, oldest first) and its held calls."""

    name: str | None
    timezone: str
    instructions: str | None
    model: str | None
    confirm: str | None
    tokens_today: int
    stored: list[dict[str, Any]]
    held: list[dict[str, Any]]
    memories: list[dict[str, Any]]
    digest: str | None = None
    folded: int = 0
    temporary: bool = False


async def resume(
    db: AsyncConnection, *, owner: str, session_id: uuid.UUID, history: int, memory_chars: int = 0
) -> Resumption | None:
    """Read what a taken-over turn needs, as the session's user (the messages after the
    session's fold position, up to twice `history`, as `open_turn` reads them); None: no
    such user."""
    row = (
        await db.execute(
            _RESUME,
            {"owner": owner, "session": session_id, "want": 2 * history, "memory": memory_chars},
        )
    ).first()
    if row is None:
        return None
    return Resumption(
        name=row.name,
        timezone=row.timezone,
        instructions=row.instructions,
        model=row.model,
        confirm=row.confirm,
        tokens_today=row.tokens_today,
        stored=row.history or [],
        held=row.held or [],
        memories=row.memories or [],
        digest=row.digest,
        folded=row.digest_seq,
        temporary=row.temporary,
    )


async def hand_over(db: AsyncConnection, *, session_id: uuid.UUID, turn_id: uuid.UUID) -> bool:
    """End the turn's lease now, so that a sweeper takes it over (a draining replica's
    turns); False when the turn no longer holds the session."""
    ended = await db.execute(_HAND_OVER, {"session": session_id, "turn": turn_id})
    return ended.first() is not None
