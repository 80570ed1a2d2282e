"""Documents in lists: upload (a file, or text), list, read, replace, delete; search."""

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from backend.deps import Context, CurrentUser, DbSession
from backend.errors import UnsupportedDocumentType
from backend.models.document import (
    DocumentCreate,
    DocumentPublic,
    DocumentsPublic,
    DocumentText,
    PassagesPublic,
)
from backend.models.errors import API_ERRORS, error_responses
from backend.services.documents import search, store

router = APIRouter(prefix="/api/{user_id}/documents", tags=["documents"], responses=API_ERRORS)
_WRITES = error_responses(413, 415)
# One body, two forms: a file (multipart) or text (JSON).
_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "list_id": {"type": "string", "format": "uuid"},
                        "title": {"type": "string", "maxLength": 200},
                    },
                }
            },
            "application/json": {"schema": DocumentCreate.model_json_schema()},
        },
    }
}
ListFilter = Annotated[uuid.UUID | None, Query(description="Only this list's.")]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    operation_id="createDocument",
    responses=_WRITES,
    openapi_extra=_BODY,
)
async def create_document(user: CurrentUser, context: Context, request: Request) -> DocumentPublic:
    """Add a document to a list (default: the Inbox): a Markdown, text, HTML or PDF file, or
    text as JSON."""
    source, list_id, title = await _source(request, context.settings.document_max_bytes)
    return await store.add_document(database=context.database, user=user.user_id,
                                    source=source, settings=context.settings,
                                    list_id=list_id, title=title)  # fmt: skip


@router.get("", operation_id="listDocuments")
async def list_documents(
    user: CurrentUser, db: DbSession, list_id: ListFilter = None
) -> DocumentsPublic:
    """The documents the user reads (of one list, when given), newest first."""
    return await store.list_documents(db=db, user=user.user_id, list_id=list_id)


@router.get("/search", operation_id="searchDocuments")
async def search_documents(
    user: CurrentUser,
    db: DbSession,
    q: Annotated[
        str, Query(min_length=1, max_length=500, description='A person\'s words; "quoted" phrases.')
    ],
    list_id: ListFilter = None,
    limit: Annotated[int, Query(ge=1, le=search.MAX_LIMIT)] = 5,
) -> PassagesPublic:
    """Passages of the documents the user reads, best first, for the words of `q`."""
    found = await search.search_passages(
        db, user=user.user_id, query=q, list_id=list_id, limit=limit
    )
    return PassagesPublic(data=[hit.public() for hit in found])


@router.api_route("/search", methods=["PUT", "DELETE"], include_in_schema=False)
async def search_is_read_only() -> JSONResponse:
    """The search is not a document: without this, PUT and DELETE would reach the document
    routes and be refused as a malformed id (422) instead of as a method (405)."""
    return JSONResponse({"detail": "Method Not Allowed."}, 405, headers={"Allow": "GET"})


@router.get("/{document_id}", operation_id="getDocument")
async def get_document(user: CurrentUser, db: DbSession, document_id: uuid.UUID) -> DocumentText:
    """A document, with its text (Markdown or plain text)."""
    return await store.get_document(db=db, document_id=document_id)


@router.put(
    "/{document_id}", operation_id="replaceDocument", responses=_WRITES, openapi_extra=_BODY
)
async def replace_document(
    user: CurrentUser, context: Context, request: Request, document_id: uuid.UUID
) -> DocumentPublic:
    """Replace a document's content (a file, or text as JSON); owners and editors."""
    source, list_id, title = await _source(request, context.settings.document_max_bytes)
    return await store.replace_document(database=context.database, user=user.user_id,
                                        document_id=document_id, source=source,
                                        settings=context.settings, list_id=list_id,
                                        title=title)  # fmt: skip


@router.delete(
    "/{document_id}", status_code=status.HTTP_204_NO_CONTENT, operation_id="deleteDocument"
)
async def delete_document(user: CurrentUser, db: DbSession, document_id: uuid.UUID) -> Response:
    """Delete a document (owners and editors of its list)."""
    await store.delete_document(db=db, user=user.user_id, document_id=document_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


async def _source(
    request: Request, max_bytes: int
) -> tuple[store.Source, uuid.UUID | None, str | None]:
    """The document a request sends: a multipart `file` (with `list_id` and `title`
    fields), or a JSON DocumentCreate."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        try:
            return DocumentCreate.model_validate_json(await request.body()), None, None
        except ValidationError as invalid:
            raise RequestValidationError(invalid.errors(include_url=False)) from None
    if kind != "multipart/form-data":
        raise UnsupportedDocumentType("Send the document as multipart/form-data or JSON.")
    async with request.form(max_files=1, max_fields=4) as form:
        file = form.get("file")
        if not isinstance(file, UploadFile):
            raise _invalid("file", "a file is required")
        data = await file.read(max_bytes + 1)
        fields = {name: form.get(name) for name in ("list_id", "title")}
    list_id = fields["list_id"] if isinstance(fields["list_id"], str) else None
    title = fields["title"].strip() if isinstance(fields["title"], str) else None
    try:
        parsed_list = uuid.UUID(list_id) if list_id else None
    except ValueError:
        raise _invalid("list_id", "must be a list's id (a UUID)") from None
    if title and len(title) > 200:
        raise _invalid("title", "must have at most 200 characters")
    upload = store.Upload(data, file.filename, file.content_type)
    return upload, parsed_list, title or None


def _invalid(field: str, message: str) -> RequestValidationError:
    return RequestValidationError([{"loc": ("body", field), "msg": message, "type": "value_error"}])
