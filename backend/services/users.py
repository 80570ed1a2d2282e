"""Users are created on first sight from their verified token."""

from collections import OrderedDict

from sqlalchemy import func
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.auth import Identity
from backend.models.user import User
from backend.services import access


class KnownUsers:
    """Which users this process has already written, so the upsert runs once per user and
    process, not once per request. Users are never deleted, so a stale entry is harmless."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, user_id: str) -> bool:
        if user_id in self._seen:
            self._seen.move_to_end(user_id)
            return True
        return False

    def add(self, user_id: str) -> None:
        self._seen[user_id] = None
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)


async def upsert_user(*, db: AsyncSession, identity: Identity) -> None:
    """Create the user (and their Inbox), or refresh the profile claims the token carries.
    The transaction acts for that user."""
    statement = insert(User).values(id=identity.user_id, email=identity.email, name=identity.name)
    statement = statement.on_conflict_do_update(
        index_elements=[col(User.id)],
        set_={
            "email": func.coalesce(statement.excluded.email, col(User.email)),
            "name": func.coalesce(statement.excluded.name, col(User.name)),
            "updated_at": func.now(),
        },
    )
    await db.exec(statement)
    await access.inbox(db)
