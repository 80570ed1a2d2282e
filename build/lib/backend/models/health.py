"""Probe responses."""

from typing import Literal

from sqlmodel import SQLModel


class Health(SQLModel):
    status: Literal["ok"]


class Readiness(SQLModel):
    status: Literal["ready", "unavailable"]
    database: bool
    migrations: str
