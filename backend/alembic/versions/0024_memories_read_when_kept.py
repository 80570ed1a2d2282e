"""a turn reads a person's memories only when they keep some

Revision ID: 0024
Revises: 0023

`todo_open_turn` called `todo_memories` on every turn, for everyone: a function call and a
windowed, aggregated scan of the person's memories, about half of what this round's issues
added to a no-tool turn's database work (bench/README.md, "Issues 35, 36 and 37"). Most
turns are of people who keep none, and `memories` is NULL for them now (as for a temporary
turn): a probe of the (user_id, created_at) index first, and the read only when it finds one.
"""

from collections.abc import Sequence
from importlib import import_module

from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_temporary = import_module("backend.alembic.versions.0023_temporary_turns")
_digest = import_module("backend.alembic.versions.0020_session_digest")

_EDITS = (
    ("    IF taken IS NOT NULL AND memory_chars > 0 THEN\n",
     "    IF taken IS NOT NULL AND memory_chars > 0\n"
     "       AND EXISTS (SELECT FROM memories m WHERE m.user_id = owner) THEN\n"),
)  # fmt: skip


def _replace(source: str) -> None:
    op.execute(f"DROP FUNCTION todo_open_turn({_temporary._OPEN_ARGS})")
    op.execute(source)
    op.execute(f"ALTER FUNCTION todo_open_turn({_temporary._OPEN_ARGS}) SET role = todo_agent_app")


def upgrade() -> None:
    _replace(_digest._edited(_temporary._open_turn(), _EDITS))


def downgrade() -> None:
    _replace(_temporary._open_turn())
