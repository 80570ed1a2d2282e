"""Task logic: every query is scoped to the owner; another user's task is simply not found."""

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import ColumnElement, case, delete, func, or_, update
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import TaskNotFound
from backend.models.task import (
    Task,
    TaskCreate,
    TaskFilters,
    TaskPublic,
    TasksPublic,
    TaskUpdate,
)
from backend.models.user import User
from backend.services import idempotency

_TASK_REF = re.compile(r"^\s*(?:task\s*)?#?\s*(\d{1,9})\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class TaskRef:
    """A user's way to name a task: its per-user number or its UUID."""

    number: int | None = None
    id: uuid.UUID | None = None

    @classmethod
    def parse(cls, value: str | int) -> "TaskRef":
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(number=value)
        if isinstance(value, str):
            if match := _TASK_REF.match(value):
                return cls(number=int(match.group(1)))
            try:
                return cls(id=uuid.UUID(value.strip()))
            except ValueError:
                pass
        raise TaskNotFound(f"No task {value!r}; use its number (like 3 or #3) or its id.")

    def where(self) -> Any:
        if self.id is not None:
            return col(Task.id) == self.id
        return col(Task.number) == self.number


def resolve_due_at(value: datetime | date | None, tz: ZoneInfo) -> datetime | None:
    """A date means by the end of that day; a naive date-time is read in the user's zone."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        value = datetime.combine(value, time(23, 59, 59))
    if value.tzinfo is None:
        value = value.replace(tzinfo=tz)
    return value.astimezone(UTC)


def start_of_day(tz: ZoneInfo, now: datetime | None = None) -> datetime:
    local = (now or datetime.now(UTC)).astimezone(tz)
    return datetime.combine(local.date(), time(), tzinfo=tz)


async def _zone(*, db: AsyncSession, owner: str, tz: ZoneInfo | None, needed: bool) -> ZoneInfo:
    """The zone to read dates in: the caller's, else the user's stored one (looked up only
    when a date actually needs reading), else UTC."""
    if tz is not None or not needed:
        return tz or ZoneInfo("UTC")
    name = (await db.exec(select(col(User.timezone)).where(col(User.id) == owner))).one_or_none()
    return ZoneInfo(name or "UTC")


async def create_task(
    *, db: AsyncSession, owner: str, data: TaskCreate, tz: ZoneInfo | None = None
) -> Task:
    """Insert with the owner's next number, allocated in the same statement: the counter row
    is locked until commit, so concurrent creates get distinct numbers, never reused."""
    tz = await _zone(db=db, owner=owner, tz=tz, needed=data.due_at is not None)
    next_number = (
        update(User)
        .where(col(User.id) == owner)
        .values(task_seq=col(User.task_seq) + 1)
        .returning(col(User.task_seq))
        .cte("next_number")
    )
    statement = (
        insert(Task)
        .values(
            id=uuid.uuid4(),
            user_id=owner,
            number=select(next_number.c.task_seq).scalar_subquery(),
            title=data.title,
            description=data.description,
            due_at=resolve_due_at(data.due_at, tz),
            priority=data.priority,
            tags=data.tags,
            created_at=func.now(),
            updated_at=func.now(),
        )
        .add_cte(next_number)
        .returning(Task)
    )
    return (await db.exec(statement)).scalars().one()  # type: ignore[no-any-return]


async def create_task_once(
    *, db: AsyncSession, owner: str, data: TaskCreate, key: str, ttl_s: float
) -> TaskPublic:
    """Create a task at most once per Idempotency-Key: a retry gets the first task back.
    The key is claimed and answered in this one transaction, so a concurrent retry waits
    for it and then replays."""
    fingerprint = idempotency.request_hash("tasks.create", data.model_dump(mode="json"))
    connection = await db.connection()
    replay = await idempotency.claim(
        connection, owner=owner, key=key, fingerprint=fingerprint, ttl_s=ttl_s, lock_s=ttl_s
    )
    if replay is not None:
        return TaskPublic.model_validate(replay.body)
    task = TaskPublic.model_validate(await create_task(db=db, owner=owner, data=data))
    await idempotency.store(
        connection, owner=owner, key=key, status_code=201, body=task.model_dump(mode="json")
    )
    return task


def _conditions(owner: str, filters: TaskFilters, tz: ZoneInfo) -> list[ColumnElement[bool]]:
    conditions = [col(Task.user_id) == owner]
    if filters.status != "all":
        conditions.append(col(Task.completed) == (filters.status == "completed"))
    if filters.q:
        pattern = "%" + re.sub(r"([\\%_])", r"\\\1", filters.q.strip()) + "%"
        conditions.append(or_(col(Task.title).ilike(pattern), col(Task.description).ilike(pattern)))
    if filters.priority:
        conditions.append(col(Task.priority) == filters.priority)
    if filters.tag:
        conditions.append(col(Task.tags).contains([filters.tag.strip().lower()]))
    if filters.due == "overdue":
        conditions += [col(Task.completed).is_(False), col(Task.due_at) < func.now()]
    elif filters.due in ("today", "week"):
        start = start_of_day(tz)
        end = start + timedelta(days=1 if filters.due == "today" else 7)
        conditions += [col(Task.due_at) >= start, col(Task.due_at) < end]
    return conditions


async def list_tasks(
    *, db: AsyncSession, owner: str, filters: TaskFilters, tz: ZoneInfo | None = None
) -> TasksPublic:
    """One page in task-number order, with the total count of matches."""
    tz = await _zone(db=db, owner=owner, tz=tz, needed=filters.due in ("today", "week"))
    conditions = _conditions(owner, filters, tz)
    page = (
        select(Task)
        .where(*conditions)
        .order_by(col(Task.number))
        .limit(filters.limit)
        .offset(filters.offset)
    )
    rows = list((await db.exec(page)).all())
    if filters.offset == 0 and len(rows) < filters.limit:
        total = len(rows)  # the whole result is on this page
    else:
        # A separate count can be answered from the index; counting in the page query
        # (count(*) OVER ()) would read every matching row before the LIMIT applies.
        total = (await db.exec(select(func.count()).where(*conditions))).one()
    return TasksPublic(data=[TaskPublic.model_validate(row) for row in rows], count=total)


async def task_counts(*, db: AsyncSession, owner: str) -> dict[str, int]:
    """How many of the user's tasks are pending, completed and overdue, in one query."""
    pending = col(Task.completed).is_(False)
    statement = select(
        func.count().filter(pending),
        func.count().filter(col(Task.completed)),
        func.count().filter(pending, col(Task.due_at) < func.now()),
    ).where(col(Task.user_id) == owner)
    row = (await db.exec(statement)).one()
    return {"pending": row[0], "completed": row[1], "overdue": row[2]}


async def get_task(*, db: AsyncSession, owner: str, ref: TaskRef) -> Task:
    statement = select(Task).where(col(Task.user_id) == owner, ref.where())
    task = (await db.exec(statement)).one_or_none()
    if task is None:
        raise TaskNotFound()
    return task


async def update_task(
    *, db: AsyncSession, owner: str, ref: TaskRef, data: TaskUpdate, tz: ZoneInfo | None = None
) -> Task:
    changes: dict[str, Any] = data.model_dump(exclude_unset=True)
    if "due_at" in changes:
        tz = await _zone(db=db, owner=owner, tz=tz, needed=data.due_at is not None)
        changes["due_at"] = resolve_due_at(data.due_at, tz)
    if "completed" in changes:
        changes.update(_completion(changes["completed"]))
    return await _update(db=db, owner=owner, ref=ref, changes=changes)


async def set_completed(
    *, db: AsyncSession, owner: str, ref: TaskRef, completed: bool | None
) -> Task:
    """Mark done or not done; `None` toggles."""
    return await _update(db=db, owner=owner, ref=ref, changes=_completion(completed))


def _completion(completed: bool | None) -> dict[str, Any]:
    """SET clauses for completing, reopening or (None) toggling; they read the old row."""
    was_done = col(Task.completed)
    if completed is None:
        return {
            "completed": ~was_done,
            "completed_at": case((was_done, None), else_=func.now()),
        }
    if completed:
        return {
            "completed": True,
            "completed_at": func.coalesce(col(Task.completed_at), func.now()),
        }
    return {"completed": False, "completed_at": None}


async def _update(*, db: AsyncSession, owner: str, ref: TaskRef, changes: dict[str, Any]) -> Task:
    statement = (
        update(Task)
        .where(col(Task.user_id) == owner, ref.where())
        .values(**changes, updated_at=func.now())
        .returning(Task)
    )
    task = (await db.exec(statement)).scalars().one_or_none()
    if task is None:
        raise TaskNotFound()
    return task  # type: ignore[no-any-return]


async def delete_task(*, db: AsyncSession, owner: str, ref: TaskRef) -> Task:
    statement = delete(Task).where(col(Task.user_id) == owner, ref.where()).returning(Task)
    task = (await db.exec(statement)).scalars().one_or_none()
    if task is None:
        raise TaskNotFound()
    return task  # type: ignore[no-any-return]
