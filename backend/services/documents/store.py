"""Documents kept in lists, for one reader: added, listed, read, replaced, deleted.

A list's members read its documents; its owner and editors change them (`access`), and
row-level security holds the same line (migration 0011). A document is read (parsed, in a
process of its own) before any transaction opens, so that a slow file holds no database
connection; then one transaction checks the list, the size and the quota, and stores the
document with its passages, or nothing. The database writes the `document.*` events.
"""

import hashlib
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Table, delete, func, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.db import Database
from backend.errors import DocumentNotFound, DocumentTooLarge, NotAllowed
from backend.models.document import (
    Document,
    DocumentCreate,
    DocumentPublic,
    DocumentsPublic,
    DocumentText,
    Passage,
)
from backend.services import access
from backend.services.documents.reading import Reading, media_type_of, name_title, read_isolated
from backend.settings import Settings

_DOCUMENTS: Table = Document.__table__  # type: ignore[attr-defined]
_BYTES_USED = text("SELECT todo_document_bytes(:list)")
# A passage's words: the document's title above its heading path above its body.
_ADD_PASSAGES = text(
    "INSERT INTO passages (id, document_id, list_id, ordinal, heading, text, content_hash,"
    " search)"
    " SELECT u.id, :document, :list, u.ordinal, u.heading, u.text, u.hash,"
    " setweight(to_tsvector('english', :title), 'A')"
    " || setweight(to_tsvector('english', u.heading), 'B')"
    " || setweight(to_tsvector('english', u.text), 'D')"
    " FROM unnest(CAST(:ids AS uuid[]), CAST(:ordinals AS integer[]), CAST(:headings AS text[]),"
    " CAST(:texts AS text[]), CAST(:hashes AS text[])) AS u(id, ordinal, heading, text, hash)"
)
_MOVE_PASSAGES = text(
    "UPDATE passages SET ordinal = u.ordinal"
    " FROM unnest(CAST(:ids AS uuid[]), CAST(:ordinals AS integer[])) AS u(id, ordinal)"
    " WHERE passages.id = u.id AND passages.ordinal <> u.ordinal"
)


@dataclass(frozen=True, slots=True)
class Upload:
    """A file as sent: its bytes, and the name and content type the client gave it."""

    data: bytes
    filename: str | None = None
    content_type: str | None = None


Source = Upload | DocumentCreate


@dataclass(frozen=True, slots=True)
class _Read:
    reading: Reading
    title: str
    size: int


async def _read(source: Source, title: str | None, settings: Settings) -> _Read:
    """The document a source holds, read in a process of its own: 413 over
    DOCUMENT_MAX_BYTES, 415 for a type not read, 422 for what cannot be read."""
    data = source.text.encode() if isinstance(source, DocumentCreate) else source.data
    if len(data) > settings.document_max_bytes:
        raise DocumentTooLarge(
            f"The document is {len(data)} bytes; at most {settings.document_max_bytes} are taken."
        )
    if isinstance(source, DocumentCreate):
        reading = await read_isolated(data, source.media_type)
        return _Read(reading, title or source.title, len(data))
    reading = await read_isolated(data, media_type_of(source.filename, source.content_type))
    chosen = title or reading.title or name_title(source.filename) or "Untitled"
    return _Read(reading, chosen, len(data))


async def add_document(
    *,
    database: Database,
    user: str,
    source: Source,
    settings: Settings,
    list_id: uuid.UUID | None = None,
    title: str | None = None,
) -> DocumentPublic:
    """A new document in a list the user writes (default: their Inbox)."""
    read = await _read(source, title, settings)
    async with database.transaction(as_user=user) as db:
        if list_id is None and isinstance(source, DocumentCreate):
            list_id = source.list_id
        target = await _writable(db, user=user, list_id=list_id)
        await within_quota(db, list_id=target, adding=read.size, settings=settings)
        document_id = await insert_document(
            db, user=user, list_id=target, title=read.title, reading=read.reading, size=read.size
        )
        return await _public(db, document_id)


async def insert_document(
    db: AsyncSession,
    *,
    user: str,
    list_id: uuid.UUID,
    title: str,
    reading: Reading,
    size: int,
    created_at: datetime | None = None,
) -> uuid.UUID:
    """A document read, stored in a list with its passages (no checks: the caller's)."""
    document_id = uuid.uuid4()
    when = {} if created_at is None else {"created_at": created_at, "updated_at": created_at}
    await db.exec(
        insert(Document).values(
            id=document_id,
            list_id=list_id,
            title=title,
            media_type=reading.media_type,
            bytes=size,
            text=reading.text,
            created_by=user,
            **when,
        )
    )
    read = _Read(reading, title, size)
    await _store_passages(db, document_id=document_id, list_id=list_id, read=read, old=[])
    return document_id


async def replace_document(
    *,
    database: Database,
    user: str,
    document_id: uuid.UUID,
    source: Source,
    settings: Settings,
    list_id: uuid.UUID | None = None,
    title: str | None = None,
) -> DocumentPublic:
    """The document's content replaced (and moved, when another list is named); passages
    whose content is unchanged keep their ids."""
    read = await _read(source, title, settings)
    async with database.transaction(as_user=user) as db:
        found = await _found(db, document_id)
        await _writable(db, user=user, list_id=found.list_id)
        if list_id is None and isinstance(source, DocumentCreate):
            list_id = source.list_id
        target = found.list_id if list_id is None else list_id
        if target != found.list_id:
            await _writable(db, user=user, list_id=target)
        await within_quota(db, list_id=target, adding=read.size - found.bytes, settings=settings)
        await db.exec(
            update(Document)
            .where(col(Document.id) == document_id)
            .values(
                list_id=target,
                title=read.title,
                media_type=read.reading.media_type,
                bytes=read.size,
                text=read.reading.text,
                version=col(Document.version) + 1,
                updated_at=func.now(),
            )
        )
        old = (
            await db.exec(
                select(col(Passage.id), col(Passage.content_hash)).where(
                    col(Passage.document_id) == document_id
                )
            )
        ).all()
        await _store_passages(db, document_id=document_id, list_id=target, read=read, old=old)
        return await _public(db, document_id)


async def list_documents(
    *, db: AsyncSession, user: str, list_id: uuid.UUID | None = None
) -> DocumentsPublic:
    """The documents the user reads (of one list, when given), newest first."""
    if list_id is not None:
        await access.membership(db, user=user, list_id=list_id)  # not a member: 404
    statement = _shown().where(access.reachable(user, col(Document.list_id)))
    if list_id is not None:
        statement = statement.where(col(Document.list_id) == list_id)
    rows = (await db.exec(statement.order_by(col(Document.created_at).desc()))).all()
    return DocumentsPublic(data=[_document_public(row) for row in rows])


async def get_document(*, db: AsyncSession, document_id: uuid.UUID) -> DocumentText:
    row = (await db.exec(_shown(with_text=True).where(col(Document.id) == document_id))).first()
    if row is None:
        raise DocumentNotFound()
    return DocumentText.model_validate(row._mapping)


async def delete_document(*, db: AsyncSession, user: str, document_id: uuid.UUID) -> None:
    found = await _found(db, document_id)
    await _writable(db, user=user, list_id=found.list_id)
    await db.exec(delete(Document).where(col(Document.id) == document_id))


# -- the pieces ---------------------------------------------------------------------------


def _shown(*, with_text: bool = False) -> Any:
    passages = (
        select(func.count())
        .select_from(Passage)
        .where(col(Passage.document_id) == col(Document.id))
        .correlate(_DOCUMENTS)
        .scalar_subquery()
        .label("passages")
    )
    columns = [c for c in _DOCUMENTS.c if c.name not in ("text", "version")]
    if with_text:
        columns.append(_DOCUMENTS.c.text)
    return select(*columns, passages)  # type: ignore[call-overload]


def _document_public(row: Any) -> DocumentPublic:
    return DocumentPublic.model_validate(row._mapping)


async def _public(db: AsyncSession, document_id: uuid.UUID) -> DocumentPublic:
    row = (await db.exec(_shown().where(col(Document.id) == document_id))).one()
    return _document_public(row)


async def _found(db: AsyncSession, document_id: uuid.UUID) -> Document:
    """A document the acting user reads (row-level security)."""
    statement = select(Document).where(col(Document.id) == document_id)
    found = (await db.exec(statement)).first()
    if found is None:
        raise DocumentNotFound()
    return found


async def _writable(db: AsyncSession, *, user: str, list_id: uuid.UUID | None) -> uuid.UUID:
    """A list whose documents the user may change: 404 when they are not a member, 403 for
    a viewer; no list named: their Inbox."""
    if list_id is None:
        return await access.inbox(db)
    found = await access.membership(db, user=user, list_id=list_id)
    if not found.allows("write"):
        raise NotAllowed(
            f"You are a {found.role} of list “{found.name}”: you cannot change its documents."
        )
    return list_id


async def within_quota(
    db: AsyncSession, *, list_id: uuid.UUID, adding: int, settings: Settings
) -> None:
    """413 when `adding` bytes would take the list owner's documents past the quota."""
    used: int = (await db.exec(_BYTES_USED, params={"list": list_id})).scalar_one()  # type: ignore[call-overload]
    if adding > 0 and used + adding > settings.document_quota_bytes:
        raise DocumentTooLarge(
            f"The documents of this list's owner would take {used + adding} bytes; their "
            f"quota is {settings.document_quota_bytes}. Delete some documents first."
        )


def content_hash(title: str, heading: str, body: str) -> str:
    """What a passage says, as a vector would be computed from it."""
    return hashlib.sha256(f"{title}\x1f{heading}\x1f{body}".encode()).hexdigest()


async def _store_passages(
    db: AsyncSession,
    *,
    document_id: uuid.UUID,
    list_id: uuid.UUID,
    read: _Read,
    old: Any,
) -> None:
    """The document's passages as `read` cuts it: an old passage with the same content
    stays (its id too, moved to its new place), the others go, new ones are added."""
    unused: dict[str, list[uuid.UUID]] = defaultdict(list)
    for passage_id, digest in old:
        unused[digest].append(passage_id)
    kept: list[tuple[uuid.UUID, int]] = []
    added: list[tuple[uuid.UUID, int, str, str, str]] = []
    for ordinal, passage in enumerate(read.reading.passages):
        digest = content_hash(read.title, passage.heading, passage.text)
        if unused[digest]:
            kept.append((unused[digest].pop(), ordinal))
        else:
            added.append((uuid.uuid4(), ordinal, passage.heading, passage.text, digest))
    if gone := [passage_id for ids in unused.values() for passage_id in ids]:
        await db.exec(delete(Passage).where(col(Passage.id).in_(gone)))
    if kept:
        ids, ordinals = zip(*kept, strict=True)
        await db.exec(_MOVE_PASSAGES, params={"ids": list(ids), "ordinals": list(ordinals)})  # type: ignore[call-overload]
    if added:
        ids, ordinals, headings, texts, hashes = zip(*added, strict=True)
        await db.exec(
            _ADD_PASSAGES,  # type: ignore[call-overload]
            params={
                "document": document_id,
                "list": list_id,
                "title": read.title,
                "ids": list(ids),
                "ordinals": list(ordinals),
                "headings": list(headings),
                "texts": list(texts),
                "hashes": list(hashes),
            },
        )
