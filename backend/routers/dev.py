"""Development sign-in: only present when this dev server made its own JWT secret."""

from fastapi import APIRouter

from backend.deps import Context
from backend.models.dev import DevTokenPublic, DevTokenRequest
from backend.services.dev_sign_in import mint_dev_token

# Not in the OpenAPI document: production has no such route, and the schema is the same
# in every environment.
router = APIRouter(prefix="/dev", tags=["development"], include_in_schema=False)


@router.post("/token", operation_id="devToken")
async def dev_token(context: Context, data: DevTokenRequest) -> DevTokenPublic:
    """A token for the name given (the user id is derived from it); development only."""
    minted = mint_dev_token(settings=context.settings, name=data.name)
    return DevTokenPublic(
        token=minted.token, user_id=minted.user_id, name=minted.name, expires_in=minted.expires_in
    )
