"""Past sessions and their messages, for the frontend: always the owner's, newest first."""

import uuid

from sqlalchemy import delete, func, or_, tuple_, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import SessionBusy, SessionNotFound
from backend.models.session import (
    AgentMessage,
    AgentSession,
    MessagePublic,
    MessagesPublic,
    SessionDetail,
    SessionPublic,
    SessionsPublic,
    Usage,
)
from backend.services import cursors


def to_public(session: AgentSession) -> SessionPublic:
    return SessionPublic(
        id=session.id,
        title=session.title,
        created_at=session.created_at,
        updated_at=session.updated_at,
        usage=Usage(
            prompt_tokens=session.prompt_tokens,
            completion_tokens=session.completion_tokens,
            total_tokens=session.total_tokens,
            cached_tokens=session.cached_tokens,
        ),
    )


def to_detail(session: AgentSession) -> SessionDetail:
    return SessionDetail(**to_public(session).model_dump(), digest=session.digest)


async def list_sessions(
    *, db: AsyncSession, owner: str, limit: int, cursor: str | None
) -> SessionsPublic:
    """Most recently active first; the cursor is the (updated_at, id) of the last row seen."""
    statement = select(AgentSession).where(col(AgentSession.user_id) == owner)
    if cursor:
        after = cursors.decode_position(cursor)
        statement = statement.where(
            tuple_(col(AgentSession.updated_at), col(AgentSession.id)) < tuple_(*after)
        )
    statement = statement.order_by(
        col(AgentSession.updated_at).desc(), col(AgentSession.id).desc()
    ).limit(limit + 1)
    rows = list((await db.exec(statement)).all())
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        next_cursor = cursors.encode_position(last.updated_at, last.id)
    return SessionsPublic(data=[to_public(row) for row in rows], next_cursor=next_cursor)


async def get_session(*, db: AsyncSession, owner: str, session_id: uuid.UUID) -> AgentSession:
    statement = select(AgentSession).where(
        col(AgentSession.id) == session_id, col(AgentSession.user_id) == owner
    )
    session = (await db.exec(statement)).one_or_none()
    if session is None:
        raise SessionNotFound()
    return session


async def rename_session(
    *, db: AsyncSession, owner: str, session_id: uuid.UUID, title: str
) -> AgentSession:
    statement = (
        update(AgentSession)
        .where(col(AgentSession.id) == session_id, col(AgentSession.user_id) == owner)
        .values(title=title)
        .returning(AgentSession)
    )
    session = (await db.exec(statement)).scalars().one_or_none()
    if session is None:
        raise SessionNotFound()
    return session  # type: ignore[no-any-return]


async def delete_session(*, db: AsyncSession, owner: str, session_id: uuid.UUID) -> None:
    """Delete a session and (by cascade) its messages; not while a turn is running in it."""
    free = or_(
        col(AgentSession.lease_expires_at).is_(None),
        col(AgentSession.lease_expires_at) < func.now(),
    )
    statement = (
        delete(AgentSession)
        .where(col(AgentSession.id) == session_id, col(AgentSession.user_id) == owner, free)
        .returning(col(AgentSession.id))
    )
    if (await db.exec(statement)).first() is None:
        await get_session(db=db, owner=owner, session_id=session_id)  # 404 if not theirs
        raise SessionBusy("This session is answering a message; delete it when it is done.")


async def list_messages(
    *, db: AsyncSession, owner: str, session_id: uuid.UUID, limit: int, cursor: str | None
) -> MessagesPublic:
    """The latest `limit` messages in chronological order; the cursor pages to older ones."""
    rows, next_cursor = await latest_messages(
        db=db, owner=owner, session_id=session_id, limit=limit, cursor=cursor
    )
    return MessagesPublic(data=[_message(row) for row in rows], next_cursor=next_cursor)


async def latest_messages(
    *, db: AsyncSession, owner: str, session_id: uuid.UUID, limit: int, cursor: str | None
) -> tuple[list[AgentMessage], str | None]:
    """The rows of `list_messages`, and the cursor to older ones (None: there are none)."""
    await get_session(db=db, owner=owner, session_id=session_id)
    statement = select(AgentMessage).where(
        col(AgentMessage.session_id) == session_id, col(AgentMessage.user_id) == owner
    )
    if cursor:
        before = cursors.decode(cursor)
        if not isinstance(before, int) or isinstance(before, bool):
            raise cursors.InvalidCursor()
        statement = statement.where(col(AgentMessage.seq) < before)
    statement = statement.order_by(col(AgentMessage.seq).desc()).limit(limit + 1)
    rows = list((await db.exec(statement)).all())
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = cursors.encode(rows[-1].seq)
    rows.reverse()
    return rows, next_cursor


def stored_usage(row: AgentMessage) -> Usage | None:
    """The tokens a stored answer cost, as the chat answer reported them (None: none recorded)."""
    if row.prompt_tokens is None and row.completion_tokens is None:
        return None
    prompt, completion = row.prompt_tokens or 0, row.completion_tokens or 0
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        cached_tokens=row.cached_tokens or 0,
    )


def _message(row: AgentMessage) -> MessagePublic:
    usage = stored_usage(row)
    return MessagePublic(
        id=row.id,
        role=row.role,  # type: ignore[arg-type]
        content=row.content,
        created_at=row.created_at,
        tool_calls=row.tool_calls or [],
        tool_results=row.tool_results or [],
        using_stub=row.using_stub,
        usage=usage,
    )
