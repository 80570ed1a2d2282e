"""The task list for the frontend: CRUD, filters, completion."""

from typing import Annotated

from fastapi import APIRouter, Body, Query, Response, status

from backend.deps import Context, CurrentUser, DbSession, IdempotencyKey
from backend.models.errors import API_ERRORS, error_responses
from backend.models.task import (
    TaskChanged,
    TaskCompletion,
    TaskCreate,
    TaskDetail,
    TaskFilters,
    TasksPublic,
    TaskUpdate,
)
from backend.services import tasks
from backend.services.idempotency import check_key
from backend.services.tasks import TaskRef

router = APIRouter(prefix="/api/{user_id}/tasks", tags=["tasks"], responses=API_ERRORS)
TaskId = Annotated[str, "The task's UUID or its per-user number"]


@router.get("", operation_id="listTasks")
async def list_tasks(
    user: CurrentUser, db: DbSession, filters: Annotated[TaskFilters, Query()]
) -> TasksPublic:
    """List the user's tasks in number order, filtered, with the total count and each
    task's progress through its steps."""
    return await tasks.list_tasks(db=db, user=user.user_id, filters=filters)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    operation_id="createTask",
    responses=error_responses(409),
)
async def create_task(
    user: CurrentUser,
    db: DbSession,
    context: Context,
    data: TaskCreate,
    idempotency_key: IdempotencyKey = None,
) -> TaskDetail:
    """Create a task (with `steps`, or as a step of `parent_id`); it gets the user's next
    task number."""
    if idempotency_key is not None:
        return await tasks.create_task_once(
            db=db,
            user=user.user_id,
            data=data,
            key=check_key(idempotency_key),
            ttl_s=context.settings.idempotency_ttl_s,
        )
    return await tasks.create_task(db=db, user=user.user_id, data=data)


@router.get("/{task_id}", operation_id="getTask")
async def get_task(user: CurrentUser, db: DbSession, task_id: TaskId) -> TaskDetail:
    """Get one task by UUID or number, with its steps in order."""
    return await tasks.get_task(db=db, user=user.user_id, ref=TaskRef.parse(task_id))


@router.patch("/{task_id}", operation_id="updateTask")
async def update_task(
    user: CurrentUser, db: DbSession, task_id: TaskId, data: TaskUpdate
) -> TaskChanged:
    """Change the fields sent; `null` clears an optional field. Completing an occurrence of
    a repeating task answers the next one as `next`."""
    return await tasks.update_task(db=db, user=user.user_id, ref=TaskRef.parse(task_id), data=data)


@router.put("/{task_id}", operation_id="replaceTask")
async def replace_task(
    user: CurrentUser, db: DbSession, task_id: TaskId, data: TaskUpdate
) -> TaskChanged:
    """Same as PATCH (kept for clients of the earlier API)."""
    return await update_task(user, db, task_id, data)


@router.patch("/{task_id}/complete", operation_id="completeTask")
async def complete_task(
    user: CurrentUser,
    db: DbSession,
    task_id: TaskId,
    data: Annotated[TaskCompletion | None, Body()] = None,
) -> TaskChanged:
    """Set `completed`, or toggle it when no body is sent. Steps are left as they are.
    Completing an occurrence of a repeating task creates the next one, answered as `next`."""
    return await tasks.set_completed(
        db=db,
        user=user.user_id,
        ref=TaskRef.parse(task_id),
        completed=data.completed if data else None,
    )


@router.delete("/{task_id}", status_code=status.HTTP_204_NO_CONTENT, operation_id="deleteTask")
async def delete_task(user: CurrentUser, db: DbSession, task_id: TaskId) -> Response:
    """Move a task and its steps to the trash (restorable until purged); its number stays
    its own."""
    await tasks.delete_task(db=db, user=user.user_id, ref=TaskRef.parse(task_id))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{task_id}/restore", operation_id="restoreTask", responses=error_responses(409))
async def restore_task(user: CurrentUser, db: DbSession, task_id: TaskId) -> TaskDetail:
    """Bring a task back from the trash, with its steps, its number and (if still ahead) its
    reminder; 409 if it is not in the trash."""
    return await tasks.restore_task(db=db, user=user.user_id, ref=TaskRef.parse(task_id))
