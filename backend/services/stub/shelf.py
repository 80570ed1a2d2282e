"""What the stub reads of a person's documents to find the one a message names: their
titles, and a document's text. Reading only, through the documents services, each call in
a transaction acting as the person, so row-level security decides what they may read.
Passages are searched with the `search_documents` tool, as a model searches them (so the
turn records the call and its passages are the answer's sources), and every change the
stub makes goes through the tools too."""

import uuid

from backend.db import Database
from backend.errors import DocumentNotFound
from backend.models.document import DocumentPublic
from backend.services.documents import store
from backend.services.stub.calls import Stop


class Shelf:
    def __init__(self, database: Database, *, user: str) -> None:
        self._database = database
        self._user = user
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
