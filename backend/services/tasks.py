"""Task logic: every query is scoped to the owner; another user's task is simply not found.
A deleted task is in the trash (`deleted_at` set): out of every list, count and lookup here
but `restore_task` and `purge_task`, until it is restored or purged."""

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import (
    ColumnElement,
    FromClause,
    Label,
    Table,
    and_,
    case,
    delete,
    func,
    or_,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import InvalidSchedule, NotInTrash, StepsHaveNoSteps, TaskNotFound
from backend.models.task import (
    Task,
    TaskChanged,
    TaskCreate,
    TaskDetail,
    TaskFilters,
    TaskPublic,
    TasksPublic,
    TaskUpdate,
    TrashedTask,
    TrashPublic,
)
from backend.models.user import User
from backend.services import cursors, idempotency, recurrence

_TASK_REF = re.compile(r"^\s*(?:task\s*)?#?\s*(\d{1,9})\s*$", re.IGNORECASE)
_TASKS: Table = Task.__table__  # type: ignore[attr-defined]
# Other rows of the same table, in subqueries: a task's steps, a filter's parent.
_STEPS = _TASKS.alias("step")
_PARENT = _TASKS.alias("parent")
_LIVE = col(Task.deleted_at).is_(None)


@dataclass(frozen=True, slots=True)
class TaskRef:
    """A user's way to name a task: its per-user number or its UUID."""

    number: int | None = None
    id: uuid.UUID | None = None

    @classmethod
    def parse(cls, value: str | int | uuid.UUID) -> "TaskRef":
        if isinstance(value, uuid.UUID):
            return cls(id=value)
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

    def where(self, table: FromClause = _TASKS) -> ColumnElement[bool]:
        if self.id is not None:
            return table.c.id == self.id
        return table.c.number == self.number


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


def _progress() -> tuple[Label[int], Label[int]]:
    """The steps_done and steps_total of the task row of the enclosing statement (one index
    range each, on (user_id, parent_id))."""
    steps = (
        select(func.count())
        .select_from(_STEPS)
        .where(
            _STEPS.c.user_id == col(Task.user_id),
            _STEPS.c.parent_id == col(Task.id),
            _STEPS.c.deleted_at.is_(None),
        )
        .correlate(Task)
    )
    return (
        steps.where(_STEPS.c.completed).scalar_subquery().label("steps_done"),
        steps.scalar_subquery().label("steps_total"),
    )


def _public(row: Any) -> TaskPublic:
    """A (Task, steps_done, steps_total) row as the API shows it."""
    task, done, total = row
    return TaskPublic.model_validate(task, update={"steps_done": done, "steps_total": total})


async def create_task(
    *, db: AsyncSession, owner: str, data: TaskCreate, tz: ZoneInfo | None = None
) -> TaskDetail:
    """Create the task, and its steps after it, in the caller's transaction. A parent must
    be the owner's and not itself a step (404 / 422 before anything is written)."""
    parent_id = None
    if data.parent_id is not None:
        if data.steps:
            raise StepsHaveNoSteps("A step cannot have steps: give a parent or steps, not both.")
        parent_id = await _parent(db=db, owner=owner, ref=TaskRef.parse(data.parent_id))
    timed = data.due_at is not None or data.recurrence is not None or data.remind_at is not None
    tz = await _zone(db=db, owner=owner, tz=tz, needed=timed)
    due_at = resolve_due_at(data.due_at, tz)
    schedule: dict[str, Any] = {"due_at": due_at}
    if data.recurrence is not None:
        schedule = _repeating(data.recurrence, due_at=due_at, series_id=None, tz=tz)
    if data.remind_at is not None:
        schedule["remind_at"] = _reminder(data.remind_at, tz)
    task = await _insert(
        db=db,
        owner=owner,
        parent_id=parent_id,
        title=data.title,
        description=data.description,
        priority=data.priority,
        tags=data.tags,
        **schedule,
    )
    steps = [
        TaskPublic.model_validate(await _insert(db=db, owner=owner, parent_id=task.id, title=title))
        for title in data.steps
    ]
    return TaskDetail.model_validate(task, update={"steps": steps, "steps_total": len(steps)})


async def _parent(*, db: AsyncSession, owner: str, ref: TaskRef) -> uuid.UUID:
    """The id of the owner's top-level task `ref`, locked against deletion until commit."""
    statement = (
        select(col(Task.id), col(Task.number), col(Task.parent_id))
        .where(col(Task.user_id) == owner, ref.where(), _LIVE)
        .with_for_update(read=True, key_share=True)
    )
    row = (await db.exec(statement)).one_or_none()
    if row is None:
        raise TaskNotFound("Parent task not found.")
    parent_id, number, grandparent_id = row
    if grandparent_id is not None:
        raise StepsHaveNoSteps(f"Task {number} is a step; a step cannot have steps.")
    return parent_id


def _repeating(
    rule: str, *, due_at: datetime | None, series_id: uuid.UUID | None, tz: ZoneInfo
) -> dict[str, Any]:
    """The columns of a task that repeats by `rule`: with no due time it gets the rule's
    first occurrence on or after today; the rule is counted from its due time."""
    if due_at is None:
        due_at = recurrence.first_due(rule, tz=tz)
        if due_at is None:
            raise InvalidSchedule(f"recurrence: {rule} has no occurrence from today on.")
    elif not recurrence.occurs_from(rule, anchor=due_at, tz=tz):
        raise InvalidSchedule(f"recurrence: {rule} has no occurrence from the due date on.")
    return {
        "due_at": due_at,
        "recurrence": rule,
        "recurrence_text": recurrence.describe(rule),
        "series_id": series_id or uuid.uuid4(),
        "series_start": due_at,
    }


def _reminder(value: datetime, tz: ZoneInfo) -> datetime:
    """A reminder time as UTC (naive: in the user's zone); one in the past is refused."""
    remind_at = value if value.tzinfo is not None else value.replace(tzinfo=tz)
    if remind_at < datetime.now(UTC):
        raise InvalidSchedule("remind_at is in the past; give a time from now on.")
    return remind_at.astimezone(UTC)


async def _insert(
    *,
    db: AsyncSession,
    owner: str,
    parent_id: uuid.UUID | None,
    title: str,
    **fields: Any,
) -> Task:
    """Insert with the owner's next number, allocated in the same statement: the counter row
    is locked until commit, so concurrent creates get distinct numbers, never reused."""
    return (await db.exec(_insertion(owner, parent_id, title, **fields))).scalars().one()  # type: ignore[no-any-return]


def _insertion(owner: str, parent_id: uuid.UUID | None, title: str, **fields: Any) -> Any:
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
            parent_id=parent_id,
            title=title,
            created_at=func.now(),
            updated_at=func.now(),
            **fields,
        )
        .add_cte(next_number)
        .returning(Task)
    )
    return statement


async def create_task_once(
    *, db: AsyncSession, owner: str, data: TaskCreate, key: str, ttl_s: float
) -> TaskDetail:
    """Create a task at most once per Idempotency-Key: a retry gets the first task back.
    The key is claimed and answered in this one transaction, so a concurrent retry waits
    for it and then replays."""
    fingerprint = idempotency.request_hash("tasks.create", data.model_dump(mode="json"))
    connection = await db.connection()
    replay = await idempotency.claim(
        connection, owner=owner, key=key, fingerprint=fingerprint, ttl_s=ttl_s, lock_s=ttl_s
    )
    if replay is not None:
        return TaskDetail.model_validate(replay.body)
    task = await create_task(db=db, owner=owner, data=data)
    await idempotency.store(
        connection, owner=owner, key=key, status_code=201, body=task.model_dump(mode="json")
    )
    return task


def _conditions(owner: str, filters: TaskFilters, tz: ZoneInfo) -> list[ColumnElement[bool]]:
    conditions = [col(Task.user_id) == owner, _LIVE]
    if filters.parent is not None:
        # Another user's task as parent matches nothing, exactly like a missing one.
        parent = TaskRef.parse(filters.parent).where(_PARENT)
        parent_id = select(_PARENT.c.id).where(
            _PARENT.c.user_id == owner, parent, _PARENT.c.deleted_at.is_(None)
        )
        conditions.append(col(Task.parent_id) == parent_id.scalar_subquery())
    if filters.top_level:
        conditions.append(col(Task.parent_id).is_(None))
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
        select(Task, *_progress())
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
    return TasksPublic(data=[_public(row) for row in rows], count=total)


async def task_counts(*, db: AsyncSession, owner: str) -> dict[str, int]:
    """How many of the user's tasks are pending, completed and overdue, in one query."""
    pending = col(Task.completed).is_(False)
    statement = select(
        func.count().filter(pending),
        func.count().filter(col(Task.completed)),
        func.count().filter(pending, col(Task.due_at) < func.now()),
    ).where(col(Task.user_id) == owner, _LIVE)
    row = (await db.exec(statement)).one()
    return {"pending": row[0], "completed": row[1], "overdue": row[2]}


async def get_task(*, db: AsyncSession, owner: str, ref: TaskRef) -> TaskDetail:
    """One task with its steps, in number order."""
    statement = select(Task, *_progress()).where(col(Task.user_id) == owner, ref.where(), _LIVE)
    row = (await db.exec(statement)).one_or_none()
    if row is None:
        raise TaskNotFound()
    task = _public(row)
    steps: list[Task] = []
    if task.steps_total:
        steps_of = select(Task).where(
            col(Task.user_id) == owner, col(Task.parent_id) == task.id, _LIVE
        )
        steps = list((await db.exec(steps_of.order_by(col(Task.number)))).all())
    return TaskDetail(**task.model_dump(), steps=[TaskPublic.model_validate(s) for s in steps])


async def update_task(
    *, db: AsyncSession, owner: str, ref: TaskRef, data: TaskUpdate, tz: ZoneInfo | None = None
) -> TaskChanged:
    """Change the fields sent. Setting or changing a rule, or moving a repeating task, counts
    the rule from its (new) due time; moving the reminder lets it fire again."""
    changes: dict[str, Any] = data.model_dump(exclude_unset=True)
    timed = {"due_at", "recurrence", "remind_at"} & changes.keys()
    tz = await _zone(db=db, owner=owner, tz=tz, needed=bool(timed))
    if "due_at" in changes:
        changes["due_at"] = resolve_due_at(data.due_at, tz)
    if "remind_at" in changes:
        remind_at = _reminder(data.remind_at, tz) if data.remind_at else None
        changes["remind_at"] = remind_at
        # A reminder moved to another time fires again; one set to its own time does not.
        moved = col(Task.remind_at).is_distinct_from(remind_at)
        changes["reminded_at"] = case((moved, None), else_=col(Task.reminded_at))
    if "recurrence" in changes or "due_at" in changes:
        changes.update(await _schedule_change(db=db, owner=owner, ref=ref, changes=changes, tz=tz))
    if "completed" in changes:
        changes.update(_completion(changes["completed"]))
    row = await _update(db=db, owner=owner, ref=ref, changes=changes)
    follows = changes.get("completed") is True
    return await _with_next(db=db, owner=owner, row=row, tz=tz, follows=follows)


async def _schedule_change(
    *, db: AsyncSession, owner: str, ref: TaskRef, changes: dict[str, Any], tz: ZoneInfo
) -> dict[str, Any]:
    """The columns a new rule or due time sets, read against the task as it is (locked)."""
    statement = (
        select(col(Task.due_at), col(Task.recurrence), col(Task.series_id))
        .where(col(Task.user_id) == owner, ref.where(), _LIVE)
        .with_for_update()
    )
    row = (await db.exec(statement)).one_or_none()
    if row is None:
        raise TaskNotFound()
    due_at, rule, series_id = row
    rule = changes.get("recurrence", rule)
    if rule is None:
        return {"recurrence_text": None} if "recurrence" in changes else {}
    if "due_at" in changes:
        if changes["due_at"] is None:
            raise InvalidSchedule("A repeating task needs a due date; stop the series first.")
        due_at = changes["due_at"]
    return _repeating(rule, due_at=due_at, series_id=series_id, tz=tz)


async def set_completed(
    *, db: AsyncSession, owner: str, ref: TaskRef, completed: bool | None
) -> TaskChanged:
    """Mark done or not done; `None` toggles. A task's steps are left as they are, and
    completing its last step leaves the task open: both are the user's call. Completing an
    occurrence of a repeating task creates the next one (once)."""
    row = await _update(db=db, owner=owner, ref=ref, changes=_completion(completed))
    return await _with_next(db=db, owner=owner, row=row, tz=None, follows=completed is not False)


async def _with_next(
    *, db: AsyncSession, owner: str, row: Any, tz: ZoneInfo | None, follows: bool
) -> TaskChanged:
    task, done, total = row
    changed = TaskChanged.model_validate(task, update={"steps_done": done, "steps_total": total})
    if follows and task.completed and task.recurrence is not None:
        changed.next = await _follow(db=db, owner=owner, task=task, tz=tz)
    return changed


async def _follow(
    *, db: AsyncSession, owner: str, task: Task, tz: ZoneInfo | None
) -> TaskPublic | None:
    """Create the next occurrence of completed `task`: due at the rule's first occurrence
    after both its due time and now, with its reminder as long before, its steps open.
    An occurrence has one successor at most: one that exists (seen here after the row lock
    of the completion) ends it, and the unique `previous_id` refuses a concurrent second."""
    # Both set on a repeating task (ck_tasks_repeating_has_due).
    assert task.recurrence is not None
    assert task.due_at is not None
    existing = select(col(Task.id)).where(
        col(Task.user_id) == owner, col(Task.previous_id) == task.id
    )
    if (await db.exec(existing)).first() is not None:
        return None
    tz = await _zone(db=db, owner=owner, tz=tz, needed=True)
    after = max(task.due_at, datetime.now(UTC))
    anchor = task.series_start or task.due_at
    due_at = recurrence.next_due(task.recurrence, anchor=anchor, after=after, tz=tz)
    if due_at is None:
        return None  # the rule is finished (COUNT, UNTIL)
    offset = recurrence.offset_of(task.due_at, task.remind_at)
    statement = _insertion(
        owner,
        task.parent_id,
        task.title,
        description=task.description,
        priority=task.priority,
        tags=task.tags,
        due_at=due_at,
        remind_at=due_at - offset if offset is not None else None,
        recurrence=task.recurrence,
        recurrence_text=task.recurrence_text,
        series_id=task.series_id,
        series_start=task.series_start,
        previous_id=task.id,
    ).on_conflict_do_nothing(index_elements=["previous_id"])
    successor = (await db.exec(statement)).scalars().one_or_none()
    if successor is None:
        return None  # a concurrent completion made it first
    steps_of = (
        select(col(Task.title))
        .where(col(Task.user_id) == owner, col(Task.parent_id) == task.id, _LIVE)
        .order_by(col(Task.number))
    )
    titles = list((await db.exec(steps_of)).all())
    for title in titles:
        await _insert(db=db, owner=owner, parent_id=successor.id, title=title)
    return TaskPublic.model_validate(successor, update={"steps_total": len(titles)})


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


async def _update(*, db: AsyncSession, owner: str, ref: TaskRef, changes: dict[str, Any]) -> Any:
    """The changed (Task, steps_done, steps_total) row."""
    statement = (
        update(Task)
        .where(col(Task.user_id) == owner, ref.where(), _LIVE)
        .values(**changes, updated_at=func.now())
        .returning(Task, *_progress())
    )
    row = (await db.exec(statement)).one_or_none()
    if row is None:
        raise TaskNotFound()
    return row


async def delete_task(*, db: AsyncSession, owner: str, ref: TaskRef) -> Task:
    """Move a task to the trash, its open and done steps with it (one `deleted_at` for all,
    so restoring it brings back just these). Its number stays its own; its reminder no
    longer fires (the reminder clock skips the trash)."""
    target = (
        select(col(Task.id)).where(col(Task.user_id) == owner, ref.where(), _LIVE).scalar_subquery()
    )
    statement = (
        update(Task)
        .where(col(Task.user_id) == owner, _LIVE)
        .where(or_(col(Task.id) == target, col(Task.parent_id) == target))
        .values(deleted_at=func.now(), updated_at=func.now())
        .returning(Task)
    )
    trashed = list((await db.exec(statement)).scalars().all())
    moved = {t.id for t in trashed}
    task = next((t for t in trashed if t.parent_id not in moved), None)  # the target
    if task is None:
        raise TaskNotFound()
    return task  # type: ignore[no-any-return]


async def _trashed(*, db: AsyncSession, owner: str, ref: TaskRef) -> Task:
    """The user's task `ref`, locked, which must be in the trash: a live one is 409."""
    statement = select(Task).where(col(Task.user_id) == owner, ref.where()).with_for_update()
    task = (await db.exec(statement)).one_or_none()
    if task is None:
        raise TaskNotFound()
    if task.deleted_at is None:
        raise NotInTrash(f"Task {task.number} is not in the trash.")
    return task


async def restore_task(*, db: AsyncSession, owner: str, ref: TaskRef) -> TaskDetail:
    """Bring a task back from the trash with the steps that went there with it, under its
    own number; its reminder too, if it is still ahead. A step whose task is in the trash
    comes back with that task (409 alone)."""
    task = await _trashed(db=db, owner=owner, ref=ref)
    if task.parent_id is not None:
        parent = await db.get(Task, task.parent_id)
        if parent is not None and parent.deleted_at is not None:
            raise NotInTrash(
                f"Task {task.number} is a step of task {parent.number}, which is in the "
                f"trash: restore task {parent.number}."
            )
    statement = (
        update(Task)
        .where(col(Task.user_id) == owner, col(Task.deleted_at) == task.deleted_at)
        .where(or_(col(Task.id) == task.id, col(Task.parent_id) == task.id))
        .values(
            deleted_at=None,
            updated_at=func.now(),
            remind_at=case(
                (
                    and_(col(Task.reminded_at).is_(None), col(Task.remind_at) <= func.now()),
                    None,
                ),
                else_=col(Task.remind_at),
            ),
        )
    )
    await db.exec(statement)
    return await get_task(db=db, owner=owner, ref=TaskRef(id=task.id))


async def purge_task(*, db: AsyncSession, owner: str, ref: TaskRef) -> Task:
    """Delete a task in the trash for good (its steps with it)."""
    task = await _trashed(db=db, owner=owner, ref=ref)
    await db.exec(delete(Task).where(col(Task.id) == task.id))
    return task


async def empty_trash(*, db: AsyncSession, owner: str) -> int:
    """Delete everything in the user's trash for good; how many tasks (steps included)."""
    statement = delete(Task).where(col(Task.user_id) == owner, col(Task.deleted_at).is_not(None))
    return int((await db.exec(statement)).rowcount)


async def list_trash(
    *, db: AsyncSession, owner: str, limit: int, cursor: str | None
) -> TrashPublic:
    """The trash, most recently deleted first: what can be restored (a step that went to
    the trash with its task comes back with it, so only the task is listed)."""
    in_trash = col(Task.deleted_at).is_not(None)
    parent_trashed = (
        select(_PARENT.c.id)
        .where(_PARENT.c.id == col(Task.parent_id), _PARENT.c.deleted_at == col(Task.deleted_at))
        .exists()
    )
    statement = (
        select(Task, *_trashed_progress())
        .where(col(Task.user_id) == owner, in_trash, ~parent_trashed)
        .order_by(col(Task.deleted_at).desc(), col(Task.id).desc())
        .limit(limit + 1)
    )
    if cursor is not None:
        deleted_at, task_id = cursors.decode_position(cursor)
        statement = statement.where(
            tuple_(col(Task.deleted_at), col(Task.id)) < tuple_(deleted_at, task_id)
        )
    rows = list((await db.exec(statement)).all())
    page = rows[:limit]
    data = [
        TrashedTask.model_validate(task, update={"steps_done": done, "steps_total": total})
        for task, done, total in page
    ]
    last = page[-1][0] if page else None
    next_cursor = (
        cursors.encode_position(last.deleted_at, last.id)
        if last is not None and last.deleted_at is not None and len(rows) > limit
        else None
    )
    return TrashPublic(data=data, next_cursor=next_cursor)


def _trashed_progress() -> tuple[Label[int], Label[int]]:
    """A trashed task's steps that went to the trash with it: what restoring brings back."""
    steps = (
        select(func.count())
        .select_from(_STEPS)
        .where(
            _STEPS.c.user_id == col(Task.user_id),
            _STEPS.c.parent_id == col(Task.id),
            _STEPS.c.deleted_at == col(Task.deleted_at),
        )
        .correlate(Task)
    )
    return (
        steps.where(_STEPS.c.completed).scalar_subquery().label("steps_done"),
        steps.scalar_subquery().label("steps_total"),
    )


def _seconds(seconds: float) -> Any:
    return func.make_interval(0, 0, 0, 0, 0, 0, seconds)


async def purge_expired_trash(*, db: AsyncSession, retention_d: float, batch: int) -> int:
    """Delete (a batch of) tasks that have been in the trash longer than the retention."""
    expired = (
        select(col(Task.id))
        .where(col(Task.deleted_at) < func.now() - _seconds(retention_d * 86400))
        .limit(batch)
        .scalar_subquery()
    )
    statement = delete(Task).where(col(Task.id).in_(expired))
    return int((await db.exec(statement)).rowcount)
