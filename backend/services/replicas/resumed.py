"""What a lapsed attempt at a turn left to answer, read from the session as stored: the new
attempt (the one that takes it over) answers the same user message, goes on from the calls
that had committed (their results are in the conversation; they are not run again), and a
call held for the person's yes stays held."""

import uuid
from dataclasses import dataclass
from typing import Any

from backend.models.approval import PendingApproval
from backend.models.chat import ToolCallPublic, ToolResultPublic
from backend.services import approvals, turns


@dataclass(frozen=True)
class Left:
    """The lapsed attempt's unfinished answer."""

    rows: list[turns.HistoryRow]  # the session's latest messages, as stored
    message_id: uuid.UUID | None  # the user message it answers; None: none of its own
    message: str
    reply_id: uuid.UUID  # the reply's: the record its calls began, or a new one
    calls: list[ToolCallPublic]
    results: list[ToolResultPublic]  # those of the calls that ran (not the held ones)
    # What the lapsed attempt's calls did: the stub says so rather than act again.
    earlier_results: list[dict[str, Any]]
    pending: list[PendingApproval]


def left_to_answer(resumed: turns.Resumption | None) -> Left | None:
    """The session's last message is the user message the lapsed attempt answers, or the
    assistant record its calls began (after that message, or after an answer being
    regenerated). None: the last message is a reply, so the lapsed attempt stored no
    message of its own (regenerating, or answering held calls) and has nothing left that
    someone waits for."""
    if resumed is None or not resumed.stored:
        return None
    stored = resumed.stored
    last = stored[-1]
    record = last if last["role"] == "assistant" and last["content"] is None else None
    if last["role"] != "user" and record is None:
        return None
    asked = stored[-2] if record is not None and len(stored) > 1 else last
    question = asked if asked["role"] == "user" else None
    rows: list[turns.HistoryRow] = [
        (m["role"], m["content"], m["tool_calls"], m["tool_results"]) for m in stored
    ]
    recorded = (record or {}).get("tool_results") or ()
    held = [h for h in resumed.held if record is not None and h["message_id"] == record["id"]]
    return Left(
        rows=rows,
        message_id=uuid.UUID(question["id"]) if question is not None else None,
        message=(question or {}).get("content") or "",
        reply_id=uuid.UUID(record["id"]) if record is not None else uuid.uuid4(),
        calls=[ToolCallPublic.model_validate(c) for c in (record or {}).get("tool_calls") or ()],
        results=[
            ToolResultPublic.model_validate(r)
            for r in recorded
            if r["result"].get("status") != approvals.PENDING
        ],
        earlier_results=[r["result"] for r in recorded],
        pending=[PendingApproval.model_validate(h) for h in held],
    )
