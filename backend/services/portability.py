"""A person's data, to take away and to bring: the export document (`todo-agent-export/1`)
written as a stream, and read back into an account as new rows.

**Export** is about the user: their settings (never the calendar secret nor its hash), the
lists they own with every task in them (whoever made it; steps under their parent, the
trash included), the lists others share with them as a name and a role only (those tasks
are the owner's), every session with each message, tool call and result, held call, undo
record and its digest (with the last message it holds), and the memories. Nothing names
another person: no member lists, no `created_by` or `assignee_id`. It runs in one read-only
snapshot (`Database.snapshot`), each part read through a server-side cursor, each row
turned into JSON by PostgreSQL and passed on as text, in chunks of CHUNK bytes: what the
process holds at any moment is a chunk and a cursor's batch, whatever the size of the
account.

**Import** adds what a document holds as new rows in the caller's one transaction: its own
lists (the Inbox's tasks go to the account's Inbox; a name the account has already gets a
number), tasks in the document's order (so new numbers follow it), steps under their new
parents, the trash as trash, repetition and reminders as they were (a reminder whose time
passed before the import is marked fired: it does not fire late), and sessions with their
messages, held calls and digest (a held call still waiting is imported as expired: it can
no longer run), and the memories. Settings the account has not chosen are taken from the
document. Anything the database refuses refuses the whole document (InvalidImport, 422)."""

import copy
import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, insert, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import InvalidImport, NotFound
from backend.models.approval import Approval
from backend.models.list import ListMember, TodoList
from backend.models.memory import Memory
from backend.models.portability import (
    FORMAT,
    ExportDocument,
    ExportedDocument,
    ExportList,
    ExportMemory,
    ExportSession,
    ExportStep,
    ImportResult,
)
from backend.models.session import AgentMessage, AgentSession
from backend.models.task import Task
from backend.models.user import User
from backend.services import access, approvals, lists, recurrence
from backend.services.documents import reading
from backend.services.documents import store as documents
from backend.settings import Settings

CHUNK = 64 * 1024
_ROWS_PER_FETCH = 500
_SESSIONS_PER_PAGE = 100
_NEVER = datetime(1, 1, 2, tzinfo=UTC)

# -- export: each row as PostgreSQL writes it in JSON -----------------------------------

_HEAD = text(
    """
    SELECT to_json(now())::text,
           json_build_object(
               'id', id, 'email', email, 'name', name, 'display_name', display_name,
               'timezone', timezone, 'instructions', instructions, 'model', model,
               'confirm', confirm, 'created_at', created_at,
               -- where notifications go, without what is a capability (push endpoints,
               -- the ntfy topic URL) or a secret (a pending code)
               'notifications', (SELECT json_build_object(
                   'email', n.email_address, 'email_verified', n.email_verified,
                   'reminders', n.reminder_channels,
                   'digest', json_build_object('at', to_char(n.digest_at, 'HH24:MI'),
                                               'channels', n.digest_channels),
                   'quiet_hours', CASE WHEN n.quiet_start IS NOT NULL THEN json_build_object(
                       'start', to_char(n.quiet_start, 'HH24:MI'),
                       'end', to_char(n.quiet_end, 'HH24:MI')) END)
                   FROM notification_settings n WHERE n.user_id = users.id))::text,
           EXISTS (SELECT FROM approvals WHERE user_id = :me),
           EXISTS (SELECT FROM task_changes WHERE user_id = :me)
    FROM users WHERE id = :me
    """
)
_OWNED_LISTS = text(
    """
    SELECT json_build_object(
        'id', id, 'name', name, 'role', 'owner', 'inbox', inbox, 'created_at', created_at,
        'updated_at', updated_at)::text
    FROM lists WHERE owner_id = :me ORDER BY inbox DESC, created_at, id
    """
)
_SHARED_LISTS = text(
    """
    SELECT json_build_object('id', l.id, 'name', l.name, 'role', m.role,
                             'joined_at', m.joined_at)::text
    FROM list_members m JOIN lists l ON l.id = m.list_id
    WHERE m.user_id = :me AND l.owner_id <> :me ORDER BY m.joined_at, l.id
    """
)
# Top-level tasks in the user's number order, each followed by its steps (in theirs).
_TASKS = text(
    """
    SELECT t.parent_id IS NULL, json_build_object(
        'id', t.id, 'list_id', t.list_id, 'number', n.number, 'title', t.title,
        'description', t.description, 'priority', t.priority, 'tags', t.tags,
        'completed', t.completed, 'completed_at', t.completed_at, 'due_at', t.due_at,
        'created_at', t.created_at, 'updated_at', t.updated_at,
        'recurrence', t.recurrence, 'recurrence_text', t.recurrence_text,
        'series_id', t.series_id, 'series_start', t.series_start,
        'previous_id', t.previous_id, 'remind_at', t.remind_at,
        'reminded_at', t.reminded_at, 'deleted_at', t.deleted_at)::text
    FROM tasks t
    LEFT JOIN task_numbers n ON n.task_id = t.id AND n.user_id = :me
    LEFT JOIN task_numbers p ON p.task_id = t.parent_id AND p.user_id = :me
    WHERE t.list_id IN (SELECT id FROM lists WHERE owner_id = :me)
    ORDER BY COALESCE(p.number, n.number), COALESCE(t.parent_id, t.id), t.parent_id IS NOT NULL,
             n.number, t.created_at, t.id
    """
)
_DOCUMENTS = text(
    """
    SELECT json_build_object(
        'id', id, 'list_id', list_id, 'title', title, 'media_type', media_type, 'text', text,
        'created_at', created_at)::text
    FROM documents WHERE list_id IN (SELECT id FROM lists WHERE owner_id = :me)
    ORDER BY created_at, id
    """
)
_SESSIONS = text(
    """
    SELECT id, updated_at, json_build_object(
        'id', id, 'title', title, 'chat_id', chat_id, 'created_at', created_at,
        'updated_at', updated_at, 'usage', json_build_object(
            'prompt_tokens', prompt_tokens, 'completion_tokens', completion_tokens,
            'total_tokens', total_tokens, 'cached_tokens', cached_tokens),
        'digest', digest, 'digest_through', (
            SELECT m.id FROM agent_messages m
            WHERE m.session_id = agent_sessions.id AND m.seq = agent_sessions.digest_seq))::text
    FROM agent_sessions
    WHERE user_id = :me AND (updated_at, id) > (:after_at, :after_id)
    ORDER BY updated_at, id LIMIT :limit
    """
)
_MESSAGES = text(
    """
    SELECT json_build_object(
        'id', id, 'role', role, 'content', content, 'created_at', created_at,
        'tool_calls', tool_calls, 'tool_results', tool_results, 'using_stub', using_stub,
        'usage', CASE WHEN num_nonnulls(prompt_tokens, completion_tokens, cached_tokens) > 0
                 THEN json_build_object('prompt_tokens', prompt_tokens,
                                        'completion_tokens', completion_tokens,
                                        'cached_tokens', cached_tokens) END)::text
    FROM agent_messages WHERE session_id = :session ORDER BY seq
    """
)
_APPROVALS = text(
    """
    SELECT json_build_object(
        'id', id, 'message_id', message_id, 'tool_call_id', tool_call_id, 'name', name,
        'arguments', arguments, 'summary', summary, 'state', state, 'reason', reason,
        'created_at', created_at, 'expires_at', expires_at, 'answered_at', answered_at)::text
    FROM approvals WHERE session_id = :session ORDER BY created_at, id
    """
)
_MEMORIES = text(
    """
    SELECT json_build_object(
        'id', id, 'text', text, 'created_at', created_at, 'updated_at', updated_at,
        'created_by', created_by, 'source', CASE WHEN source_session_id IS NOT NULL THEN
            json_build_object('session_id', source_session_id,
                              'message_id', source_message_id) END)::text
    FROM memories WHERE user_id = :me ORDER BY created_at DESC, id DESC
    """
)
_CHANGES = text(
    """
    SELECT json_build_object(
        'message_id', message_id, 'task_id', task_id, 'action', action, 'before', before,
        'after', after, 'created_at', created_at, 'undone_at', undone_at)::text
    FROM task_changes WHERE session_id = :session ORDER BY id
    """
)


# An imported digest holds the messages up to the one it named: they are not sent again.
_FOLDED_THROUGH = text(
    "UPDATE agent_sessions SET digest_seq = (SELECT seq FROM agent_messages WHERE id = :message)"
    " WHERE id = :session"
)


class _Chunks:
    """Text gathered into chunks of about CHUNK bytes."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._size = 0

    def add(self, piece: str) -> bool:
        """Add a piece; True when a chunk is ready to `take`."""
        self._parts.append(piece)
        self._size += len(piece)
        return self._size >= CHUNK

    def take(self) -> bytes:
        chunk = "".join(self._parts).encode()
        self._parts, self._size = [], 0
        return chunk


async def export(db: AsyncConnection, *, user: str) -> AsyncIterator[bytes]:
    """The user's export document, in chunks, read in `db` (a snapshot acting as the user,
    open until the last chunk is taken). The user is looked up before this returns: no
    such user is NotFound, not a broken document."""
    head = (await db.execute(_HEAD, {"me": user})).one_or_none()
    if head is None:
        raise NotFound("No such user.")
    return _document(db, user, *head)


async def _document(
    db: AsyncConnection,
    user: str,
    exported_at: str,
    user_json: str,
    any_approvals: bool,
    any_changes: bool,
) -> AsyncIterator[bytes]:
    me = {"me": user}
    out = _Chunks()
    out.add(f'{{"format":"{FORMAT}","exported_at":{exported_at},"user":{user_json},"lists":[')
    first = True
    for statement in (_OWNED_LISTS, _SHARED_LISTS):
        async for value in _values(db, statement, me):
            if out.add(value if first else "," + value):
                yield out.take()
            first = False
    out.add('],"tasks":[')
    first, open_steps = True, False
    async for top, value in _rows(db, _TASKS, me):
        if top or not open_steps:  # a step always follows its parent; else shown as a task
            piece = ("]}," if open_steps else "" if first else ",") + value[:-1] + ',"steps":['
            first_step, open_steps = True, True
        else:
            piece = value if first_step else "," + value
            first_step = False
        first = False
        if out.add(piece):
            yield out.take()
    out.add(']}],"documents":[' if open_steps else '],"documents":[')
    first = True
    async for value in _values(db, _DOCUMENTS, me):
        if out.add(value if first else "," + value):
            yield out.take()
        first = False
    out.add('],"sessions":[')
    after: tuple[datetime, uuid.UUID] = (_NEVER, uuid.UUID(int=0))
    first = True
    while True:
        params = {"me": user, "after_at": after[0], "after_id": after[1]}
        page = (await db.execute(_SESSIONS, {**params, "limit": _SESSIONS_PER_PAGE})).all()
        for session_id, updated_at, value in page:
            out.add(("" if first else ",") + value[:-1] + ',"messages":[')
            first = False
            parts = [("messages", _MESSAGES, True), ("approvals", _APPROVALS, any_approvals),
                     ("changes", _CHANGES, any_changes)]  # fmt: skip
            for index, (name, statement, present) in enumerate(parts):
                if index:
                    out.add(f'],"{name}":[')
                if not present:
                    continue
                first_item = True
                async for item in _values(db, statement, {"session": session_id}):
                    if out.add(item if first_item else "," + item):
                        yield out.take()
                    first_item = False
            out.add("]}")
            after = (updated_at, session_id)
        if len(page) < _SESSIONS_PER_PAGE:
            break
    out.add('],"memories":[')
    first = True
    async for value in _values(db, _MEMORIES, me):
        if out.add(value if first else "," + value):
            yield out.take()
        first = False
    out.add("]}\n")
    yield out.take()


async def _rows(
    db: AsyncConnection, statement: Any, params: Mapping[str, Any]
) -> AsyncIterator[Any]:
    """The statement's rows through a server-side cursor, a batch at a time."""
    result = await db.stream(statement.execution_options(yield_per=_ROWS_PER_FETCH), params)
    async for row in result:
        yield row


async def _values(
    db: AsyncConnection, statement: Any, params: Mapping[str, Any]
) -> AsyncIterator[str]:
    async for row in _rows(db, statement, params):
        yield row[0]


# -- import ------------------------------------------------------------------------------


async def import_document(
    *, db: AsyncSession, user: str, document: ExportDocument, config: Settings
) -> ImportResult:
    """Add the document's lists, tasks and sessions to the user's account as new rows, in
    the caller's transaction; what the database refuses is InvalidImport (the caller's
    transaction rolls back: nothing is imported)."""
    try:
        list_ids = await _import_lists(db, user=user, items=document.lists)
        tasks = await _import_tasks(db, user=user, document=document, list_ids=list_ids)
        documents = await _import_documents(
            db, user=user, items=document.documents, list_ids=list_ids, config=config
        )
        messages = await _import_sessions(db, user=user, sessions=document.sessions)
        memories = await _import_memories(db, user=user, items=document.memories)
        await _fill_settings(db, user=user, document=document, config=config)
    except DBAPIError as refused:
        sqlstate = str(getattr(refused.orig, "sqlstate", ""))
        if not sqlstate.startswith(("22", "23")):  # not a refusal of the data
            raise
        constraint = getattr(refused.orig, "constraint_name", None)
        raise InvalidImport(
            "The document holds data that cannot be stored"
            + (f" ({constraint})" if constraint else "")
            + "; nothing was imported."
        ) from None
    owned = sum(1 for item in document.lists if item.role == "owner")
    return ImportResult(
        lists=owned,
        tasks=tasks,
        documents=documents,
        sessions=len(document.sessions),
        messages=messages,
        memories=memories,
    )


async def _import_lists(
    db: AsyncSession, *, user: str, items: list[ExportList]
) -> dict[uuid.UUID, uuid.UUID]:
    """The document's own lists as the user's (its Inbox is theirs); their new ids."""
    inbox = await access.inbox(db)
    names = select(col(TodoList.name)).where(col(TodoList.owner_id) == user)
    taken = {name.lower() for name in (await db.exec(names)).all()}
    new_ids: dict[uuid.UUID, uuid.UUID] = {}
    for item in items:
        if item.role != "owner":
            continue  # shared with them: membership comes by invitation only
        if item.inbox:
            new_ids[item.id] = inbox
            continue
        name = _free_name(item.name, taken)
        taken.add(name.lower())
        list_id = new_ids[item.id] = uuid.uuid4()
        created_at = item.created_at or datetime.now(UTC)
        await db.exec(
            insert(TodoList).values(
                id=list_id,
                owner_id=user,
                name=name,
                created_at=created_at,
                updated_at=item.updated_at or created_at,
            )
        )
        await db.exec(insert(ListMember).values(list_id=list_id, user_id=user, role="owner"))
        await lists.announce(db, list_id=list_id, kind="list.created")
    return new_ids


def _free_name(name: str, taken: set[str]) -> str:
    """`name`, or `name (2)`, `name (3)`... when the account has a list of that name."""
    candidate, number = name, 1
    while candidate.lower() in taken:
        number += 1
        suffix = f" ({number})"
        candidate = name[: 100 - len(suffix)] + suffix
    return candidate


async def _import_tasks(
    db: AsyncSession, *, user: str, document: ExportDocument, list_ids: dict[uuid.UUID, uuid.UUID]
) -> int:
    """Every task, then its steps, in the document's order (numbers follow it); the trash
    is put back in the trash after (each a task.created, then a task.deleted)."""
    now = datetime.now(UTC)
    new_ids = {item.id: uuid.uuid4() for task in document.tasks for item in (task, *task.steps)}
    series: dict[uuid.UUID, uuid.UUID] = {}
    rows: list[dict[str, Any]] = []
    trash: list[dict[str, Any]] = []
    for task in document.tasks:
        list_id = list_ids[task.list_id]
        for item, parent in ((task, None), *((step, new_ids[task.id]) for step in task.steps)):
            rows.append(_task_row(item, user, list_id, parent, new_ids, series, now))
            if item.deleted_at is not None:
                trash.append({"task": new_ids[item.id], "at": item.deleted_at})
    connection = await db.connection()
    if rows:
        await connection.execute(insert(Task), rows)
    if trash:
        trashed = (
            update(Task).where(col(Task.id) == bindparam("task")).values(deleted_at=bindparam("at"))
        )
        await connection.execute(trashed, trash)
    return len(rows)


def _task_row(
    item: ExportStep,
    user: str,
    list_id: uuid.UUID,
    parent_id: uuid.UUID | None,
    new_ids: Mapping[uuid.UUID, uuid.UUID],
    series: dict[uuid.UUID, uuid.UUID],
    now: datetime,
) -> dict[str, Any]:
    reminded_at = item.reminded_at
    if (
        item.remind_at is not None
        and reminded_at is None
        and item.remind_at <= now
        and not item.completed
        and item.deleted_at is None
    ):
        reminded_at = now  # came due before the import: marked fired, it does not fire late
    series_id = None
    if item.series_id is not None:
        series_id = series.setdefault(item.series_id, uuid.uuid4())
    elif item.recurrence is not None:
        series_id = uuid.uuid4()
    created_at = item.created_at or now
    return {
        "id": new_ids[item.id],
        "list_id": list_id,
        "created_by": user,
        "assignee_id": None,
        "parent_id": parent_id,
        "title": item.title,
        "description": item.description,
        "completed": item.completed,
        "completed_at": item.completed_at,
        "due_at": item.due_at,
        "priority": item.priority,
        "tags": item.tags,
        "created_at": created_at,
        "updated_at": item.updated_at or created_at,
        "recurrence": item.recurrence,
        "recurrence_text": recurrence.describe(item.recurrence) if item.recurrence else None,
        "series_id": series_id,
        "series_start": item.series_start or (item.due_at if item.recurrence else None),
        "previous_id": new_ids.get(item.previous_id) if item.previous_id else None,
        "remind_at": item.remind_at,
        "reminded_at": reminded_at,
        "deleted_at": None,
    }


async def _import_documents(
    db: AsyncSession,
    *,
    user: str,
    items: list[ExportedDocument],
    list_ids: dict[uuid.UUID, uuid.UUID],
    config: Settings,
) -> int:
    """Each document into its new list, cut into passages again; the owner's quota holds
    (DocumentTooLarge: nothing is imported). Their text is Markdown or plain text already
    (a file was read when it was uploaded), so it is cut here, not read again."""
    if not items:
        return 0
    sizes = [len(item.text.encode()) for item in items]
    await documents.within_quota(db, list_id=await access.inbox(db), adding=sum(sizes),
                                 settings=config)  # fmt: skip
    for item, size in zip(items, sizes, strict=True):
        await documents.insert_document(
            db, user=user, list_id=list_ids[item.list_id], title=item.title,
            reading=reading.of_text(item.text, item.media_type), size=size,
            created_at=item.created_at,
        )  # fmt: skip
    return len(items)


async def _import_sessions(db: AsyncSession, *, user: str, sessions: list[ExportSession]) -> int:
    """Sessions, their messages in order (new ids; their held calls' ids renewed in the
    tool results that name them) and their held calls. How many messages."""
    held = select(col(AgentSession.chat_id)).where(
        col(AgentSession.user_id) == user, col(AgentSession.chat_id).is_not(None)
    )
    chat_ids = set((await db.exec(held)).all())
    now = datetime.now(UTC)
    session_rows: list[dict[str, Any]] = []
    message_rows: list[dict[str, Any]] = []
    approval_rows: list[dict[str, Any]] = []
    folds: list[dict[str, Any]] = []  # a digest's last message, once it has its new seq
    for session in sessions:
        session_id = uuid.uuid4()
        chat_id = session.chat_id if session.chat_id not in chat_ids else None
        chat_ids.add(chat_id)
        usage = session.usage
        created_at = session.created_at or now
        session_rows.append(
            {
                "id": session_id,
                "user_id": user,
                "title": session.title,
                "chat_id": chat_id,
                "created_at": created_at,
                "updated_at": session.updated_at or created_at,
                "prompt_tokens": usage.prompt_tokens if usage else 0,
                "completion_tokens": usage.completion_tokens if usage else 0,
                "total_tokens": usage.total_tokens if usage else 0,
                "cached_tokens": usage.cached_tokens if usage else 0,
                "digest": session.digest,
            }
        )
        approval_ids = {approval.id: approvals.new_id() for approval in session.approvals}
        message_ids = {message.id: uuid.uuid4() for message in session.messages}
        if session.digest_through is not None:
            folds.append({"session": session_id, "message": message_ids[session.digest_through]})
        for message in session.messages:
            tokens = message.usage
            message_rows.append(
                {
                    "id": message_ids[message.id],
                    "session_id": session_id,
                    "user_id": user,
                    "role": message.role,
                    "content": message.content,
                    "tool_calls": message.tool_calls,
                    "tool_results": _renamed_approvals(message.tool_results, approval_ids),
                    "using_stub": message.using_stub,
                    "prompt_tokens": tokens.prompt_tokens if tokens else None,
                    "completion_tokens": tokens.completion_tokens if tokens else None,
                    "cached_tokens": tokens.cached_tokens if tokens else None,
                    "created_at": message.created_at,
                }
            )
        for approval in session.approvals:
            waiting = approval.state == "pending"
            approval_rows.append(
                {
                    "id": approval_ids[approval.id],
                    "user_id": user,
                    "session_id": session_id,
                    "message_id": message_ids[approval.message_id],
                    "tool_call_id": approval.tool_call_id,
                    "name": approval.name,
                    "arguments": approval.arguments,
                    "summary": approval.summary,
                    # One still waiting cannot run now: its tasks are not these.
                    "state": "expired" if waiting else approval.state,
                    "reason": approval.reason,
                    "created_at": approval.created_at,
                    "expires_at": min(approval.expires_at, now) if waiting else approval.expires_at,
                    "answered_at": approval.answered_at,
                }
            )
    connection = await db.connection()
    for table, rows in ((AgentSession, session_rows), (AgentMessage, message_rows),
                        (Approval, approval_rows)):  # fmt: skip
        if rows:
            await connection.execute(insert(table), rows)
    if folds:
        await connection.execute(_FOLDED_THROUGH, folds)
    return len(message_rows)


async def _import_memories(db: AsyncSession, *, user: str, items: list[ExportMemory]) -> int:
    """The memories, as the person's own, newest first as they were; no source: the turns
    that saved them are imported as new sessions."""
    rows = [
        {
            "id": uuid.uuid4(),
            "user_id": user,
            "text": item.text,
            "created_by": item.created_by,
            "created_at": item.created_at or datetime.now(UTC),
            "updated_at": item.updated_at or item.created_at or datetime.now(UTC),
        }
        for item in items
    ]
    if rows:
        await (await db.connection()).execute(insert(Memory), rows)
    return len(rows)


def _renamed_approvals(
    records: list[dict[str, Any]] | None, renamed: Mapping[str, str]
) -> list[dict[str, Any]] | None:
    """Tool results with the ids of held calls (`result.approval_id` while one waits,
    `approval.id` once answered) replaced by their new ones."""
    if not records or not renamed:
        return records
    records = copy.deepcopy(records)
    for record in records:
        for key, field in (("result", "approval_id"), ("approval", "id")):
            holder = record.get(key)
            if isinstance(holder, dict) and holder.get(field) in renamed:
                holder[field] = renamed[holder[field]]
    return records


async def _fill_settings(
    db: AsyncSession, *, user: str, document: ExportDocument, config: Settings
) -> None:
    """The document's settings, where the account has not chosen its own."""
    account = (await db.exec(select(User).where(col(User.id) == user))).one()
    given = document.user
    changes: dict[str, Any] = {}
    for name in ("display_name", "instructions", "confirm"):
        if getattr(account, name) is None and getattr(given, name) is not None:
            changes[name] = getattr(given, name)
    if account.model is None and given.model in config.allowed_models:
        changes["model"] = given.model
    if account.timezone == "UTC" and given.timezone is not None:
        changes["timezone"] = given.timezone
    if changes:
        await db.exec(update(User).where(col(User.id) == user).values(**changes))
