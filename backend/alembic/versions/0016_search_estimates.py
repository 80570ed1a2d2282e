"""search's functions tell the planner how few rows they return

Revision ID: 0016
Revises: 0015

Search now asks for both rankings and their passages in one statement (`rankings`,
backend/services/documents/search.py). A set-returning function is assumed to return 1,000
rows unless it says otherwise, and with that guess the planner joined every passage the
reader holds to the rankings (80 ms at 10,000 passages, against 12 ms probing the few by
id): each function now says about how many it returns in the service's use (`ROWS`).
"""

from collections.abc import Sequence
from importlib import import_module

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Connection

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SEARCH = "todo_search_passages(text[], boolean[], uuid, integer)"
_NEAREST = "todo_nearest_passages(text, vector, uuid, integer)"
# What the service asks of each (search.DEPTH, search.MEANING_DEPTH), near enough.
_SEARCH_ROWS, _NEAREST_ROWS = 50, 10

_vectors = import_module("backend.alembic.versions.0012_passage_vectors")


def revise(connection: Connection) -> None:
    """The nearest passages' function as this revision has it, where passages' vectors are
    (also for a database that gets pgvector after this revision ran: migrations.py)."""
    if _vectors.present(connection):
        connection.execute(sa.text(f"ALTER FUNCTION {_NEAREST} ROWS {_NEAREST_ROWS}"))


def upgrade() -> None:
    op.execute(f"ALTER FUNCTION {_SEARCH} ROWS {_SEARCH_ROWS}")
    revise(op.get_bind())


def downgrade() -> None:
    op.execute(f"ALTER FUNCTION {_SEARCH} ROWS 1000")
    if _vectors.present(op.get_bind()):
        op.execute(f"ALTER FUNCTION {_NEAREST} ROWS 1000")
