"""a temporary turn stays temporary when another replica takes it over

Revision ID: 0023
Revises: 0022

- `agent_sessions.lease_temporary`: whether the turn that holds (or last held) the
  session's lease is a temporary one (`"temporary": true`: it reads and writes no memory).
  Written with the lease, in the statement that takes it; a take-over keeps the lease's
  row and so its flag, and the new attempt reads it (services/turns.py `resume`) rather
  than what this replica's own request would have said, which it never saw.
- `todo_open_turn` takes `temporary` and writes it wherever it takes the lease.
"""

from collections.abc import Sequence
from importlib import import_module

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_digest = import_module("backend.alembic.versions.0020_session_digest")

_OPEN_ARGS = f"{_digest._OPEN_ARGS}, boolean"
_LEASE = "SET lease_owner = turn, lease_expires_at = now() + make_interval(secs => lease)\n"

# 0020's todo_open_turn, and what it changes of it.
_EDITS = (
    ("memory_chars integer\n)", "memory_chars integer, temporary boolean\n)"),
    ("INSERT INTO agent_sessions AS s (id, user_id, title, chat_id, lease_owner,"
     " lease_expires_at)\n"
     "        VALUES (session, owner, title, chat, turn, now() + make_interval(secs => lease))",
     "INSERT INTO agent_sessions AS s\n"
     "            (id, user_id, title, chat_id, lease_owner, lease_expires_at, lease_temporary)\n"
     "        VALUES (session, owner, title, chat, turn, now() + make_interval(secs => lease),\n"
     "                temporary)"),
)  # fmt: skip


def _old_open_turn() -> str:
    return str(_digest._edited(_digest._old_open_turn(), _digest._OPEN_EDITS))


def _open_turn() -> str:
    source = _digest._edited(_old_open_turn(), _EDITS)
    assert source.count(_LEASE) == 2  # the lease taken on a chat id's session, or by its id
    return source.replace(_LEASE, f"{_LEASE[:-1]},\n            lease_temporary = temporary\n")


def upgrade() -> None:
    op.add_column(
        "agent_sessions",
        sa.Column("lease_temporary", sa.Boolean(), server_default=sa.false(), nullable=False),
    )
    op.execute(f"DROP FUNCTION todo_open_turn({_digest._OPEN_ARGS})")
    op.execute(_open_turn())
    op.execute(f"ALTER FUNCTION todo_open_turn({_OPEN_ARGS}) SET role = todo_agent_app")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION todo_open_turn({_OPEN_ARGS})")
    op.execute(_old_open_turn())
    op.execute(f"ALTER FUNCTION todo_open_turn({_digest._OPEN_ARGS}) SET role = todo_agent_app")
    op.drop_column("agent_sessions", "lease_temporary")
