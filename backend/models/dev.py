"""Development sign-in's request and response."""

from typing import Annotated, Literal

from pydantic import StringConstraints
from sqlmodel import SQLModel

from backend.models._types import NotBlank, Text


class DevTokenRequest(SQLModel):
    name: Annotated[Text, StringConstraints(min_length=1, max_length=100), NotBlank]


class DevTokenPublic(SQLModel):
    token: str
    token_type: Literal["bearer"] = "bearer"
    user_id: str
    name: str
    expires_in: int
