"""The trash: deleted tasks, restorable until purged (by hand, or after TRASH_RETENTION_D)."""

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from backend.deps import CurrentUser, DbSession
from backend.models.errors import API_ERRORS, error_responses
from backend.models.task import TrashPublic
from backend.routers.tasks import TaskId
from backend.services import tasks
from backend.services.tasks import TaskRef

router = APIRouter(prefix="/api/{user_id}/trash", tags=["trash"], responses=API_ERRORS)
Cursor = Annotated[str | None, Query(max_length=512, description="next_cursor of the last page")]


@router.get("", operation_id="listTrash")
async def list_trash(
    user: CurrentUser,
    db: DbSession,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Cursor = None,
) -> TrashPublic:
    """The deleted tasks that can be restored, most recently deleted first."""
    return await tasks.list_trash(db=db, user=user.user_id, limit=limit, cursor=cursor)


@router.delete(
    "/{task_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="purgeTask",
    responses=error_responses(409),
)
async def purge_task(user: CurrentUser, db: DbSession, task_id: TaskId) -> Response:
    """Delete a task in the trash for good, with its steps (409 if it is not in the trash)."""
    await tasks.purge_task(db=db, user=user.user_id, ref=TaskRef.parse(task_id))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.delete("", status_code=status.HTTP_204_NO_CONTENT, operation_id="emptyTrash")
async def empty_trash(user: CurrentUser, db: DbSession) -> Response:
    """Delete everything in the trash for good."""
    await tasks.empty_trash(db=db, user=user.user_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
