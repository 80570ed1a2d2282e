"""A user's settings: how the assistant addresses them, their timezone, their standing
instructions, the model of their turns (from the operator's allowlist) and which of the
agent's calls wait for their yes."""

from typing import Any

from sqlalchemy import func, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import NotFound, UnknownModel
from backend.models.user import User, UserSettingsPublic, UserSettingsUpdate
from backend.settings import Settings


def _public(user: User, config: Settings) -> UserSettingsPublic:
    return UserSettingsPublic(
        display_name=user.display_name,
        timezone=user.timezone,
        instructions=user.instructions,
        model=config.model_for(user.model),
        models=config.allowed_models,
        confirm=user.confirm or config.agent_confirm_default,  # type: ignore[arg-type]
    )


async def get_settings(*, db: AsyncSession, owner: str, config: Settings) -> UserSettingsPublic:
    user = (await db.exec(select(User).where(col(User.id) == owner))).one_or_none()
    if user is None:
        raise NotFound("User not found.")
    return _public(user, config)


async def update_settings(
    *, db: AsyncSession, owner: str, data: UserSettingsUpdate, config: Settings
) -> UserSettingsPublic:
    """Change the fields sent; a model must be one the operator allows."""
    changes: dict[str, Any] = data.model_dump(exclude_unset=True)
    if changes.get("model") is not None and changes["model"] not in config.allowed_models:
        raise UnknownModel(f"Unknown model; choose one of: {', '.join(config.allowed_models)}.")
    if "instructions" in changes:
        changes["instructions"] = changes["instructions"] or None  # "" clears them too
    if not changes:
        return await get_settings(db=db, owner=owner, config=config)
    statement = (
        update(User)
        .where(col(User.id) == owner)
        .values(**changes, updated_at=func.now())
        .returning(User)
    )
    user = (await db.exec(statement)).scalars().one_or_none()
    if user is None:
        raise NotFound("User not found.")
    return _public(user, config)
