"""Past conversations: list, read, rename, delete."""

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response, status

from backend.deps import CurrentUser, DbSession
from backend.models.change import UndoResult
from backend.models.errors import API_ERRORS, error_responses
from backend.models.session import (
    MessagesPublic,
    SessionDetail,
    SessionPublic,
    SessionsPublic,
    SessionUpdate,
)
from backend.models.ui import UIMessagePublic
from backend.services import sessions, ui_stream, undo

router = APIRouter(prefix="/api/{user_id}/sessions", tags=["sessions"], responses=API_ERRORS)
Cursor = Annotated[str | None, Query(max_length=512, description="next_cursor of the last page")]


@router.get("", operation_id="listSessions")
async def list_sessions(
    user: CurrentUser,
    db: DbSession,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Cursor = None,
) -> SessionsPublic:
    """The user's sessions, most recently active first."""
    return await sessions.list_sessions(db=db, owner=user.user_id, limit=limit, cursor=cursor)


@router.get("/{session_id}", operation_id="getSession")
async def get_session(user: CurrentUser, db: DbSession, session_id: uuid.UUID) -> SessionDetail:
    """One session, with its token usage and the digest of its older messages."""
    session = await sessions.get_session(db=db, owner=user.user_id, session_id=session_id)
    return sessions.to_detail(session)


@router.get(
    "/{session_id}/messages",
    operation_id="listSessionMessages",
    response_model=MessagesPublic | list[UIMessagePublic],
)
async def list_messages(
    user: CurrentUser,
    db: DbSession,
    session_id: uuid.UUID,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Cursor = None,
    message_format: Annotated[
        Literal["api", "ui"],
        Query(alias="format", description="`ui`: the messages as AI SDK UIMessages (a list)"),
    ] = "api",
) -> MessagesPublic | list[UIMessagePublic]:
    """The latest messages in chronological order; `next_cursor` pages to older ones."""
    if message_format == "ui":
        return await ui_stream.history(
            db=db, owner=user.user_id, session_id=session_id, limit=limit, cursor=cursor
        )
    return await sessions.list_messages(
        db=db, owner=user.user_id, session_id=session_id, limit=limit, cursor=cursor
    )


@router.patch("/{session_id}", operation_id="renameSession")
async def rename_session(
    user: CurrentUser, db: DbSession, session_id: uuid.UUID, data: SessionUpdate
) -> SessionPublic:
    """Rename a session."""
    session = await sessions.rename_session(
        db=db, owner=user.user_id, session_id=session_id, title=data.title
    )
    return sessions.to_public(session)


@router.delete(
    "/{session_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="deleteSession",
    responses=error_responses(409),
)
async def delete_session(user: CurrentUser, db: DbSession, session_id: uuid.UUID) -> Response:
    """Delete a session and its messages."""
    await sessions.delete_session(db=db, owner=user.user_id, session_id=session_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{session_id}/undo",
    operation_id="undoTurn",
    responses=error_responses(409),
)
async def undo_turn(user: CurrentUser, db: DbSession, session_id: uuid.UUID) -> UndoResult:
    """Take back the session's most recent turn that changed tasks (and is not undone yet),
    all of it at once; again, the turn before that. 409 when a task it changed has changed
    since (nothing is undone), or when there is nothing left to undo."""
    return await undo.undo_last_turn(db=db, owner=user.user_id, session_id=session_id)
