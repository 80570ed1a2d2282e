"""Named dependencies: a route's signature says what it needs."""

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Header, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.auth import Identity
from backend.context import AppContext
from backend.errors import InvalidToken, UserMismatch
from backend.services.agent import OpenAIAgentService
from backend.services.users import upsert_user


# Plain functions, but `async def`: FastAPI runs a sync dependency in its threadpool.
async def get_context(request: Request) -> AppContext:
    context: AppContext = request.app.state.context
    return context


Context = Annotated[AppContext, Depends(get_context)]


_bearer = HTTPBearer(auto_error=False, description="A JWT whose `sub` is the user id.")


async def current_identity(
    context: Context,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Identity:
    if credentials is None:
        raise InvalidToken()
    return await context.verifier.verify(credentials.credentials)


async def signed_in_user(
    user_id: Annotated[str, Path(min_length=1, max_length=255)],
    identity: Annotated[Identity, Depends(current_identity)],
) -> Identity:
    """The signed-in user, who must be the one the path names (not created here)."""
    if user_id != identity.user_id:
        raise UserMismatch()
    return identity


# For erasing an account: signing in does not make the account first.
SignedInUser = Annotated[Identity, Depends(signed_in_user)]


async def current_user(identity: SignedInUser, context: Context) -> Identity:
    """The signed-in user, who must be the one the path names; created on first sight."""
    await ensure_user(context, identity)
    return identity


async def ensure_user(context: AppContext, identity: Identity) -> None:
    """Create the user on first sight (once per process; see KnownUsers)."""
    if identity.user_id not in context.known_users:
        async with context.database.transaction(as_user=identity.user_id) as db:
            await upsert_user(db=db, identity=identity)
        context.known_users.add(identity.user_id)


CurrentUser = Annotated[Identity, Depends(current_user)]


async def get_db(context: Context, user: CurrentUser) -> AsyncIterator[AsyncSession]:
    """The request's unit of work, acting for the signed-in user (row-level security holds
    it to their rows and their lists')."""
    async with context.database.transaction(as_user=user.user_id) as db:
        yield db


# Committed before the response is sent, so a 2xx means the change is durable.
DbSession = Annotated[AsyncSession, Depends(get_db, scope="function")]


async def get_snapshot(context: Context, user: CurrentUser) -> AsyncIterator[AsyncConnection]:
    """A read-only snapshot of the signed-in user's rows (Database.snapshot)."""
    async with context.database.snapshot(as_user=user.user_id) as connection:
        yield connection


# Held until the response has been sent: a streamed answer reads from it as it goes.
Snapshot = Annotated[AsyncConnection, Depends(get_snapshot)]


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=255,
        description="A retry with the same key gets the first answer and changes nothing.",
    ),
]


async def get_agent(context: Context) -> OpenAIAgentService:
    return context.agent


Agent = Annotated[OpenAIAgentService, Depends(get_agent)]
