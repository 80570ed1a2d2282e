"""What the stub reads of a person's documents: their titles, a document's text, and the
passages a search finds. Reading only, through the documents services (search is the very
one behind the `search_documents` tool), each call in a transaction acting as the person,
so row-level security decides what they may read. Every change the stub makes still goes
through the tools."""

import uuid

from backend.db import Database
from backend.errors import DocumentNotFound
from backend.models.document import DocumentPublic
from backend.services.documents import search, store
from backend.services.documents.search import PassageHit
from backend.services.embeddings import Embeddings
from backend.services.stub.calls import Stop

# How many passages a search brings, for the stub to keep those of the document named.
SEARCHED = search.MAX_LIMIT


class Shelf:
    def __init__(
        self, database: Database, *, user: str, semantic: Embeddings | None = None
    ) -> None:
        self._database = database
        self._user = user
        self._semantic = semantic  # search by meaning too, as the tool does
        self._documents: list[DocumentPublic] | None = None

    async def documents(self) -> list[DocumentPublic]:
        """The documents the person reads, newest first (asked once)."""
        if self._documents is None:
            async with self._database.transaction(as_user=self._user) as db:
                self._documents = (await store.list_documents(db=db, user=self._user)).data
        return self._documents

    async def text(self, document_id: uuid.UUID) -> str:
        try:
            async with self._database.transaction(as_user=self._user) as db:
                return (await store.get_document(db=db, document_id=document_id)).text
        except DocumentNotFound:  # deleted, or its list left, since it was listed
            raise Stop("That document is gone from your lists.") from None

    async def search(self, query: str) -> list[PassageHit]:
        """The best passages for `query` in every document the person reads."""
        return await search.search_documents(
            database=self._database,
            semantic=self._semantic,
            user=self._user,
            query=query,
            list_id=None,
            limit=SEARCHED,
        )
