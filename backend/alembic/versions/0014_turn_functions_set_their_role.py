"""a chat turn's two functions run as the service's role, whoever calls them

Revision ID: 0014
Revises: 0013

`todo_open_turn` and `todo_finish_turn` run outside any transaction on the hot path
(`Database.raw`), so no transaction sets the role for them: the pool's connections used to
start as `todo_agent_app` (a startup parameter), which a pooler in transaction mode refuses
and which, ignored, would leave them running as the login role, around the policies. Now
each function sets the role itself, for its own run only (a function's `SET` is undone when
it returns), so row-level security holds them whoever logged in.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FUNCTIONS = (
    "todo_open_turn(text, uuid, boolean, text, uuid, float8, float8, float8, text, uuid, text,"
    " text, boolean, integer)",
    "todo_finish_turn(text, uuid, uuid, uuid, uuid, text, boolean, integer, integer, integer,"
    " integer)",
)


def upgrade() -> None:
    for function in _FUNCTIONS:
        op.execute(f"ALTER FUNCTION {function} SET role = todo_agent_app")


def downgrade() -> None:
    for function in _FUNCTIONS:
        op.execute(f"ALTER FUNCTION {function} RESET role")
