"""Users are created on first sight from their verified token."""

from collections import OrderedDict

from sqlalchemy import func
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.auth import Identity
from backend.errors import AccountBeingErased
from backend.models.user import User
from backend.services import access


class KnownUsers:
    """Which users this process has already written, so the upsert runs once per user and
    process, not once per request. An erased user is forgotten (`discard`) by every
    process: this one as its erasure begins and ends, the others when the database tells
    them (`todo_agent_forget_user`, see EventHub), so that their next request writes the
    row again, a new and empty account, instead of acting for a user who is gone."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, user_id: str) -> bool:
        if user_id in self._seen:
            self._seen.move_to_end(user_id)
            return True
        return False

    def discard(self, user_id: str) -> None:
        self._seen.pop(user_id, None)

    def add(self, user_id: str) -> None:
        self._seen[user_id] = None
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)


async def upsert_user(*, db: AsyncSession, identity: Identity) -> None:
    """Create the user (and their Inbox), or refresh the profile claims the token carries.
    The transaction acts for that user. An account being erased is not touched: 409 until
    its erasure is done (then this makes a new one)."""
    statement = insert(User).values(id=identity.user_id, email=identity.email, name=identity.name)
    statement = statement.on_conflict_do_update(
        index_elements=[col(User.id)],
        set_={
            "email": func.coalesce(statement.excluded.email, col(User.email)),
            "name": func.coalesce(statement.excluded.name, col(User.name)),
            "updated_at": func.now(),
        },
        where=col(User.erasing_at).is_(None),
    )
    if (await db.exec(statement.returning(col(User.id)))).first() is None:
        raise AccountBeingErased()
    await access.inbox(db)
