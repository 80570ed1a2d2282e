"""The user's settings: name, timezone, standing instructions for the assistant, model."""

from fastapi import APIRouter

from backend.deps import Context, CurrentUser, DbSession
from backend.models.errors import API_ERRORS
from backend.models.user import UserSettingsPublic, UserSettingsUpdate
from backend.services import settings

router = APIRouter(prefix="/api/{user_id}/settings", tags=["settings"], responses=API_ERRORS)


@router.get("", operation_id="getSettings")
async def get_settings(user: CurrentUser, db: DbSession, context: Context) -> UserSettingsPublic:
    """The user's settings, with the models they may choose from."""
    return await settings.get_settings(db=db, owner=user.user_id, config=context.settings)


@router.patch("", operation_id="updateSettings")
async def update_settings(
    user: CurrentUser, db: DbSession, context: Context, data: UserSettingsUpdate
) -> UserSettingsPublic:
    """Change the settings sent; `null` returns one to its default. Instructions are the
    user's preferences: the service's own rules stay above them."""
    return await settings.update_settings(
        db=db, owner=user.user_id, data=data, config=context.settings
    )
