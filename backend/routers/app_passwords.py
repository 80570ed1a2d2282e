"""App passwords: what a CalDAV client (a phone's Reminders, Thunderbird, DAVx5) signs in
with."""

import uuid

from fastapi import APIRouter, Response, status

from backend.deps import CurrentUser, DbSession
from backend.models.dav import AppPasswordCreate, AppPasswordCreated, AppPasswordsPublic
from backend.models.errors import API_ERRORS
from backend.services.caldav import passwords

router = APIRouter(
    prefix="/api/{user_id}/app-passwords", tags=["app-passwords"], responses=API_ERRORS
)


@router.post("", status_code=status.HTTP_201_CREATED, operation_id="createAppPassword")
async def create_app_password(
    user: CurrentUser, db: DbSession, data: AppPasswordCreate
) -> AppPasswordCreated:
    """Make a password for one device's CalDAV client; `password` is shown this once."""
    return await passwords.create(db=db, user=user.user_id, data=data)


@router.get("", operation_id="listAppPasswords")
async def list_app_passwords(user: CurrentUser, db: DbSession) -> AppPasswordsPublic:
    """The user's app passwords (never the passwords themselves), oldest first."""
    return await passwords.list_passwords(db=db, user=user.user_id)


@router.delete(
    "/{password_id}", status_code=status.HTTP_204_NO_CONTENT, operation_id="revokeAppPassword"
)
async def revoke_app_password(user: CurrentUser, db: DbSession, password_id: uuid.UUID) -> Response:
    """Revoke an app password: it fails at once, on every replica."""
    await passwords.revoke(db=db, user=user.user_id, password_id=password_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
