"""The person's memories as rows: listed newest first, written by the person (REST), by
the model or the stub (the `remember` tool), found by id or by words (`forget`), and taken
back with the turn that saved them (undo). Every change writes its event by trigger
(migration 0019), in its own transaction."""

import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import delete, text
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import MemoryNotFound
from backend.models.memory import MemoriesPublic, Memory, MemoryPublic, MemorySource

# A chat turn's: (its session, the assistant message whose call saved it).
Source = tuple[uuid.UUID, uuid.UUID]


class AmbiguousMemory(Exception):
    """Words that match more than one memory: these."""

    def __init__(self, candidates: Sequence[Memory]) -> None:
        super().__init__()
        self.candidates = list(candidates)


def public(memory: Memory) -> MemoryPublic:
    source = (
        MemorySource(session_id=memory.source_session_id, message_id=memory.source_message_id)
        if memory.source_session_id is not None
        else None
    )
    return MemoryPublic(
        id=memory.id,
        text=memory.text,
        created_at=memory.created_at,
        updated_at=memory.updated_at,
        created_by=memory.created_by,  # type: ignore[arg-type]  # the table's check holds it
        source=source,
    )


async def list_memories(*, db: AsyncSession, owner: str) -> MemoriesPublic:
    """All of the person's memories, newest first."""
    found = await db.exec(
        select(Memory)
        .where(Memory.user_id == owner)
        .order_by(col(Memory.created_at).desc(), col(Memory.id).desc())
    )
    return MemoriesPublic(data=[public(memory) for memory in found.all()])


async def create_memory(
    *, db: AsyncSession, owner: str, text: str, created_by: str, source: Source | None = None
) -> Memory:
    now = datetime.now(UTC)
    memory = Memory(
        user_id=owner,
        text=text,
        created_by=created_by,
        created_at=now,
        updated_at=now,
        source_session_id=source[0] if source else None,
        source_message_id=source[1] if source else None,
    )
    db.add(memory)
    await db.flush()
    return memory


async def get_memory(*, db: AsyncSession, owner: str, memory_id: uuid.UUID) -> Memory:
    memory = (
        await db.exec(select(Memory).where(Memory.user_id == owner, Memory.id == memory_id))
    ).first()
    if memory is None:
        raise MemoryNotFound()
    return memory


async def update_memory(*, db: AsyncSession, owner: str, memory_id: uuid.UUID, text: str) -> Memory:
    memory = await get_memory(db=db, owner=owner, memory_id=memory_id)
    memory.text = text
    memory.updated_at = datetime.now(UTC)
    db.add(memory)
    await db.flush()
    return memory


async def delete_memory(*, db: AsyncSession, owner: str, memory_id: uuid.UUID) -> Memory:
    memory = await get_memory(db=db, owner=owner, memory_id=memory_id)
    await db.delete(memory)
    await db.flush()
    return memory


async def delete_all(*, db: AsyncSession, owner: str) -> None:
    """Forget everything: each memory's `memory.deleted` event is written by the trigger."""
    await db.exec(delete(Memory).where(col(Memory.user_id) == owner))


_WORD = re.compile(r"[\w']+")
# Words that say nothing about which memory is meant.
_FILLER = frozenset(
    [
        "a", "an", "the", "that", "this", "my", "me", "i", "i'm", "is", "are", "was", "be",
        "to", "of", "about", "for", "and", "or", "it", "its", "it's", "what", "you", "your",
        "please", "memory", "memories", "fact", "remember", "forget",
    ]
)  # fmt: skip


def words(phrase: str) -> set[str]:
    """The words of a phrase that can tell memories apart, lower-cased."""
    return {w for w in _WORD.findall(phrase.casefold()) if w not in _FILLER}


def matching(texts: Sequence[str], phrase: str) -> list[int]:
    """Which of the memories' texts a phrase names (their indexes): the one it says word
    for word, else those holding all of its telling words ("gate code")."""
    said = " ".join(_WORD.findall(phrase.casefold()))
    exact = [i for i, t in enumerate(texts) if " ".join(_WORD.findall(t.casefold())) == said]
    if exact:
        return exact
    wanted = words(phrase)
    if not wanted:
        return []
    return [i for i, t in enumerate(texts) if wanted <= words(t)]


async def find(*, db: AsyncSession, owner: str, ref: str) -> Memory:
    """The memory `ref` names: its id, or words that match it (and no other). Raises
    MemoryNotFound, or AmbiguousMemory with the candidates."""
    try:
        return await get_memory(db=db, owner=owner, memory_id=uuid.UUID(ref.strip()))
    except ValueError:
        pass
    mine = (await db.exec(select(Memory).where(Memory.user_id == owner))).all()
    found = [mine[i] for i in matching([m.text for m in mine], ref)]
    if not found:
        raise MemoryNotFound(f"No memory matches {ref!r}.")
    if len(found) > 1:
        raise AmbiguousMemory(found)
    return found[0]


# What a turn saved, taken back with it (services/undo.py).
_UNDO = text(
    "DELETE FROM memories WHERE source_message_id = :message AND created_by <> 'user'"
    " RETURNING text"
)


async def undo_turn(db: AsyncConnection, *, message_id: uuid.UUID) -> list[str]:
    """Remove the memories the turn (its assistant message) saved; their texts."""
    return list((await db.execute(_UNDO, {"message": message_id})).scalars().all())
