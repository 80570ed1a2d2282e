"""The person's memories: what the assistant remembers about them, to see, change, erase."""

import uuid

from fastapi import APIRouter, Response, status

from backend.deps import CurrentUser, DbSession
from backend.models.errors import API_ERRORS
from backend.models.memory import MemoriesPublic, MemoryCreate, MemoryPublic, MemoryUpdate
from backend.services.memory import store

router = APIRouter(prefix="/api/{user_id}/memories", tags=["memories"], responses=API_ERRORS)


@router.get("", operation_id="listMemories")
async def list_memories(user: CurrentUser, db: DbSession) -> MemoriesPublic:
    """The memories, newest first: every model call carries them (as many as fit)."""
    return await store.list_memories(db=db, owner=user.user_id)


@router.post("", status_code=status.HTTP_201_CREATED, operation_id="createMemory")
async def create_memory(user: CurrentUser, db: DbSession, data: MemoryCreate) -> MemoryPublic:
    """Tell the assistant something to remember, in your own words."""
    memory = await store.create_memory(db=db, owner=user.user_id, text=data.text, created_by="user")
    return store.public(memory)


@router.patch("/{memory_id}", operation_id="updateMemory")
async def update_memory(
    user: CurrentUser, db: DbSession, memory_id: uuid.UUID, data: MemoryUpdate
) -> MemoryPublic:
    """Change a memory's text; the very next model call carries the new one."""
    memory = await store.update_memory(
        db=db, owner=user.user_id, memory_id=memory_id, text=data.text
    )
    return store.public(memory)


@router.delete("/{memory_id}", status_code=status.HTTP_204_NO_CONTENT, operation_id="deleteMemory")
async def delete_memory(user: CurrentUser, db: DbSession, memory_id: uuid.UUID) -> Response:
    """Forget one memory."""
    await store.delete_memory(db=db, owner=user.user_id, memory_id=memory_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.delete("", status_code=status.HTTP_204_NO_CONTENT, operation_id="deleteAllMemories")
async def delete_all_memories(user: CurrentUser, db: DbSession) -> Response:
    """Forget everything the assistant remembers about you."""
    await store.delete_all(db=db, owner=user.user_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
