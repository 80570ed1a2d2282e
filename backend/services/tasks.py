"""Task logic, for one reader: every query reaches the tasks of the lists they are a member
of (`access`), under their own numbers; another user's task is simply not found, and what
their role does not allow is refused (403).

A deleted task is in the trash (`deleted_at` set): out of every list, count and lookup here
but `restore_task` and `purge_task`, until it is restored or purged. Numbers are drawn by
the database as a task is made (migration 0007), one for each member of its list.
"""

import functools
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
    String,
    Table,
    and_,
    bindparam,
    case,
    delete,
    func,
    or_,
    true,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import (
    InvalidSchedule,
    NotAMember,
    NotInTrash,
    StepsHaveNoSteps,
    TaskNotFound,
)
from backend.models.list import ListMember, TaskNumber
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
from backend.services import access, cursors, idempotency, recurrence
from backend.services.access import Action, Membership

_TASK_REF = re.compile(r"^\s*(?:task\s*)?#?\s*(\d{1,9})\s*$", re.IGNORECASE)
_TASKS: Table = Task.__table__  # type: ignore[attr-defined]
_NUMBERS: Table = TaskNumber.__table__  # type: ignore[attr-defined]
# Other rows of the same table, in subqueries: a task's steps, a filter's parent.
_STEPS = _TASKS.alias("step")
_PARENT = _TASKS.alias("parent")
_LIVE = col(Task.deleted_at).is_(None)


@dataclass(frozen=True, slots=True)
class TaskRef:
    """A reader's way to name a task: their number for it, or its UUID."""

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

    def where(self, user: str, table: FromClause = _TASKS) -> ColumnElement[bool]:
        if self.id is not None:
            return table.c.id == self.id
        numbered = select(_NUMBERS.c.task_id).where(
            _NUMBERS.c.user_id == user, _NUMBERS.c.number == self.number
        )
        return table.c.id == numbered.scalar_subquery()


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


async def _zone(*, db: AsyncSession, user: str, tz: ZoneInfo | None, needed: bool) -> ZoneInfo:
    """The zone to read dates in: the caller's, else the user's stored one (looked up only
    when a date actually needs reading), else UTC."""
    if tz is not None or not needed:
        return tz or ZoneInfo("UTC")
    name = (await db.exec(select(col(User.timezone)).where(col(User.id) == user))).one_or_none()
    return ZoneInfo(name or "UTC")


def _number(user: str) -> Label[int]:
    """The reader's number for the task row of the enclosing statement."""
    return (
        select(_NUMBERS.c.number)
        .where(_NUMBERS.c.task_id == col(Task.id), _NUMBERS.c.user_id == user)
        .correlate(Task)
        .scalar_subquery()
        .label("number")
    )


def _progress(*, task: Any = Task, trashed_with: bool = False) -> tuple[Label[int], Label[int]]:
    """The steps_done and steps_total of the task row (`task`, the table or an alias of it)
    of the enclosing statement (one index range each, on (list_id, parent_id)): its live
    steps, or (`trashed_with`) those that went to the trash with it, which restoring it
    brings back."""
    alongside = (
        _STEPS.c.deleted_at == task.deleted_at if trashed_with else _STEPS.c.deleted_at.is_(None)
    )
    steps = (
        select(func.count())
        .select_from(_STEPS)
        .where(_STEPS.c.list_id == task.list_id, _STEPS.c.parent_id == task.id, alongside)
        .correlate(task)
    )
    return (
        steps.where(_STEPS.c.completed).scalar_subquery().label("steps_done"),
        steps.scalar_subquery().label("steps_total"),
    )


def _shown(user: str) -> Any:
    """The reader's tasks as the API shows them: (Task, number, steps_done, steps_total)."""
    return select(Task, _number(user), *_progress()).where(
        access.reachable(user, col(Task.list_id))
    )


# What a task row gives the public shape (the rest comes from the statement's own columns).
_FROM_ROW = tuple(
    name for name in TaskPublic.model_fields if name not in ("number", "steps_done", "steps_total")
)


def _public(row: Any) -> TaskPublic:
    """Validated from a dict by pydantic itself: SQLModel's model_validate(..., update=) costs
    twice as much, 1.5 ms of a 50-task page."""
    task, number, done, total = row
    values = {name: getattr(task, name) for name in _FROM_ROW}
    values.update(number=number, steps_done=done, steps_total=total)
    return TaskPublic.__pydantic_validator__.validate_python(values)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class _Target:
    """A task a request names, found among the reader's, with the reader's place in its
    list."""

    id: uuid.UUID
    parent_id: uuid.UUID | None
    number: int
    membership: Membership


async def _target(
    *, db: AsyncSession, user: str, ref: TaskRef, action: Action, trashed: bool = False
) -> _Target:
    """The reader's task `ref` (live, or in the trash); not one of theirs: not found; their
    role does not allow `action`: 403. One to write to is locked until commit (only then:
    row-level security lets a lock through only where the reader may write)."""
    statement = (
        select(col(Task.id), col(Task.parent_id), col(Task.list_id), _number(user))
        .where(ref.where(user), access.reachable(user, col(Task.list_id)))
        .where(col(Task.deleted_at).is_not(None) if trashed else _LIVE)
    )
    row = (await db.exec(statement)).one_or_none()
    if row is None:
        if trashed and await _live(db=db, user=user, ref=ref):
            raise NotInTrash(f"Task {ref.number or ref.id} is not in the trash.")
        raise TaskNotFound()
    task_id, parent_id, list_id, number = row
    found = (await access.membership(db, user=user, list_id=list_id)).require(action)
    if action != "read":
        locked = select(col(Task.id)).where(col(Task.id) == task_id).with_for_update()
        if (await db.exec(locked)).first() is None:  # moved or deleted meanwhile
            raise TaskNotFound()
    return _Target(task_id, parent_id, number, found)


async def _live(*, db: AsyncSession, user: str, ref: TaskRef) -> bool:
    statement = select(col(Task.id)).where(
        ref.where(user), access.reachable(user, col(Task.list_id)), _LIVE
    )
    return (await db.exec(statement)).first() is not None


async def _list_for(
    *, db: AsyncSession, user: str, list_id: uuid.UUID | None, action: Action = "write"
) -> Membership:
    """The list a new or moved task goes to (default: the reader's Inbox), which their role
    there must let them write to."""
    if list_id is None:
        return await access.own_inbox(db, user=user)
    return (await access.membership(db, user=user, list_id=list_id)).require(action)


async def _check_assignee(db: AsyncSession, *, list_id: uuid.UUID, assignee: str) -> None:
    """An assignee is a member of the task's list."""
    statement = select(col(ListMember.user_id)).where(
        col(ListMember.list_id) == list_id, col(ListMember.user_id) == assignee
    )
    if (await db.exec(statement)).first() is None:
        raise NotAMember(f"{assignee!r} is not a member of this task's list.")


async def create_task(
    *, db: AsyncSession, user: str, data: TaskCreate, tz: ZoneInfo | None = None
) -> TaskDetail:
    """Create the task, and its steps after it, in the caller's transaction, in the list
    given (the Inbox by default), or in its parent's. A parent must be the reader's and not
    itself a step (404 / 422 before anything is written)."""
    parent_id = None
    if data.parent_id is not None:
        if data.steps:
            raise StepsHaveNoSteps("A step cannot have steps: give a parent or steps, not both.")
        parent = await _parent(db=db, user=user, ref=TaskRef.parse(data.parent_id))
        parent_id, list_id = parent.id, parent.membership.list_id
    else:
        list_id = (await _list_for(db=db, user=user, list_id=data.list_id)).list_id
    if data.assignee_id is not None:
        await _check_assignee(db, list_id=list_id, assignee=data.assignee_id)
    timed = data.due_at is not None or data.recurrence is not None or data.remind_at is not None
    tz = await _zone(db=db, user=user, tz=tz, needed=timed)
    due_at = resolve_due_at(data.due_at, tz)
    schedule: dict[str, Any] = {"due_at": due_at}
    if data.recurrence is not None:
        schedule = _repeating(data.recurrence, due_at=due_at, series_id=None, tz=tz)
    if data.remind_at is not None:
        schedule["remind_at"] = _reminder(data.remind_at, tz)
    task_id = await _insert(
        db=db,
        user=user,
        list_id=list_id,
        parent_id=parent_id,
        title=data.title,
        description=data.description,
        priority=data.priority,
        tags=data.tags,
        assignee_id=data.assignee_id,
        **schedule,
    )
    for title in data.steps:
        await _insert(db=db, user=user, list_id=list_id, parent_id=task_id, title=title)
    return await get_task(db=db, user=user, ref=TaskRef(id=task_id))


async def _parent(*, db: AsyncSession, user: str, ref: TaskRef) -> _Target:
    """The reader's top-level task `ref`, locked against deletion until commit, in a list
    they may write to."""
    try:
        parent = await _target(db=db, user=user, ref=ref, action="write")
    except TaskNotFound:
        raise TaskNotFound("Parent task not found.") from None
    if parent.parent_id is not None:
        raise StepsHaveNoSteps(f"Task {parent.number} is a step; a step cannot have steps.")
    return parent


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
    user: str,
    list_id: uuid.UUID,
    parent_id: uuid.UUID | None,
    title: str,
    **fields: Any,
) -> uuid.UUID:
    """Insert a task made by `user`; the database gives it a number for each member of its
    list as it is inserted (their counters locked until commit, so concurrent creates get
    distinct numbers, never reused)."""
    statement = (
        insert(Task)
        .values(
            id=uuid.uuid4(),
            list_id=list_id,
            created_by=user,
            parent_id=parent_id,
            title=title,
            created_at=func.now(),
            updated_at=func.now(),
            **fields,
        )
        .returning(col(Task.id))
    )
    task_id: uuid.UUID = (await db.exec(statement)).scalar_one()
    return task_id


async def create_task_once(
    *, db: AsyncSession, user: str, data: TaskCreate, key: str, ttl_s: float
) -> TaskDetail:
    """Create a task at most once per Idempotency-Key: a retry gets the first task back.
    The key is claimed and answered in this one transaction, so a concurrent retry waits
    for it and then replays."""
    fingerprint = idempotency.request_hash("tasks.create", data.model_dump(mode="json"))
    connection = await db.connection()
    replay = await idempotency.claim(
        connection, owner=user, key=key, fingerprint=fingerprint, ttl_s=ttl_s, lock_s=ttl_s
    )
    if replay is not None:
        return TaskDetail.model_validate(replay.body)
    task = await create_task(db=db, user=user, data=data)
    await idempotency.store(
        connection, owner=user, key=key, status_code=201, body=task.model_dump(mode="json")
    )
    return task


def _conditions(user: str, filters: TaskFilters, tz: ZoneInfo) -> list[ColumnElement[bool]]:
    conditions = [access.reachable(user, col(Task.list_id)), _LIVE]
    if filters.parent is not None:
        # Another user's task as parent matches nothing, exactly like a missing one.
        parent = TaskRef.parse(filters.parent).where(user, _PARENT)
        parent_id = select(_PARENT.c.id).where(parent, _PARENT.c.deleted_at.is_(None))
        conditions.append(col(Task.parent_id) == parent_id.scalar_subquery())
    if filters.top_level:
        conditions.append(col(Task.parent_id).is_(None))
    if filters.list is not None:
        conditions.append(col(Task.list_id) == filters.list)
    if filters.assignee is not None:
        assignee = user if filters.assignee == "me" else filters.assignee
        conditions.append(col(Task.assignee_id) == assignee)
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


# Filters under which few of a reader's tasks may match, too few to find by walking them all.
_NARROWING = {"q", "priority", "tag", "due", "parent", "list", "assignee"}


_UTC = ZoneInfo("UTC")  # no due-day filter in a walk: the zone is never read


_PAGING = {"limit", "offset"}


@functools.cache
def _walk(shape: tuple[tuple[str, Any], ...]) -> Any:
    """The page of a reader's tasks when most of them match (all, pending or done): walked
    in the reader's number order (their task_numbers index), each task by its key, until the
    page is full. The walk is kept from being flattened into a join (OFFSET 0): the planner,
    which cannot see through row-level security how many tasks each of the reader's lists
    holds, would rather read them all and sort them.

    Built once per shape (every filter but the paging, so no filter is left out of the
    key), the reader a bound parameter (`reader`): building it, the lateral subquery's
    columns adapted to the steps' counts, cost 4 ms of each request."""
    reader: Any = bindparam("reader", type_=String)
    conditions = _conditions(reader, TaskFilters(**dict(shape)), _UTC)
    reached = (
        select(Task)
        .where(col(Task.id) == col(TaskNumber.task_id), *conditions)
        .offset(0)
        .lateral("task")
    )
    task: Any = aliased(Task, reached)
    return (
        select(task, col(TaskNumber.number), *_progress(task=task))
        .select_from(TaskNumber)
        .join(reached, true())
        .where(col(TaskNumber.user_id) == reader)
    )


async def list_tasks(
    *, db: AsyncSession, user: str, filters: TaskFilters, tz: ZoneInfo | None = None
) -> TasksPublic:
    """One page in the reader's number order, with the total count of matches."""
    tz = await _zone(db=db, user=user, tz=tz, needed=filters.due in ("today", "week"))
    conditions = _conditions(user, filters, tz)
    narrowed = filters.model_dump(include=_NARROWING, exclude_none=True)
    params: dict[str, Any] = {}
    page: Any
    if not narrowed:
        page = _walk(tuple(filters.model_dump(exclude=_PAGING).items()))
        params = {"reader": user}
    else:  # fewer match (a search, a list, a due date...): read them, then sort them
        page = select(Task, col(TaskNumber.number), *_progress()).join(
            TaskNumber,
            and_(col(TaskNumber.task_id) == col(Task.id), col(TaskNumber.user_id) == user),
        )
        page = page.where(*conditions)
    page = page.order_by(col(TaskNumber.number)).limit(filters.limit).offset(filters.offset)
    rows = list((await db.exec(page, params=params)).all())
    if filters.offset == 0 and len(rows) < filters.limit:
        total = len(rows)  # the whole result is on this page
    else:
        # A separate count can be answered from the index; counting in the page query
        # (count(*) OVER ()) would read every matching row before the LIMIT applies.
        total = (await db.exec(select(func.count()).where(*conditions))).one()
    return TasksPublic(data=[_public(row) for row in rows], count=total)


async def task_counts(*, db: AsyncSession, user: str) -> dict[str, int]:
    """How many of the reader's tasks are pending, completed and overdue, in one query."""
    pending = col(Task.completed).is_(False)
    statement = select(
        func.count().filter(pending),
        func.count().filter(col(Task.completed)),
        func.count().filter(pending, col(Task.due_at) < func.now()),
    ).where(access.reachable(user, col(Task.list_id)), _LIVE)
    row = (await db.exec(statement)).one()
    return {"pending": row[0], "completed": row[1], "overdue": row[2]}


async def get_task(*, db: AsyncSession, user: str, ref: TaskRef) -> TaskDetail:
    """One task with its steps, in the reader's number order."""
    row = (await db.exec(_shown(user).where(ref.where(user), _LIVE))).one_or_none()
    if row is None:
        raise TaskNotFound()
    task = _public(row)
    steps: list[TaskPublic] = []
    if task.steps_total:
        steps_of = _shown(user).where(col(Task.parent_id) == task.id, _LIVE)
        rows = (await db.exec(steps_of)).all()
        steps = sorted((_public(row) for row in rows), key=lambda step: step.number)
    return TaskDetail(**task.model_dump(), steps=steps)


async def update_task(
    *, db: AsyncSession, user: str, ref: TaskRef, data: TaskUpdate, tz: ZoneInfo | None = None
) -> TaskChanged:
    """Change the fields sent. Setting or changing a rule, or moving a repeating task, counts
    the rule from its (new) due time; moving the reminder lets it fire again. Moving a task
    to another list moves its steps; a step moves only with its task."""
    target = await _target(db=db, user=user, ref=ref, action="write")
    changes: dict[str, Any] = data.model_dump(exclude_unset=True)
    list_id = target.membership.list_id
    if "list_id" in changes and changes["list_id"] != list_id:
        if target.parent_id is not None:
            raise StepsHaveNoSteps("A step moves with its task: move the task instead.")
        list_id = (await _list_for(db=db, user=user, list_id=changes["list_id"])).list_id
        if "assignee_id" not in changes:  # an assignee who is not in the new list is not
            changes["assignee_id"] = case(
                (col(Task.assignee_id).in_(_members_of(list_id)), col(Task.assignee_id)),
                else_=None,
            )
    if changes.get("assignee_id") is not None and isinstance(changes["assignee_id"], str):
        await _check_assignee(db, list_id=list_id, assignee=changes["assignee_id"])
    timed = {"due_at", "recurrence", "remind_at"} & changes.keys()
    tz = await _zone(db=db, user=user, tz=tz, needed=bool(timed))
    if "due_at" in changes:
        changes["due_at"] = resolve_due_at(data.due_at, tz)
    if "remind_at" in changes:
        remind_at = _reminder(data.remind_at, tz) if data.remind_at else None
        changes["remind_at"] = remind_at
        # A reminder moved to another time fires again; one set to its own time does not.
        moved = col(Task.remind_at).is_distinct_from(remind_at)
        changes["reminded_at"] = case((moved, None), else_=col(Task.reminded_at))
    if "recurrence" in changes or "due_at" in changes:
        changes.update(await _schedule_change(db=db, target=target, changes=changes, tz=tz))
    if "completed" in changes:
        changes.update(_completion(changes["completed"]))
    row = await _update(db=db, user=user, target=target, changes=changes)
    follows = changes.get("completed") is True
    return await _with_next(db=db, user=user, row=row, tz=tz, follows=follows)


def _members_of(list_id: uuid.UUID) -> Any:
    return select(col(ListMember.user_id)).where(col(ListMember.list_id) == list_id)


async def _schedule_change(
    *, db: AsyncSession, target: _Target, changes: dict[str, Any], tz: ZoneInfo
) -> dict[str, Any]:
    """The columns a new rule or due time sets, read against the task as it is (locked)."""
    statement = select(col(Task.due_at), col(Task.recurrence), col(Task.series_id)).where(
        col(Task.id) == target.id
    )
    due_at, rule, series_id = (await db.exec(statement)).one()
    rule = changes.get("recurrence", rule)
    if rule is None:
        return {"recurrence_text": None} if "recurrence" in changes else {}
    if "due_at" in changes:
        if changes["due_at"] is None:
            raise InvalidSchedule("A repeating task needs a due date; stop the series first.")
        due_at = changes["due_at"]
    return _repeating(rule, due_at=due_at, series_id=series_id, tz=tz)


async def set_completed(
    *, db: AsyncSession, user: str, ref: TaskRef, completed: bool | None
) -> TaskChanged:
    """Mark done or not done; `None` toggles. A task's steps are left as they are, and
    completing its last step leaves the task open: both are the user's call. Completing an
    occurrence of a repeating task creates the next one (once)."""
    target = await _target(db=db, user=user, ref=ref, action="write")
    row = await _update(db=db, user=user, target=target, changes=_completion(completed))
    return await _with_next(db=db, user=user, row=row, tz=None, follows=completed is not False)


async def _with_next(
    *, db: AsyncSession, user: str, row: Any, tz: ZoneInfo | None, follows: bool
) -> TaskChanged:
    task, number, done, total = row
    changed = TaskChanged.model_validate(
        task, update={"number": number, "steps_done": done, "steps_total": total}
    )
    if follows and task.completed and task.recurrence is not None:
        changed.next = await _follow(db=db, user=user, task=task, tz=tz)
    return changed


async def _follow(
    *, db: AsyncSession, user: str, task: Task, tz: ZoneInfo | None
) -> TaskPublic | None:
    """Create the next occurrence of completed `task`, in its list: due at the rule's first
    occurrence after both its due time and now, with its reminder as long before, its steps
    open. An occurrence has one successor at most: one that exists (seen here after the row
    lock of the completion) ends it, and the unique `previous_id` refuses a concurrent
    second."""
    # Both set on a repeating task (ck_tasks_repeating_has_due).
    assert task.recurrence is not None
    assert task.due_at is not None
    existing = select(col(Task.id)).where(col(Task.previous_id) == task.id)
    if (await db.exec(existing)).first() is not None:
        return None
    tz = await _zone(db=db, user=user, tz=tz, needed=True)
    after = max(task.due_at, datetime.now(UTC))
    anchor = task.series_start or task.due_at
    due_at = recurrence.next_due(task.recurrence, anchor=anchor, after=after, tz=tz)
    if due_at is None:
        return None  # the rule is finished (COUNT, UNTIL)
    offset = recurrence.offset_of(task.due_at, task.remind_at)
    statement = (
        insert(Task)
        .values(
            id=uuid.uuid4(),
            list_id=task.list_id,
            created_by=user,
            assignee_id=task.assignee_id,
            parent_id=task.parent_id,
            title=task.title,
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
            created_at=func.now(),
            updated_at=func.now(),
        )
        .on_conflict_do_nothing(index_elements=["previous_id"])
        .returning(col(Task.id))
    )
    successor = (await db.exec(statement)).scalar_one_or_none()
    if successor is None:
        return None  # a concurrent completion made it first
    steps_of = (
        select(col(Task.title)).where(col(Task.parent_id) == task.id, _LIVE).order_by(_number(user))
    )
    for title in list((await db.exec(steps_of)).all()):
        await _insert(db=db, user=user, list_id=task.list_id, parent_id=successor, title=title)
    row = (await db.exec(_shown(user).where(col(Task.id) == successor))).one()
    return _public(row)


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


async def _update(*, db: AsyncSession, user: str, target: _Target, changes: dict[str, Any]) -> Any:
    """The changed (Task, number, steps_done, steps_total) row."""
    statement = (
        update(Task)
        .where(col(Task.id) == target.id)
        .values(**changes, updated_at=func.now())
        .returning(Task, _number(user), *_progress())
    )
    return (await db.exec(statement)).one()


async def delete_task(*, db: AsyncSession, user: str, ref: TaskRef) -> TaskPublic:
    """Move a task to the trash, its open and done steps with it (one `deleted_at` for all,
    so restoring it brings back just these). Its numbers stay; its reminder no longer fires
    (the reminder clock skips the trash)."""
    target = await _target(db=db, user=user, ref=ref, action="write")
    statement = (
        update(Task)
        .where(or_(col(Task.id) == target.id, col(Task.parent_id) == target.id), _LIVE)
        .values(deleted_at=func.now(), updated_at=func.now())
        .returning(Task, _number(user))
    )
    rows = (await db.exec(statement)).all()
    task, number = next((task, number) for task, number in rows if task.id == target.id)
    return TaskPublic.model_validate(task, update={"number": number})


async def restore_task(*, db: AsyncSession, user: str, ref: TaskRef) -> TaskDetail:
    """Bring a task back from the trash with the steps that went there with it, under its
    numbers; its reminder too, if it is still ahead. A step whose task is in the trash
    comes back with that task (409 alone)."""
    target = await _target(db=db, user=user, ref=ref, action="write", trashed=True)
    task = await db.get_one(Task, target.id)
    if task.parent_id is not None:
        parent = await db.get_one(Task, task.parent_id)
        if parent.deleted_at is not None:
            number = (await db.exec(select(_number(user)).where(col(Task.id) == parent.id))).one()
            raise NotInTrash(
                f"Task {target.number} is a step of task {number}, which is in the trash: "
                f"restore task {number}."
            )
    statement = (
        update(Task)
        .where(col(Task.deleted_at) == task.deleted_at)
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
    return await get_task(db=db, user=user, ref=TaskRef(id=task.id))


async def purge_task(*, db: AsyncSession, user: str, ref: TaskRef) -> TaskPublic:
    """Delete a task in the trash for good (its steps with it)."""
    target = await _target(db=db, user=user, ref=ref, action="write", trashed=True)
    purged = (
        await db.exec(delete(Task).where(col(Task.id) == target.id).returning(Task))
    ).scalar_one()
    return TaskPublic.model_validate(purged, update={"number": target.number})


async def empty_trash(*, db: AsyncSession, user: str) -> int:
    """Delete everything in the reader's trash for good; how many tasks (steps included)."""
    statement = delete(Task).where(
        access.reachable(user, col(Task.list_id), action="write"),
        col(Task.deleted_at).is_not(None),
    )
    return int((await db.exec(statement)).rowcount)


async def list_trash(*, db: AsyncSession, user: str, limit: int, cursor: str | None) -> TrashPublic:
    """The reader's trash, most recently deleted first: what they could restore (tasks of
    the lists they may change); a step that went to the trash with its task comes back
    with it, so only the task is listed."""
    parent_trashed = (
        select(_PARENT.c.id)
        .where(_PARENT.c.id == col(Task.parent_id), _PARENT.c.deleted_at == col(Task.deleted_at))
        .exists()
    )
    statement = (
        select(Task, _number(user), *_progress(trashed_with=True))
        .where(access.reachable(user, col(Task.list_id), action="write"))
        .where(col(Task.deleted_at).is_not(None), ~parent_trashed)
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
        TrashedTask.model_validate(
            task, update={"number": number, "steps_done": done, "steps_total": total}
        )
        for task, number, done, total in page
    ]
    last = page[-1][0] if page else None
    next_cursor = (
        cursors.encode_position(last.deleted_at, last.id)
        if last is not None and last.deleted_at is not None and len(rows) > limit
        else None
    )
    return TrashPublic(data=data, next_cursor=next_cursor)


def _seconds(seconds: float) -> Any:
    return func.make_interval(0, 0, 0, 0, 0, 0, seconds)


async def purge_expired_trash(db: AsyncConnection, *, retention_d: float, batch: int) -> int:
    """Delete (a batch of) tasks that have been in the trash longer than the retention
    (background work: every user's)."""
    expired = (
        select(col(Task.id))
        .where(col(Task.deleted_at) < func.now() - _seconds(retention_d * 86400))
        .limit(batch)
        .scalar_subquery()
    )
    result = await db.execute(delete(Task).where(col(Task.id).in_(expired)))
    return int(result.rowcount)
