"""What the DAV server reads and writes beside the task services: a person's collections
(their lists, with each one's change counter), items (tasks with their names, UIDs and
revisions), the changes since a revision, and an item's name and UID as a client chose them.

Every query runs as the person (row-level security holds it to their lists) and says so
too, through `access`.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import ColumnElement, and_, delete, func, or_, update
from sqlalchemy.orm import aliased
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import ListNotFound
from backend.models.dav import DavCollection, DavItem
from backend.models.list import ListMember, TodoList
from backend.models.task import Task
from backend.models.user import User
from backend.services import access
from backend.services.caldav.ics import ItemMeta


@dataclass(frozen=True, slots=True)
class Collection:
    """A list as the person's calendar: its name, their role, its change counter."""

    list_id: uuid.UUID
    name: str
    inbox: bool
    role: str
    owner_id: str
    revision: int
    updated_at: datetime

    @property
    def writable(self) -> bool:
        return self.role in ("owner", "editor")


@dataclass(frozen=True, slots=True)
class Item:
    task: Task
    name: str
    revision: int
    meta: ItemMeta

    @property
    def etag(self) -> str:
        return etag(self.revision)


def etag(revision: int) -> str:
    return f'"{revision}"'


def _collections(user: str) -> Any:
    return (
        select(  # type: ignore[call-overload]
            col(TodoList.id),
            col(TodoList.name),
            col(TodoList.inbox),
            col(ListMember.role),
            col(TodoList.owner_id),
            func.coalesce(col(DavCollection.revision), 0),
            col(TodoList.updated_at),
        )
        .join(ListMember, col(ListMember.list_id) == col(TodoList.id))
        .outerjoin(DavCollection, col(DavCollection.list_id) == col(TodoList.id))
        .where(col(ListMember.user_id) == user)
    )


async def home(*, db: AsyncSession, user: str) -> list[Collection]:
    """The person's lists, the Inbox first (made on first use), then by age."""
    await access.inbox(db)
    statement = _collections(user).order_by(
        col(TodoList.inbox).desc(), col(TodoList.created_at), col(TodoList.name)
    )
    return [Collection(*row) for row in (await db.exec(statement)).all()]


async def collection(*, db: AsyncSession, user: str, list_id: uuid.UUID) -> Collection:
    """One list of the person's, by one indexed lookup; not theirs: not found."""
    row = (await db.exec(_collections(user).where(col(TodoList.id) == list_id))).one_or_none()
    if row is None:
        raise ListNotFound()
    return Collection(*row)


async def zone(*, db: AsyncSession, user: str) -> ZoneInfo:
    name = (await db.exec(select(col(User.timezone)).where(col(User.id) == user))).one_or_none()
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


_PARENT = aliased(DavItem)


def _items(list_id: uuid.UUID) -> Any:
    """The list's live items: (task, name, revision, uid, extra, parent uid)."""
    return (
        select(  # type: ignore[call-overload]
            Task,
            col(DavItem.name),
            col(DavItem.revision),
            col(DavItem.uid),
            col(DavItem.extra),
            col(_PARENT.uid),
        )
        .join(
            DavItem,
            and_(col(DavItem.task_id) == col(Task.id), col(DavItem.list_id) == col(Task.list_id)),
        )
        .outerjoin(
            _PARENT,
            and_(
                col(_PARENT.list_id) == col(Task.list_id),
                col(_PARENT.task_id) == col(Task.parent_id),
            ),
        )
        .where(col(DavItem.list_id) == list_id, col(DavItem.deleted).is_(False))
        .where(col(Task.deleted_at).is_(None))
    )


def _item(row: Any) -> Item:
    task, name, revision, uid, extra, parent_uid = row
    return Item(task, name, revision, ItemMeta(uid, extra, parent_uid))


async def items(
    *,
    db: AsyncSession,
    list_id: uuid.UUID,
    names: list[str] | None = None,
    where: list[ColumnElement[bool]] | None = None,
) -> list[Item]:
    """The list's items: all, those `names`, or those matching `where` (on Task)."""
    statement = _items(list_id)
    if names is not None:
        statement = statement.where(col(DavItem.name).in_(names))
    if where:
        statement = statement.where(*where)
    statement = statement.order_by(col(DavItem.name))
    return [_item(row) for row in (await db.exec(statement)).all()]


async def item(*, db: AsyncSession, list_id: uuid.UUID, name: str) -> Item | None:
    found = await items(db=db, list_id=list_id, names=[name])
    return found[0] if found else None


async def listing(*, db: AsyncSession, list_id: uuid.UUID) -> list[tuple[str, int]]:
    """The names and revisions of the list's live items (a PROPFIND's etags), without
    reading the tasks."""
    statement = (
        select(col(DavItem.name), col(DavItem.revision))
        .where(col(DavItem.list_id) == list_id, col(DavItem.deleted).is_(False))
        .order_by(col(DavItem.name))
    )
    return [(name, revision) for name, revision in (await db.exec(statement)).all()]


async def changed_since(
    *, db: AsyncSession, list_id: uuid.UUID, revision: int
) -> list[tuple[str, bool]]:
    """The items changed after `revision`: (name, gone)."""
    statement = (
        select(col(DavItem.name), col(DavItem.deleted))
        .where(col(DavItem.list_id) == list_id, col(DavItem.revision) > revision)
        .order_by(col(DavItem.revision))
    )
    return [(name, deleted) for name, deleted in (await db.exec(statement)).all()]


async def task_of_uid(*, db: AsyncSession, list_id: uuid.UUID, uid: str) -> uuid.UUID | None:
    statement = select(col(DavItem.task_id)).where(
        col(DavItem.list_id) == list_id, col(DavItem.uid) == uid, col(DavItem.deleted).is_(False)
    )
    found: uuid.UUID | None = (await db.exec(statement)).first()
    return found


async def claim(
    *,
    db: AsyncSession,
    list_id: uuid.UUID,
    task_id: uuid.UUID,
    name: str | None,
    uid: str | None,
    extra: str | None,
) -> int:
    """Give a task's item the name and UID the client chose (a tombstone of that name
    makes way) and what the client sent that the service does not model; its revision."""
    if name is not None:
        await db.exec(
            delete(DavItem).where(
                col(DavItem.list_id) == list_id,
                col(DavItem.name) == name,
                col(DavItem.deleted),
                or_(col(DavItem.task_id).is_(None), col(DavItem.task_id) != task_id),
            )
        )
    values: dict[str, Any] = {"extra": extra}
    if name is not None:
        values["name"] = name
    if uid is not None:
        values["uid"] = uid
    statement = (
        update(DavItem)
        .where(col(DavItem.list_id) == list_id, col(DavItem.task_id) == task_id)
        .values(**values)
        .returning(col(DavItem.revision))
    )
    revision: int = (await db.exec(statement)).scalar_one()
    return revision
