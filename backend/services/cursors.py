"""Opaque page cursors: a position in an order (a number, or a time and an id), as text."""

import base64
import json
import uuid
from datetime import datetime
from typing import Any

from backend.errors import DomainError


class InvalidCursor(DomainError):
    status_code = 422
    detail = "Invalid cursor."


def encode(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def decode(cursor: str) -> Any:
    try:
        return json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except ValueError as invalid:
        raise InvalidCursor() from invalid


def encode_position(at: datetime, row_id: uuid.UUID) -> str:
    """The cursor after the row with this (time, id) in a newest-first order."""
    return encode([at.isoformat(), str(row_id)])


def decode_position(cursor: str) -> tuple[datetime, uuid.UUID]:
    position = decode(cursor)
    if not (
        isinstance(position, list)
        and len(position) == 2
        and all(isinstance(part, str) for part in position)
    ):
        raise InvalidCursor()
    try:
        at, row_id = datetime.fromisoformat(position[0]), uuid.UUID(position[1])
    except ValueError as invalid:
        raise InvalidCursor() from invalid
    if at.tzinfo is None:
        raise InvalidCursor()
    return at, row_id
