"""Probe responses."""

from typing import Literal

from sqlmodel import SQLModel


class Health(SQLModel):
    status: Literal["ok"]


class Readiness(SQLModel):
    # draining: shutting down (SIGTERM); the turns in flight finish, no new ones start.
    status: Literal["ready", "unavailable", "draining"]
    database: bool
    migrations: str
