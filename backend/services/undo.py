"""Undo a chat turn: put back what its tool calls changed, from what was recorded when
they ran (the `tasks_record_change` trigger of migration 0006 writes each task's row as it
was before, in the transaction of the change, while `todo_agent.turn` names the turn), and
the memories it saved (each names the turn's message as its source).

A turn is undone whole or not at all: if any task it touched has changed since, from
anywhere, nothing is undone and the answer names that task (409). Undone, a turn is
marked so, and the next undo takes the turn before it. The undo itself is not recorded:
it is not a turn's change to be undone again.
"""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import NothingToUndo, SessionBusy, SessionNotFound, UndoConflict
from backend.models.change import UndoAction, UndoChange, UndoResult
from backend.services.memory import store as memories

_RECORD = text("SELECT set_config('todo_agent.turn', :turn, true)")
_SESSION = text(
    "SELECT lease_owner, lease_expires_at > now() AS leased FROM agent_sessions"
    " WHERE id = :session AND user_id = :owner FOR UPDATE"
)
# A turn that only purged from the trash changed nothing that can come back: not one to undo.
# A turn that saved a memory is one too (services/memory/store.py takes it back).
_LAST_TURN = text(
    "SELECT message_id FROM ("
    " (SELECT message_id, created_at FROM task_changes WHERE session_id = :session"
    "  AND undone_at IS NULL AND action <> 'purged' AND message_id IS DISTINCT FROM :besides"
    "  ORDER BY id DESC LIMIT 1)"
    " UNION ALL"
    " (SELECT source_message_id, created_at FROM memories WHERE source_session_id = :session"
    "  AND created_by <> 'user' AND source_message_id IS DISTINCT FROM :besides"
    "  ORDER BY created_at DESC LIMIT 1)"
    ") AS last ORDER BY created_at DESC LIMIT 1"
)
_CHANGES = text(
    "SELECT task_id, action, before, after FROM task_changes"
    " WHERE message_id = :message AND undone_at IS NULL ORDER BY id"
)
# The tasks as they are now, as the acting user sees them (their number; whether they may
# still change it: their role in its list may have changed since).
_TASKS_NOW = text(
    "SELECT t.id, n.number, t.title, t.completed, t.deleted_at IS NOT NULL AS trashed,"
    " task_state(t) AS state, t.list_id IN (SELECT todo_my_lists('editor')) AS writable"
    " FROM tasks t LEFT JOIN task_numbers n ON n.task_id = t.id AND n.user_id = :owner"
    " WHERE t.id = ANY(:ids) ORDER BY t.id FOR UPDATE OF t"
)
# A task the turn created goes to the trash; detached from the series it continued, so the
# occurrence before it can have its next one again.
_REMOVE = text(
    "UPDATE tasks SET deleted_at = now(), previous_id = NULL, updated_at = now()"
    " WHERE id = :id AND deleted_at IS NULL"
)
# Any other task gets back what it was before the turn (a reminder that has passed since
# meanwhile is not brought back to fire late).
_PUT_BACK = text(
    """
    UPDATE tasks t SET
        title = b.title, description = b.description, completed = b.completed,
        completed_at = b.completed_at, due_at = b.due_at, priority = b.priority,
        tags = b.tags, recurrence = b.recurrence, recurrence_text = b.recurrence_text,
        series_id = b.series_id, series_start = b.series_start,
        remind_at = CASE WHEN b.reminded_at IS NULL AND b.remind_at <= now() THEN NULL
                         ELSE b.remind_at END,
        reminded_at = b.reminded_at, deleted_at = b.deleted_at, updated_at = now()
    FROM jsonb_populate_record(NULL::tasks, :before) AS b
    WHERE t.id = :id
    """
).bindparams(bindparam("before", type_=JSONB))
_DONE = text(
    "UPDATE task_changes SET undone_at = now() WHERE message_id = :message AND undone_at IS NULL"
)


async def record_turn(db: AsyncConnection, *, session_id: uuid.UUID, message_id: uuid.UUID) -> None:
    """Record what this transaction changes as the turn's (see the module docstring)."""
    await db.execute(_RECORD, {"turn": f"{session_id}:{message_id}"})


@dataclass(slots=True)
class _Touched:
    """A task the turn changed: as it was before the turn (None: created by it), and as
    the turn left it (None: it purged it, for good)."""

    task_id: uuid.UUID
    before: dict[str, Any] | None
    after: dict[str, Any] | None


async def undo_last_turn(
    *,
    db: AsyncSession,
    owner: str,
    session_id: uuid.UUID,
    turn_id: uuid.UUID | None = None,
    besides: uuid.UUID | None = None,
) -> UndoResult:
    """Undo the session's most recent turn that changed tasks and is not undone yet. A
    session another turn holds is busy (409), unless that turn is `turn_id`: the one
    asking, through its tool, whose own changes (its message `besides`) are not the ones
    to undo."""
    connection = await db.connection()
    await connection.execute(_RECORD, {"turn": ""})
    row = (
        await connection.execute(_SESSION, {"session": session_id, "owner": owner})
    ).one_or_none()
    if row is None:
        raise SessionNotFound()
    if row.leased and row.lease_owner != turn_id:
        raise SessionBusy()
    message_id = (
        await connection.execute(_LAST_TURN, {"session": session_id, "besides": besides})
    ).scalar_one_or_none()
    if message_id is None:
        raise NothingToUndo()
    everything = _touched((await connection.execute(_CHANGES, {"message": message_id})).all())
    touched = [t for t in everything if t.after is not None]
    gone = [t for t in everything if t.after is None]  # the turn purged them: for good
    ids = [t.task_id for t in touched]
    found = await connection.execute(_TASKS_NOW, {"ids": ids, "owner": owner})
    now = {task.id: task for task in found.all()}
    for task in touched:
        _check_unchanged(task, now.get(task.task_id))
    changes = []
    for task in reversed(touched):
        current = now[task.task_id]
        if task.before is None:
            await connection.execute(_REMOVE, {"id": task.task_id})
        else:
            await connection.execute(_PUT_BACK, {"id": task.task_id, "before": task.before})
        changes.append(
            UndoChange(
                task_id=task.task_id,
                number=current.number,
                title=(task.before or {}).get("title") or current.title,  # as it is now again
                action=_action(task, current),
            )
        )
    await connection.execute(_DONE, {"message": message_id})
    changes.reverse()
    lost = [str((t.before or {}).get("title") or "") for t in gone]
    forgotten = await memories.undo_turn(connection, message_id=message_id)
    said = summary(changes, lost, forgotten)
    return UndoResult(message_id=message_id, changes=changes, summary=said)


def _touched(rows: Sequence[Any]) -> list[_Touched]:
    """Each task once, in the order the turn first changed it: its state before its first
    change and after its last."""
    by_task: dict[uuid.UUID, _Touched] = {}
    for task_id, action, before, after in rows:
        seen = by_task.get(task_id)
        if seen is None:
            by_task[task_id] = _Touched(task_id, None if action == "created" else before, after)
        else:
            seen.after = after
    return list(by_task.values())


def _check_unchanged(task: _Touched, current: Any) -> None:
    before = task.before or {}
    if current is None:
        title = (task.after or before).get("title", "")
        raise UndoConflict(
            f"Task “{title}” has been deleted for good since (or you can no longer reach "
            "it), so nothing was undone."
        )
    if not current.writable:
        raise UndoConflict(
            f"You can no longer change task {current.number} “{current.title}”, so nothing "
            "was undone."
        )
    if current.state != task.after:
        raise UndoConflict(
            f"Task {current.number} “{current.title}” has changed since, so nothing was "
            "undone; change it back yourself, or undo the later change first."
        )


def _action(task: _Touched, current: Any) -> UndoAction:
    """What undoing did to the task, in the words of the answer."""
    before = task.before
    if before is None:
        return "removed"
    if current.trashed and before.get("deleted_at") is None:
        return "restored"
    if not current.trashed and before.get("deleted_at") is not None:
        return "deleted"
    if current.completed and not before.get("completed"):
        return "reopened"
    if not current.completed and before.get("completed"):
        return "completed"
    return "reverted"


_VERBS: dict[UndoAction, str] = {
    "removed": "removed task {n} “{t}” (to the trash)",
    "restored": "brought back task {n} “{t}”",
    "deleted": "put task {n} “{t}” back in the trash",
    "reopened": "reopened task {n} “{t}”",
    "completed": "marked task {n} “{t}” done again",
    "reverted": "put task {n} “{t}” back as it was",
}


def summary(
    changes: list[UndoChange], lost: Sequence[str] = (), forgotten: Sequence[str] = ()
) -> str:
    """The undo in one sentence: "Undone: removed task 5 “Milk” (to the trash); ...", and
    what that turn deleted for good, which cannot come back."""
    done = "; ".join(
        [_VERBS[c.action].format(n=c.number, t=c.title) for c in changes]
        + [f"forgot “{text}”" for text in forgotten]
    )
    said = f"Undone: {done}." if done else "Nothing of that turn could be taken back."
    if lost:
        said += " Deleted for good, and not coming back: " + ", ".join(f"“{t}”" for t in lost)
        said += "."
    return said
