"""A person's data is theirs: download all of it, bring it to another account, erase it."""

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from backend.deps import Context, CurrentUser, DbSession, SignedInUser, Snapshot
from backend.models.errors import API_ERRORS
from backend.models.portability import ExportDocument, ImportResult
from backend.services import erasure, portability

router = APIRouter(prefix="/api/{user_id}", tags=["account"], responses=API_ERRORS)
_ATTACHMENT = 'attachment; filename="todo-agent-export.json"'


@router.get(
    "/export",
    operation_id="exportAccount",
    response_class=StreamingResponse,
    responses={
        200: {
            "model": ExportDocument,
            "description": "The export document, as a JSON attachment.",
            "content": {"application/json": {}},
            "headers": {
                "Content-Disposition": {
                    "description": _ATTACHMENT,
                    "schema": {"type": "string"},
                }
            },
        }
    },
)
async def export_account(user: CurrentUser, snapshot: Snapshot) -> StreamingResponse:
    """Everything the service holds about the user, as one JSON document
    (`todo-agent-export/1`), streamed: settings, the lists they own with all their tasks
    (steps, repetition, reminders, the trash), the lists shared with them (name and role),
    every session with each message, tool call and result. Never a secret, nothing of
    another person's."""
    body = await portability.export(snapshot, user=user.user_id)
    return StreamingResponse(
        body, media_type="application/json", headers={"Content-Disposition": _ATTACHMENT}
    )


async def _document(request: Request) -> ExportDocument:
    """The body as an export document: read whole (up to IMPORT_MAX_BYTES), then validated
    before any database work begins."""
    try:
        return ExportDocument.model_validate_json(await request.body())
    except ValidationError as invalid:
        raise RequestValidationError(
            [{**error, "loc": ("body", *error["loc"])} for error in invalid.errors()]
        ) from None


@router.post(
    "/import",
    operation_id="importAccount",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/ExportDocument"}}
            },
        }
    },
)
async def import_account(
    user: CurrentUser,
    document: Annotated[ExportDocument, Depends(_document)],
    db: DbSession,
    context: Context,
) -> ImportResult:
    """Add an export document's lists, tasks and sessions (from this or another instance)
    to the user's account as new rows, in one transaction; a document that is not one, or
    refers to what it does not hold, is 422 and imports nothing. Up to IMPORT_MAX_BYTES
    (50 MB), whatever the body cap of other routes."""
    return await portability.import_document(
        db=db, user=user.user_id, document=document, config=context.settings
    )


@router.delete("", status_code=status.HTTP_204_NO_CONTENT, operation_id="deleteAccount")
async def delete_account(user: SignedInUser, context: Context) -> Response:
    """Erase the user: every row about them (tasks and lists they own, memberships,
    sessions, messages, settings, events...), in short transactions; one `user.deleted`
    event is left for the webhook. A new token for the same user starts an empty account.
    Also 204 when the service holds nothing of theirs."""
    await erasure.erase(context.database, user.user_id, forget=context.known_users.discard)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
