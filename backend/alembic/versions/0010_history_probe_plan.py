"""the history read never sorts a whole session: `todo_history` is planned without bitmap
scans

Revision ID: 0010
Revises: 0009

`todo_history` probes a session's messages newest first, one index probe each (`ORDER BY
seq DESC LIMIT 1`). PL/pgSQL keeps its plan for the connection, and after five calls may
keep a generic one, which cannot know the session: from the table's statistics it guesses a
session of some dozens of messages, and under row-level security (whose filter on the user
it also counts) one row of them. Sorting one row looks free, so it chose a bitmap scan of the
whole session and a sort, for each of the 20 probes: 96 ms a turn at 10,000 messages in the
benchmark's database (0.5 ms with the index read backwards). Without bitmap scans the only
plans left read the index, and reading it backwards needs no sort, so that one is cheapest
whatever the guess (tests/test_sql_budget.py).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER FUNCTION todo_history(uuid, integer) SET enable_bitmapscan = off")


def downgrade() -> None:
    op.execute("ALTER FUNCTION todo_history(uuid, integer) RESET enable_bitmapscan")
