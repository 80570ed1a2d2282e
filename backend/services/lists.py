"""Lists, and sharing them by invitation.

Every user has an Inbox (made on first use; it cannot be renamed, shared or deleted). A
list's owner renames, shares and deletes it; members come in by a single-use invitation
(stored only as its SHA-256, good for 7 days) with the role it names, and leave, or are
removed by the owner. Each change is an event for every member (`todo_list_event`).
What each role may do is `access`'s.
"""

import hashlib
import json
import secrets
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, exc, func, insert, text, update
from sqlalchemy.orm import aliased
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import InvitationNotFound, ListConflict, NotAMember
from backend.models.list import (
    InvitationCreate,
    InvitationPublic,
    ListCreate,
    ListInvitation,
    ListMember,
    ListPublic,
    ListsPublic,
    ListUpdate,
    MemberPublic,
    MembersPublic,
    TodoList,
)
from backend.models.task import Task
from backend.services import access

INVITATION_DAYS = 7
_EVENT = text("SELECT todo_list_event(:list, :kind, :also, CAST(:extra AS jsonb))")
_MEMBERS = text("SELECT * FROM todo_list_members(:list)")
_ACCEPT = text("SELECT list, outcome FROM todo_accept_invitation(:hashed)")
_UNIQUE_VIOLATION = "23505"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def announce(
    db: AsyncSession, *, list_id: uuid.UUID, kind: str, also: str | None = None, extra: str = "{}"
) -> None:
    """The list's event `kind` to each of its members (and to `also`), in this transaction."""
    connection = await db.connection()
    await connection.execute(_EVENT, {"list": list_id, "kind": kind, "also": also, "extra": extra})


def _shown(user: str) -> Any:
    """The user's lists: (list, their role, whether shared, its pending tasks)."""
    others = aliased(ListMember)
    members = (
        select(func.count())
        .select_from(others)
        .where(others.list_id == col(TodoList.id))
        .correlate(TodoList)
    )
    pending = (
        select(func.count())
        .select_from(Task)
        .where(
            col(Task.list_id) == col(TodoList.id),
            col(Task.completed).is_(False),
            col(Task.deleted_at).is_(None),
        )
        .correlate(TodoList)
    )
    return (
        select(
            TodoList,
            col(ListMember.role),
            members.scalar_subquery() > 1,
            pending.scalar_subquery(),
        )
        .join(ListMember, col(ListMember.list_id) == col(TodoList.id))
        .where(col(ListMember.user_id) == user)
    )


def _public(row: Any) -> ListPublic:
    todo_list, role, shared, pending = row
    return ListPublic.model_validate(
        todo_list, update={"role": role, "shared": shared, "pending_count": pending}
    )


async def list_lists(*, db: AsyncSession, user: str) -> ListsPublic:
    """The user's lists and those shared with them: the Inbox first, then by age."""
    await access.inbox(db)
    statement = _shown(user).order_by(
        col(TodoList.inbox).desc(), col(TodoList.created_at), col(TodoList.name)
    )
    rows = (await db.exec(statement)).all()
    return ListsPublic(data=[_public(row) for row in rows])


async def get_list(*, db: AsyncSession, user: str, list_id: uuid.UUID) -> ListPublic:
    statement = _shown(user).where(col(TodoList.id) == list_id)
    row = (await db.exec(statement)).one_or_none()
    if row is None:
        await access.membership(db, user=user, list_id=list_id)  # raises ListNotFound
    return _public(row)


async def create_list(
    *, db: AsyncSession, user: str, data: ListCreate, list_id: uuid.UUID | None = None
) -> ListPublic:
    """A new list of the user's own (with the id a CalDAV client chose, if given); a name
    they already own, in any case, is 409."""
    list_id = list_id or uuid.uuid4()
    await _named(db, insert(TodoList).values(id=list_id, owner_id=user, name=data.name), data)
    await db.exec(insert(ListMember).values(list_id=list_id, user_id=user, role="owner"))
    await announce(db, list_id=list_id, kind="list.created")
    return await get_list(db=db, user=user, list_id=list_id)


async def _named(db: AsyncSession, statement: Any, data: ListCreate | ListUpdate) -> None:
    """Run a statement that names a list; a name its owner has already is 409."""
    try:
        async with db.begin_nested():
            await db.exec(statement)
    except exc.IntegrityError as taken:
        if getattr(taken.orig, "sqlstate", None) != _UNIQUE_VIOLATION:
            raise
        raise ListConflict(f"You already have a list called “{data.name}”.") from None


async def rename_list(
    *, db: AsyncSession, user: str, list_id: uuid.UUID, data: ListUpdate
) -> ListPublic:
    found = (await access.membership(db, user=user, list_id=list_id)).require("manage")
    if found.inbox:
        raise ListConflict("The Inbox keeps its name.")
    renamed = update(TodoList).where(col(TodoList.id) == list_id)
    await _named(db, renamed.values(name=data.name, updated_at=func.now()), data)
    await announce(db, list_id=list_id, kind="list.updated")
    return await get_list(db=db, user=user, list_id=list_id)


async def delete_list(*, db: AsyncSession, user: str, list_id: uuid.UUID) -> None:
    """Delete a list: its tasks go to the owner's trash (in their Inbox: restoring one
    brings it back there), and every member loses it (`list.deleted`)."""
    found = (await access.membership(db, user=user, list_id=list_id)).require("manage")
    if found.inbox:
        raise ListConflict("The Inbox cannot be deleted.")
    # Out of every member's lists first (one task.deleted each), then into the owner's
    # Inbox: the top-level tasks, their steps with them (the parent foreign key cascades).
    await db.exec(
        update(Task)
        .where(col(Task.list_id) == list_id, col(Task.deleted_at).is_(None))
        .values(deleted_at=func.now(), updated_at=func.now())
    )
    await db.exec(
        update(Task)
        .where(col(Task.list_id) == list_id, col(Task.parent_id).is_(None))
        .values(list_id=await access.inbox(db), assignee_id=None)
    )
    await announce(db, list_id=list_id, kind="list.deleted")
    await db.exec(delete(TodoList).where(col(TodoList.id) == list_id))


async def members(*, db: AsyncSession, user: str, list_id: uuid.UUID) -> MembersPublic:
    await access.membership(db, user=user, list_id=list_id)
    connection = await db.connection()
    rows = (await connection.execute(_MEMBERS, {"list": list_id})).all()
    return MembersPublic(data=[MemberPublic.model_validate(row._mapping) for row in rows])


async def change_role(
    *, db: AsyncSession, user: str, list_id: uuid.UUID, member: str, role: str
) -> MemberPublic:
    found = (await access.membership(db, user=user, list_id=list_id)).require("manage")
    if member == found.owner_id:
        raise ListConflict("The owner's role cannot change.")
    changed = (
        await db.exec(
            update(ListMember)
            .where(col(ListMember.list_id) == list_id, col(ListMember.user_id) == member)
            .values(role=role)
            .returning(col(ListMember.user_id))
        )
    ).first()
    if changed is None:
        raise NotAMember(f"{member!r} is not a member of this list.")
    await announce(db, list_id=list_id, kind="list.updated")
    listed = await members(db=db, user=user, list_id=list_id)
    return next(m for m in listed.data if m.user_id == member)


async def remove_member(*, db: AsyncSession, user: str, list_id: uuid.UUID, member: str) -> None:
    """The owner removes anyone but themself; a member removes themself (leaves). The one
    removed loses the list at once: their next request finds nothing, and no event of it
    reaches them again."""
    found = await access.membership(db, user=user, list_id=list_id)
    if member != user:
        found.require("manage")
    if member == found.owner_id:
        raise ListConflict("The owner cannot leave their own list; delete it instead.")
    target = select(col(ListMember.user_id)).where(
        col(ListMember.list_id) == list_id, col(ListMember.user_id) == member
    )
    if (await db.exec(target)).first() is None:
        raise NotAMember(f"{member!r} is not a member of this list.")
    await announce(db, list_id=list_id, kind="list.member_removed", also=member,
                 extra=_member_json(member))  # fmt: skip
    await db.exec(
        update(Task)
        .where(col(Task.list_id) == list_id, col(Task.assignee_id) == member)
        .values(assignee_id=None, updated_at=func.now())
    )
    await db.exec(
        delete(ListMember).where(
            col(ListMember.list_id) == list_id, col(ListMember.user_id) == member
        )
    )


def _member_json(member: str, role: str | None = None) -> str:
    return json.dumps({"member": {"user_id": member, "role": role}})


async def invite(
    *, db: AsyncSession, user: str, list_id: uuid.UUID, data: InvitationCreate
) -> InvitationPublic:
    found = (await access.membership(db, user=user, list_id=list_id)).require("manage")
    if found.inbox:
        raise ListConflict("The Inbox cannot be shared; share another list.")
    token = secrets.token_urlsafe(32)
    statement = (
        insert(ListInvitation)
        .values(
            token_hash=digest(token),
            list_id=list_id,
            role=data.role,
            created_by=user,
            expires_at=func.now() + timedelta(days=INVITATION_DAYS),
        )
        .returning(col(ListInvitation.expires_at))
    )
    expires_at = (await db.exec(statement)).scalar_one()
    return InvitationPublic(token=token, role=data.role, expires_at=expires_at)


async def revoke(*, db: AsyncSession, user: str, list_id: uuid.UUID, token: str) -> None:
    (await access.membership(db, user=user, list_id=list_id)).require("manage")
    revoked = await db.exec(
        delete(ListInvitation)
        .where(col(ListInvitation.list_id) == list_id)
        .where(col(ListInvitation.token_hash) == digest(token))
        .returning(col(ListInvitation.token_hash))
    )
    if revoked.first() is None:
        raise InvitationNotFound()


async def accept(*, db: AsyncSession, user: str, token: str) -> ListPublic:
    """Join the list an invitation is for, with its role; it is used up. Unknown, used,
    revoked or expired: 404; the owner's own: 409."""
    connection = await db.connection()
    row = (await connection.execute(_ACCEPT, {"hashed": digest(token)})).one()
    if row.list is None:
        raise InvitationNotFound()
    if row.outcome == "owner":
        raise ListConflict("This is your own list; send the invitation to someone else.")
    await announce(
        db, list_id=row.list, kind="list.member_added", extra=_member_json(user, row.outcome)
    )
    return await get_list(db=db, user=user, list_id=row.list)
