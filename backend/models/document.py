"""Documents in lists and their passages: Document, Passage (tables) -> DocumentCreate /
DocumentPublic / DocumentsPublic / DocumentText, PassagePublic / PassagesPublic."""

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field as PydanticField
from pydantic import StringConstraints
from sqlalchemy import (
    Column,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    String,
    UniqueConstraint,
)
from sqlalchemy import Text as TextColumn
from sqlalchemy import text as sql
from sqlalchemy.dialects.postgresql import TSVECTOR
from sqlmodel import Field, SQLModel

from backend.models._types import NotBlank, Text, Timestamp

MediaType = Literal["text/markdown", "text/plain", "text/html", "application/pdf"]
DocumentTitle = Annotated[
    Text, StringConstraints(strip_whitespace=True, min_length=1, max_length=200), NotBlank
]


class Document(SQLModel, table=True):
    __tablename__ = "documents"
    __table_args__ = (
        UniqueConstraint("list_id", "id", name="uq_documents_list_id"),
        Index("ix_documents_list_created", "list_id", "created_at"),
        Index("ix_documents_created_by", "created_by"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    list_id: uuid.UUID = Field(
        sa_column=Column(ForeignKey("lists.id", ondelete="CASCADE"), nullable=False)
    )
    title: str = Field(max_length=200)
    media_type: str = Field(max_length=100)
    bytes: int = Field(sa_column=Column(Integer, nullable=False))
    # The document as Markdown (Markdown, HTML and PDF alike) or plain text.
    text: str = Field(sa_column=Column(TextColumn, nullable=False))
    created_by: str | None = Field(
        default=None,
        sa_column=Column(String(255), ForeignKey("users.id", ondelete="SET NULL"), nullable=True),
    )
    created_at: datetime = Timestamp()
    updated_at: datetime = Timestamp()
    # Grows by one each time the document is replaced.
    version: int = Field(
        default=1, sa_column=Column(Integer, nullable=False, server_default=sql("1"))
    )


class Passage(SQLModel, table=True):
    """A section of a document (or a part of a long one), what search finds. Its id lasts
    while its content (`content_hash`: title, heading and text) does."""

    __tablename__ = "passages"
    __table_args__ = (
        ForeignKeyConstraint(
            ["list_id", "document_id"],
            ["documents.list_id", "documents.id"],
            name="fk_passages_document",
            ondelete="CASCADE",
            onupdate="CASCADE",
        ),
        Index("ix_passages_document", "document_id", "ordinal"),
        Index("ix_passages_list", "list_id"),
        Index("ix_passages_search", "search", postgresql_using="gin"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    document_id: uuid.UUID = Field(nullable=False)
    list_id: uuid.UUID = Field(nullable=False)
    ordinal: int = Field(sa_column=Column(Integer, nullable=False))
    heading: str = Field(sa_column=Column(TextColumn, nullable=False))  # its heading path
    text: str = Field(sa_column=Column(TextColumn, nullable=False))
    content_hash: str = Field(max_length=64)
    search: str = Field(sa_column=Column(TSVECTOR, nullable=False))


class DocumentCreate(SQLModel):
    """A document given as text (JSON), rather than as a file."""

    title: DocumentTitle
    text: Annotated[Text, PydanticField(min_length=1)]
    list_id: uuid.UUID | None = PydanticField(
        default=None, description="A list's id (default: your Inbox)."
    )
    media_type: Literal["text/markdown", "text/plain"] = "text/markdown"


class DocumentPublic(SQLModel):
    id: uuid.UUID
    list_id: uuid.UUID
    title: str
    media_type: str
    bytes: int = PydanticField(description="The size of the file (or text) as sent.")
    passages: int = PydanticField(description="How many passages it was cut into.")
    created_by: str | None
    created_at: datetime
    updated_at: datetime


class DocumentsPublic(SQLModel):
    data: list[DocumentPublic]


class DocumentText(DocumentPublic):
    text: str = PydanticField(description="The document as Markdown or plain text.")


class PassagePublic(SQLModel):
    document_id: uuid.UUID
    title: str = PydanticField(description="The document's title.")
    media_type: str = PydanticField(
        description="The document's media type, as uploaded (text/markdown, text/plain, "
        "text/html, application/pdf); the passage's text is Markdown or plain text."
    )
    heading: str = PydanticField(description='Its heading path: "Moving \u203a Week before".')
    text: str
    score: float = PydanticField(description="Higher is better; comparable within one answer.")


class PassagesPublic(SQLModel):
    data: list[PassagePublic]
