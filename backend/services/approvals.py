"""Held tool calls: a call the person's `confirm` setting says to ask about is stored here
instead of run, and runs only when they say yes.

hold     store the call as pending (unguessable id, bound to the user, the session, the
         turn's message and the exact call) and record it in the turn, one statement;
check    an answer that names an unknown, answered, expired or other session's approval is
         409, another user's 404 (before anything of the request is stored);
take     the answer: one conditional UPDATE ... WHERE state = 'pending' RETURNING, so two
         answers at once, a replay or a late one find nothing to take and run nothing;
settle   the call's result (or `denied`) replaces the placeholder in the turn's record;
held_calls  what the person was asked about and the call as stored (for the history).

Which calls are held, and how a plain message answers, is decided here too.
"""

import re
import secrets
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.errors import ApprovalNotFound, ApprovalNotPending, TurnTakenOver
from backend.models.approval import ApprovalAnswer, PendingApproval
from backend.services.turns import RECORD_TOOL_CALL

# The `status` of a held call's result: until it is answered, and when it was not run.
PENDING, DENIED, EXPIRED = "pending_approval", "denied", "expired"

# One statement: the approval, and the call in the turn's record with its placeholder
# result (the record as turns.record_tool_call writes it).
_HELD = """
    WITH held AS (
        INSERT INTO approvals (id, user_id, session_id, message_id, tool_call_id, name,
                               arguments, summary, expires_at)
        VALUES (:id, :owner, :session, :message, :call, :name, :arguments, :summary,
                now() + make_interval(secs => :ttl_s))
    )
"""
_HOLD = text(_HELD + RECORD_TOOL_CALL).bindparams(
    bindparam("arguments", type_=JSONB),
    bindparam("calls", type_=JSONB),
    bindparam("results", type_=JSONB),
)
_LOOK_UP = text(
    "SELECT id, user_id, session_id, state, expires_at <= now() AS expired"
    " FROM approvals WHERE id = ANY(:ids)"
)
# Whose an approval is that the acting user cannot see (row-level security hides others').
_OWNER = text("SELECT todo_approval_owner(:id)")
_HELD_CALLS = text(
    "SELECT id, summary, arguments FROM approvals WHERE id = ANY(:ids) AND user_id = :owner"
)
_TAKE = text(
    """
    UPDATE approvals SET state = :state, reason = :reason, answered_at = now()
    WHERE id = :id AND user_id = :owner AND session_id = :session AND state = 'pending'
      AND (expires_at > now() OR :state = 'expired')
    RETURNING message_id, tool_call_id, name, arguments, summary
    """
)
# The call's result takes the place of the placeholder in the record of the turn that
# held it, with the answer beside it (the history shows how it was answered).
_SETTLE = text(
    """
    UPDATE agent_messages SET tool_results = (
        SELECT jsonb_agg(
                   CASE WHEN item->>'tool_call_id' = :call
                        THEN item || jsonb_build_object('result', CAST(:result AS jsonb),
                                                        'approval', CAST(:approval AS jsonb))
                        ELSE item END
                   ORDER BY position)
        FROM jsonb_array_elements(tool_results) WITH ORDINALITY AS results(item, position))
    WHERE id = :message AND session_id = :session
    """
).bindparams(bindparam("result", type_=JSONB), bindparam("approval", type_=JSONB))


def new_id() -> str:
    return "apr_" + secrets.token_urlsafe(24)


async def hold(
    db: AsyncConnection,
    *,
    owner: str,
    session_id: uuid.UUID,
    message_id: uuid.UUID,
    turn_id: uuid.UUID,
    reply_to: uuid.UUID | None,
    call: dict[str, Any],
    arguments: dict[str, Any],
    summary: str,
    ttl_s: float,
) -> PendingApproval:
    """Store `call` (its id and name; `arguments` as parsed) for the person's answer, and
    record it in the turn's message with a placeholder result. Raises TurnTakenOver (roll
    back) when the turn no longer holds the session, as turns.record_tool_call does."""
    approval = PendingApproval(
        id=new_id(),
        tool_call_id=call["id"],
        name=call["name"],
        arguments=arguments,
        summary=summary[:500],
    )
    result = {"tool_call_id": call["id"], "name": call["name"], "result": placeholder(approval)}
    recorded = await db.execute(
        _HOLD,
        {
            "id": approval.id,
            "owner": owner,
            "session": session_id,
            "message": message_id,
            "turn": turn_id,
            "reply_to": reply_to,
            "call": approval.tool_call_id,
            "name": approval.name,
            "arguments": arguments,
            "summary": approval.summary,
            "ttl_s": ttl_s,
            "calls": [call],
            "results": [result],
        },
    )
    if recorded.first() is None:
        raise TurnTakenOver()
    return approval


def placeholder(approval: PendingApproval) -> dict[str, Any]:
    """What the turn's record holds for a held call until it is answered."""
    return {"status": PENDING, "approval_id": approval.id, "summary": approval.summary}


async def check(
    db: AsyncConnection, *, owner: str, session_id: uuid.UUID, answers: Sequence[ApprovalAnswer]
) -> None:
    """Refuse answers that cannot be taken, before anything of the request happens."""
    rows = (await db.execute(_LOOK_UP, {"ids": [a.id for a in answers]})).all()
    found = {row.id: row for row in rows}  # the acting user's own
    for answer in answers:
        if answer.id not in found:
            someone = (await db.execute(_OWNER, {"id": answer.id})).scalar_one_or_none()
            if someone is not None and someone != owner:
                raise ApprovalNotFound()
    for answer in answers:
        row = found.get(answer.id)
        if row is None or row.session_id != session_id:
            raise ApprovalNotPending(f"No held call {answer.id!r} in this session.")
        if row.state != "pending":
            raise ApprovalNotPending(f"{answer.id!r} was already answered ({row.state}).")
        if row.expired:
            raise ApprovalNotPending(f"{answer.id!r} has expired; ask again.")


@dataclass(frozen=True, slots=True)
class Taken:
    """A held call whose answer this request took: it is this request's to run or deny."""

    approval_id: str
    message_id: uuid.UUID
    tool_call_id: str
    name: str
    arguments: dict[str, Any]
    summary: str


async def take(
    db: AsyncConnection,
    *,
    owner: str,
    session_id: uuid.UUID,
    approval_id: str,
    state: str,
    reason: str | None,
) -> Taken | None:
    """Answer a pending approval (`approved`, `denied` or `expired`); None when it was not
    pending any more (another answer took it) or has expired."""
    row = (
        await db.execute(
            _TAKE,
            {
                "id": approval_id,
                "owner": owner,
                "session": session_id,
                "state": state,
                "reason": reason,
            },
        )
    ).one_or_none()
    if row is None:
        return None
    return Taken(
        approval_id, row.message_id, row.tool_call_id, row.name, dict(row.arguments), row.summary
    )


async def settle(
    db: AsyncConnection,
    *,
    session_id: uuid.UUID,
    taken: Taken,
    result: dict[str, Any],
    approval: dict[str, Any],
) -> None:
    await db.execute(
        _SETTLE,
        {
            "message": taken.message_id,
            "session": session_id,
            "call": taken.tool_call_id,
            "result": result,
            "approval": approval,
        },
    )


@dataclass(frozen=True, slots=True)
class HeldCall:
    """What the person was asked about a held call, and the call as it was stored."""

    summary: str
    arguments: dict[str, Any]


async def held_calls(
    db: AsyncConnection, *, owner: str, ids: Collection[str]
) -> dict[str, HeldCall]:
    """The held calls of these approval ids (answered or not), by approval id."""
    if not ids:
        return {}
    rows = (await db.execute(_HELD_CALLS, {"ids": list(ids), "owner": owner})).all()
    return {row.id: HeldCall(row.summary, dict(row.arguments)) for row in rows}


def denied(taken: Taken, reason: str | None) -> dict[str, Any]:
    """What the agent is told of a call the person said no to."""
    return {
        "status": DENIED,
        "summary": taken.summary,
        "reason": reason or "The person said no.",
        "note": "Nothing was changed. Do not try this again unless the person asks for it.",
    }


def expired(taken: Taken) -> dict[str, Any]:
    return {
        "status": EXPIRED,
        "summary": taken.summary,
        "note": "The person did not answer in time; nothing was changed. Ask again if needed.",
    }


# A plain message answering held calls: these approve, these deny; anything else denies
# them and is answered as itself.
_YES = re.compile(
    r"(?:yes|yeah|yep|yup|y|ok|okay|sure|do it|go ahead|go for it|approve|approved|confirm"
    r"|confirmed|please do|yes please|yes,? do it|sounds good|fine|right|correct)",
    re.IGNORECASE,
)
_NO = re.compile(
    r"(?:no|nope|nah|n|cancel|don'?t|do not|stop|deny|denied|no thanks|no,? don'?t"
    r"|never ?mind|keep (?:it|them)|leave (?:it|them))",
    re.IGNORECASE,
)


def plain_answer(message: str | None) -> bool | None:
    """True for a plain yes, False for a plain no, None for any other message."""
    if message is None:
        return None
    words = " ".join(message.strip().rstrip(".!").split())
    if _YES.fullmatch(words):
        return True
    if _NO.fullmatch(words):
        return False
    return None


def approval_id(record: Mapping[str, Any]) -> str | None:
    """The approval a recorded call was held for, pending or answered; None: not held."""
    answer = record.get("approval")
    if isinstance(answer, dict):
        return str(answer["id"])
    result = record.get("result")
    if isinstance(result, dict) and result.get("status") == PENDING:
        return str(result["approval_id"])
    return None


def question(summaries: Sequence[str]) -> str:
    """The turn's last words when it held calls: what it would do, and how to answer."""
    if len(summaries) == 1:
        return f"{summaries[0]}? Reply yes to go ahead, or no to leave it."
    lines = "\n".join(f"- {summary}" for summary in summaries)
    return f"I need your OK first:\n{lines}\nReply yes to go ahead, or no to leave them."
