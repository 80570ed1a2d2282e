"""The shape of every error answer, and the error statuses each router documents."""

from typing import Any

from sqlmodel import SQLModel


class ValidationIssue(SQLModel):
    """One problem with the request, as `backend.errors` reports request validation."""

    loc: list[str | int]
    msg: str
    type: str


class ErrorResponse(SQLModel):
    detail: str | list[ValidationIssue]


def _header(description: str) -> dict[str, Any]:
    return {"description": description, "required": True, "schema": {"type": "string"}}


_RETRY_AFTER = {"Retry-After": _header("Seconds to wait before retrying.")}
_ERRORS: dict[int, dict[str, Any]] = {
    400: {"description": "The request body could not be read (for example, not UTF-8)."},
    401: {
        "description": "Missing, invalid or expired bearer token.",
        "headers": {"WWW-Authenticate": _header("Bearer")},
    },
    403: {"description": "The user id in the path is not the signed-in user."},
    404: {"description": "No such session or task for this user."},
    409: {"description": "The session is busy, or a request with this Idempotency-Key runs."},
    413: {"description": "Request body too large."},
    415: {"description": "A document of a type that is not read."},
    422: {"description": "Validation failed: a list of problems, or one sentence."},
    429: {"description": "Too many chat messages.", "headers": _RETRY_AFTER},
    503: {
        "description": "The database or identity provider is unavailable.",
        "headers": _RETRY_AFTER,
    },
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for these error statuses, all answered as ErrorResponse."""
    return {code: {"model": ErrorResponse, **_ERRORS[code]} for code in codes}


# What any /api route can answer: a body it cannot read, auth, tenancy, an id that is not
# the user's, a body over the size cap, validation (declared here so that FastAPI does not
# document its own list-only 422), and a database that is down.
API_ERRORS = error_responses(400, 401, 403, 404, 413, 422, 503)
