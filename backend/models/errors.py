"""The shape of every error answer."""

from typing import Any

from sqlmodel import SQLModel


class ErrorResponse(SQLModel):
    detail: str | list[dict[str, Any]]
