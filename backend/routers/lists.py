"""Lists: the user's own and those shared with them; members; invitations."""

import uuid
from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from backend.deps import CurrentUser, DbSession
from backend.models.errors import API_ERRORS, error_responses
from backend.models.list import (
    InvitationCreate,
    InvitationPublic,
    ListCreate,
    ListPublic,
    ListsPublic,
    ListUpdate,
    MemberPublic,
    MembersPublic,
    MemberUpdate,
)
from backend.services import lists

router = APIRouter(prefix="/api/{user_id}", tags=["lists"], responses=API_ERRORS)
_OWNERS = error_responses(403, 409)
MemberId = Annotated[str, Path(min_length=1, max_length=255, description="A member's user id.")]
Token = Annotated[str, Path(min_length=1, max_length=200, description="An invitation's secret.")]


@router.get("/lists", operation_id="listLists")
async def list_lists(user: CurrentUser, db: DbSession) -> ListsPublic:
    """The user's lists (the Inbox first) and the lists shared with them, with their role."""
    return await lists.list_lists(db=db, user=user.user_id)


@router.post(
    "/lists",
    status_code=status.HTTP_201_CREATED,
    operation_id="createList",
    responses=error_responses(409),
)
async def create_list(user: CurrentUser, db: DbSession, data: ListCreate) -> ListPublic:
    """A new list of the user's own (409 for a name they already have, in any case)."""
    return await lists.create_list(db=db, user=user.user_id, data=data)


@router.get("/lists/{list_id}", operation_id="getList")
async def get_list(user: CurrentUser, db: DbSession, list_id: uuid.UUID) -> ListPublic:
    """One of the user's lists (any member)."""
    return await lists.get_list(db=db, user=user.user_id, list_id=list_id)


@router.patch("/lists/{list_id}", operation_id="renameList", responses=_OWNERS)
async def rename_list(
    user: CurrentUser, db: DbSession, list_id: uuid.UUID, data: ListUpdate
) -> ListPublic:
    """Rename a list (its owner; the Inbox keeps its name)."""
    return await lists.rename_list(db=db, user=user.user_id, list_id=list_id, data=data)


@router.delete(
    "/lists/{list_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="deleteList",
    responses=_OWNERS,
)
async def delete_list(user: CurrentUser, db: DbSession, list_id: uuid.UUID) -> Response:
    """Delete a list (its owner): its tasks go to the owner's trash; every member loses it."""
    await lists.delete_list(db=db, user=user.user_id, list_id=list_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/lists/{list_id}/members", operation_id="listMembers")
async def list_members(user: CurrentUser, db: DbSession, list_id: uuid.UUID) -> MembersPublic:
    """Who shares the list, and with which role (any member); the owner first."""
    return await lists.members(db=db, user=user.user_id, list_id=list_id)


@router.patch(
    "/lists/{list_id}/members/{member_id}", operation_id="changeMemberRole", responses=_OWNERS
)
async def change_member_role(
    user: CurrentUser, db: DbSession, list_id: uuid.UUID, member_id: MemberId, data: MemberUpdate
) -> MemberPublic:
    """Make a member an editor or a viewer (the owner)."""
    return await lists.change_role(
        db=db, user=user.user_id, list_id=list_id, member=member_id, role=data.role
    )


@router.delete(
    "/lists/{list_id}/members/{member_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="removeMember",
    responses=_OWNERS,
)
async def remove_member(
    user: CurrentUser, db: DbSession, list_id: uuid.UUID, member_id: MemberId
) -> Response:
    """Remove a member (the owner), or leave (a member removing themself); the owner cannot
    leave their own list."""
    await lists.remove_member(db=db, user=user.user_id, list_id=list_id, member=member_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/lists/{list_id}/invitations",
    status_code=status.HTTP_201_CREATED,
    operation_id="inviteToList",
    responses=_OWNERS,
)
async def invite(
    user: CurrentUser, db: DbSession, list_id: uuid.UUID, data: InvitationCreate
) -> InvitationPublic:
    """An invitation to the list with a role (the owner): a secret, stored only hashed, good
    for one acceptance within 7 days."""
    return await lists.invite(db=db, user=user.user_id, list_id=list_id, data=data)


@router.delete(
    "/lists/{list_id}/invitations/{token}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="revokeInvitation",
    responses=error_responses(403),
)
async def revoke_invitation(
    user: CurrentUser, db: DbSession, list_id: uuid.UUID, token: Token
) -> Response:
    """Revoke an invitation that has not been used (the owner)."""
    await lists.revoke(db=db, user=user.user_id, list_id=list_id, token=token)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/invitations/{token}/accept", operation_id="acceptInvitation", responses=error_responses(409)
)
async def accept_invitation(user: CurrentUser, db: DbSession, token: Token) -> ListPublic:
    """Join the list an invitation is for, with its role; it is used up (404 when unknown,
    used, revoked or expired; 409 for the owner's own)."""
    return await lists.accept(db=db, user=user.user_id, token=token)
