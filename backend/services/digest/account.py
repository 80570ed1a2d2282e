"""The service's own digest: what the folded messages asked and did, from their records.

Written without a model, so it exists whoever answered (the model, or the stub when there
is none or it fails): one line per request of the person's (their words, quoted) and per
change a tool call made (which task, by number and title). Reading calls (lists, searches)
changed nothing and are left out; so are the assistant's own words, which the records of
what it did say better. Every quoted text is a JSON string: data, never instructions.
"""

import json
from collections.abc import Sequence
from typing import Any

from backend.services.turns import HistoryRow

# How much of a request is kept, and how long the digest may grow: past it, its oldest
# lines go first (a fold adds at the end).
REQUEST_CHARS = 200
DIGEST_CHARS = 4000
DROPPED = "(older parts of this conversation are no longer in this digest)"

_DONE = {
    "created": "Added",
    "updated": "Changed",
    "completed": "Completed",
    "reopened": "Reopened",
    "deleted": "Deleted",
    "restored": "Restored",
    "purged": "Deleted for good",
}


def account(rows: Sequence[HistoryRow]) -> list[str]:
    """The digest's lines for these messages, oldest first."""
    lines: list[str] = []
    for role, content, calls, results in rows:
        if role == "user":
            if content and content.strip():
                lines.append(f"The person asked: {_quote(content, REQUEST_CHARS)}")
            continue
        by_id = {r.get("tool_call_id"): r.get("result") for r in results or ()}
        for call in calls or ():
            result = by_id.get(call.get("id"))
            if isinstance(result, dict) and (line := _done(result)):
                lines.append(line)
    return lines


def merged(digest: str | None, lines: Sequence[str], *, limit: int = DIGEST_CHARS) -> str | None:
    """The digest with `lines` added at its end, its oldest lines dropped past `limit`."""
    kept = [line for line in (digest or "").split("\n") if line and line != DROPPED]
    kept += lines
    dropped = False
    while kept and sum(len(line) + 1 for line in kept) > limit:
        kept.pop(0)
        dropped = True
    if not kept:
        return digest
    return "\n".join([DROPPED, *kept] if dropped or (digest or "").startswith(DROPPED) else kept)


def _done(result: dict[str, Any]) -> str | None:
    status = result.get("status")
    if status == "pending_approval":
        return f"Asked the person's yes to: {_quote(str(result.get('summary') or ''), 120)}"
    if status in ("denied", "expired"):
        why = "the person said no" if status == "denied" else "nobody answered"
        return f"Did not {_quote(str(result.get('summary') or ''), 120)}: {why}."
    if status == "undone":
        return f"Undid a turn: {_quote(str(result.get('summary') or ''), 120)}"
    verb = _DONE.get(str(status))
    if verb is None:
        return None
    todo = result.get("todo")
    named = todo if isinstance(todo, dict) else result
    if "number" not in named and "title" not in named:
        if isinstance(result.get("list"), dict):  # create_list
            return f"{verb} list {_quote(str(result['list'].get('name') or ''), 80)}."
        if "count" in result:  # empty_trash
            return f"{verb} {result['count']} tasks from the trash."
        return None
    number = named.get("number")
    title = _quote(str(named.get("title") or ""), 120)
    return f"{verb} task {number} {title}." if number is not None else f"{verb} task {title}."


def _quote(text: str, limit: int) -> str:
    line = " ".join(text.split())
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    return json.dumps(line, ensure_ascii=False)
