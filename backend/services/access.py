"""Who may reach what, and do what: one rule, in one place.

A task is reachable by the members of its list and by nobody else; a list is reachable by
its members. What a member may do follows from their role (`ROLE_ACTIONS`, the way Todoist
tabulates roles and actions). Every service asks here instead of writing its own WHERE:
`member_of` for the lists a user reaches, `Membership.require` for what a role allows.
Membership is read from the database on each request, never from a token, so a removed
member loses access at once.

PostgreSQL holds the same line a second time: row-level security (migration 0007) lets the
service's role see only the acting user's rows and those of their lists, whatever a query
forgot to say.
"""

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, Select, text
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import ListNotFound, NotAllowed
from backend.models.list import INBOX, ListMember, TodoList

Action = Literal["read", "write", "manage"]
ROLE_ACTIONS: dict[str, frozenset[Action]] = {
    "owner": frozenset({"read", "write", "manage"}),  # manage: rename, share, delete the list
    "editor": frozenset({"read", "write"}),  # add, change, complete, delete, restore, assign
    "viewer": frozenset({"read"}),
}
_DOING: dict[Action, str] = {
    "read": "read it",
    "write": "change its tasks",
    "manage": "rename, share or delete it (only its owner can)",
}
_INBOX = text("SELECT todo_inbox()")


def member_of(user: str, *, action: Action = "read") -> Select[Any]:
    """The ids of the lists `user` is a member of with a role that allows `action`."""
    roles = [role for role, actions in ROLE_ACTIONS.items() if action in actions]
    return select(col(ListMember.list_id)).where(
        col(ListMember.user_id) == user, col(ListMember.role).in_(roles)
    )


def reachable(user: str, list_id: Any, *, action: Action = "read") -> ColumnElement[bool]:
    """`list_id` (a column) is one of the user's lists that allows `action`."""
    return list_id.in_(member_of(user, action=action))  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Membership:
    """A user's place in a list: the list, its name, and their role in it."""

    list_id: uuid.UUID
    name: str
    role: str
    inbox: bool
    owner_id: str

    def allows(self, action: Action) -> bool:
        return action in ROLE_ACTIONS[self.role]

    def require(self, action: Action) -> "Membership":
        if not self.allows(action):
            raise NotAllowed(
                f"You are a {self.role} of list “{self.name}”: you cannot {_DOING[action]}."
            )
        return self


async def membership(db: AsyncSession, *, user: str, list_id: uuid.UUID) -> Membership:
    """The user's membership of a list; not a member: not found, as for any foreign id."""
    statement: Any = (
        select(  # type: ignore[call-overload]
            col(TodoList.id),
            col(TodoList.name),
            col(ListMember.role),
            col(TodoList.inbox),
            col(TodoList.owner_id),
        )
        .join(ListMember, col(ListMember.list_id) == col(TodoList.id))
        .where(col(TodoList.id) == list_id, col(ListMember.user_id) == user)
    )
    row = (await db.exec(statement)).one_or_none()
    if row is None:
        raise ListNotFound()
    return Membership(*row)


async def inbox(db: AsyncSession) -> uuid.UUID:
    """The acting user's Inbox, made on first use."""
    found: uuid.UUID = (await db.exec(_INBOX)).scalar_one()  # type: ignore[call-overload]
    return found


async def own_inbox(db: AsyncSession, *, user: str) -> Membership:
    """The user's place in their own Inbox (the acting user's): its owner, always."""
    return Membership(await inbox(db), INBOX, "owner", True, user)
