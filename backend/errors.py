"""Domain errors that know their HTTP meaning, and the one place that renders them."""

import logging
import math
from typing import TYPE_CHECKING

# The errors themselves need nothing of the web framework or the database library: a
# document reader (services/documents/reading.py, a process of its own) raises them and
# imports this module without either. Rendering them does, and imports them where it does.
if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from sqlalchemy.exc import DBAPIError

logger = logging.getLogger("todo_agent.errors")


class DomainError(Exception):
    status_code = 400
    detail = "Bad request."

    def __init__(self, detail: str | None = None, *, headers: dict[str, str] | None = None):
        super().__init__(detail or self.detail)
        if detail is not None:
            self.detail = detail
        self.headers = headers or {}


class InvalidToken(DomainError):
    status_code = 401
    detail = "Invalid or missing bearer token."

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": "Bearer"})


class UserMismatch(DomainError):
    status_code = 403
    detail = "The user id in the path is not the signed-in user."


class WebhookNotVerified(DomainError):
    """A webhook whose signature does not verify, or whose timestamp is too far off."""

    status_code = 401
    detail = "The webhook's signature does not verify."


class NotAllowed(DomainError):
    """A member's role does not allow this (a viewer's write, an editor sharing)."""

    status_code = 403
    detail = "Your role in this list does not allow that."


class NotFound(DomainError):
    status_code = 404
    detail = "Not found."


class TaskNotFound(NotFound):
    detail = "Task not found."


class SessionNotFound(NotFound):
    detail = "Session not found."


class ListNotFound(NotFound):
    detail = "List not found."


class DocumentNotFound(NotFound):
    detail = "Document not found."


class MemoryNotFound(NotFound):
    detail = "Memory not found."


class InvitationNotFound(NotFound):
    detail = "No such invitation (it may have been used, revoked or have expired)."


class ApprovalNotFound(NotFound):
    detail = "No such approval."


class StepsHaveNoSteps(DomainError):
    status_code = 422
    detail = "That task is a step; a step cannot have steps of its own."


class UnreadableDocument(DomainError):
    """A file that is not what it says, empty, not UTF-8, encrypted, without text, or one
    its parser could not read within the time and memory it is given."""

    status_code = 422
    detail = "The document cannot be read."


class UnsupportedDocumentType(DomainError):
    status_code = 415
    detail = (
        "Documents are Markdown (.md), plain text (.txt), HTML (.html) or PDF (.pdf); "
        "this file is none of them."
    )


class NotAMember(DomainError):
    status_code = 422
    detail = "That user is not a member of this list."


class InvalidSchedule(DomainError):
    """A repeat rule or reminder that cannot be used as given (never occurs, in the past)."""

    status_code = 422
    detail = "That schedule cannot be used."


class InvalidLastEventId(DomainError):
    status_code = 422
    detail = "Last-Event-ID must be the id of an event of this stream (a whole number)."


class InvalidTurnEventId(DomainError):
    status_code = 422
    detail = (
        "Last-Event-ID must be the id of an event of this turn's stream (<attempt>-<seq>, "
        "such as 0-12)."
    )


class CalendarNotFound(NotFound):
    detail = "No calendar feed here."


class InvalidImport(DomainError):
    """An export document that validates but cannot be added as it is (nothing is)."""

    status_code = 422
    detail = "The document cannot be imported; nothing was imported."


class UnknownModel(DomainError):
    status_code = 422
    detail = "That model is not one this service offers."


class Conflict(DomainError):
    status_code = 409
    detail = "Conflict."


class ListConflict(Conflict):
    """A list name its owner has already, a change to the Inbox, the owner leaving."""

    detail = "That cannot be done to this list."


class NotInTrash(Conflict):
    detail = "That task is not in the trash."


class ApprovalNotPending(Conflict):
    detail = "That approval is not waiting for an answer."


class NothingToUndo(Conflict):
    detail = "Nothing to undo in this session."


class UndoConflict(Conflict):
    detail = "A task that turn changed has changed since, so nothing was undone."


class SessionBusy(Conflict):
    detail = "This session is busy with another message; try again when it has answered."


class AccountBeingErased(Conflict):
    detail = "This account is being erased; once that is done, signing in starts a new one."


class WebhookReplayed(Conflict):
    detail = "This webhook message was received before; it is not acted on twice."


class TurnTakenOver(Conflict):
    """A turn whose lease lapsed (its replica stalled) and that another replica took over:
    the stalled one writes nothing more."""

    detail = "This message is being answered elsewhere; its answer will be in the session."


class IdempotencyKeyReused(DomainError):
    status_code = 422
    detail = "This Idempotency-Key was already used with a different request body."


class PayloadTooLarge(DomainError):
    status_code = 413
    detail = "Request body too large."


class DocumentTooLarge(PayloadTooLarge):
    """A document over DOCUMENT_MAX_BYTES, or past its list owner's DOCUMENT_QUOTA_BYTES."""

    detail = "The document is too large."


class RetryLater(DomainError):
    """An error the client should retry after some seconds (Retry-After)."""

    def __init__(self, detail: str | None = None, *, retry_after_s: float) -> None:
        super().__init__(detail, headers={"Retry-After": str(max(1, math.ceil(retry_after_s)))})


class RateLimited(RetryLater):
    status_code = 429
    detail = "Too many chat messages; slow down."


class FeedRateLimited(RetryLater):
    status_code = 429
    detail = "This calendar feed is being read too often; try again later."


class IdempotencyInProgress(RetryLater):
    """The key's request is still running (here, or being finished by another replica)."""

    status_code = 409
    detail = "A request with this Idempotency-Key is still running; retry later."

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(detail, retry_after_s=1)


class DatabaseUnavailable(RetryLater):
    status_code = 503
    detail = "The database is unavailable; retry shortly."

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(detail, retry_after_s=2)


class ShuttingDown(RetryLater):
    """A new turn asked of a replica that is draining (SIGTERM): another replica takes it."""

    status_code = 503
    detail = "This server is shutting down; retry shortly."

    def __init__(self) -> None:
        super().__init__(retry_after_s=1)


class TurnHandedOver(RetryLater):
    """A turn still running when its replica's shutdown grace ran out: it was handed to
    another replica, which finishes it; the same Idempotency-Key gets its answer there."""

    status_code = 503
    detail = (
        "This server shut down while answering; another one is finishing the answer. "
        "Retry with the same Idempotency-Key, or read the session."
    )

    def __init__(self) -> None:
        super().__init__(retry_after_s=2)


def error_response(error: DomainError) -> "JSONResponse":
    from fastapi.responses import JSONResponse

    return JSONResponse({"detail": error.detail}, error.status_code, headers=error.headers)


async def _domain_error(_: "Request", error: Exception) -> "JSONResponse":
    assert isinstance(error, DomainError)
    return error_response(error)


async def _validation_error(_: "Request", error: Exception) -> "JSONResponse":
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    assert isinstance(error, RequestValidationError)
    # The ctx of a pydantic error may hold the exception object itself; keep it printable.
    details = [
        {key: value for key, value in item.items() if key in ("loc", "msg", "type")}
        for item in error.errors()
    ]
    return JSONResponse({"detail": details}, 422)


def _refused_data_sqlstate(error: "DBAPIError") -> str | None:
    """The SQLSTATE when PostgreSQL (or the driver, encoding a parameter) refused a value:
    class 22, "data exception". asyncpg's come wrapped as plain DBAPIError, not DataError."""
    sqlstate = getattr(error.orig, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate.startswith("22"):
        return sqlstate
    from sqlalchemy.exc import DataError

    return "22000" if isinstance(error, DataError) else None


class AccountErased(Conflict):
    detail = "This account was erased while the request ran; send it again to start a new one."


def _user_gone(error: "DBAPIError") -> bool:
    """A row refused because the user it names is no longer in `users`: erased (by another
    process, which this one had not heard of yet) after the request began."""
    orig = error.orig
    return getattr(orig, "sqlstate", None) == "23503" and 'table "users"' in str(
        getattr(orig, "detail", None) or orig
    )


async def _database_error(request: "Request", error: Exception) -> "JSONResponse":
    from fastapi.responses import JSONResponse
    from sqlalchemy.exc import DBAPIError

    assert isinstance(error, DBAPIError)
    if _user_gone(error):
        # Forget the user here too, so their next request makes the account anew.
        if (user_id := request.path_params.get("user_id")) is not None:
            request.app.state.context.known_users.discard(user_id)
        return error_response(AccountErased())
    sqlstate = _refused_data_sqlstate(error)
    if sqlstate is None:
        raise error  # not the client's doing: on to the server-error handler, a 500
    # Input the validators let through but PostgreSQL refuses: still the client's data.
    logger.warning("database refused the data: SQLSTATE %s", sqlstate)
    return JSONResponse({"detail": "The request contains data that cannot be stored."}, 422)


async def _unexpected(_: "Request", error: Exception) -> "JSONResponse":
    from fastapi.responses import JSONResponse

    logger.exception("unhandled error", exc_info=error)
    return JSONResponse({"detail": "Internal server error."}, 500)


def install_error_handlers(app: "FastAPI") -> None:
    from fastapi.exceptions import RequestValidationError
    from sqlalchemy.exc import DBAPIError

    app.add_exception_handler(DomainError, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(DBAPIError, _database_error)
    app.add_exception_handler(Exception, _unexpected)
