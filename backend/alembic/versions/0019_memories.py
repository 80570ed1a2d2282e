"""memories: what a person told the assistant about themselves, carried into every turn

Revision ID: 0019
Revises: 0018

- `memories`: short facts, the person's own, under forced row-level security like their
  sessions (the acting user's rows only); each change writes its event (`memory.created`,
  `memory.updated`, `memory.deleted`) through `todo_write_event`, in its transaction.
- `todo_memories(owner, budget)`: the person's memories newest first, as many as
  `budget` characters hold (services/memory/prompt.py turns AGENT_MEMORY_TOKENS into it).
- `todo_open_turn` takes that budget (0: a temporary turn, which reads none) and answers
  the memories with the history: a turn still starts in one statement.
"""

from collections.abc import Sequence
from importlib import import_module

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP, WORKER, DEFINER = "todo_agent_app", "todo_agent_worker", "todo_agent_definer"
_ME = "(SELECT todo_acting_user())"

_OLD_OPEN = (
    "todo_open_turn(text, uuid, boolean, text, uuid, float8, float8, float8, text, uuid, text,"
    " text, boolean, integer)"
)
_NEW_OPEN = (
    "todo_open_turn(text, uuid, boolean, text, uuid, float8, float8, float8, text, uuid, text,"
    " text, boolean, integer, integer)"
)

# Newest first, each counted as its text and a little framing, until the budget is spent:
# the newest that fit, never a gap. The (user_id, created_at) index is read backwards.
_MEMORIES = """
CREATE FUNCTION todo_memories(owner text, budget integer) RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT COALESCE(json_agg(json_build_object('id', m.id, 'text', m.text)
                                     ORDER BY m.created_at DESC, m.id DESC), '[]')
            FROM (SELECT id, text, created_at,
                         sum(char_length(text) + 12) OVER (ORDER BY created_at DESC, id DESC)
                             AS spent
                  FROM memories WHERE user_id = owner
                  ORDER BY created_at DESC, id DESC LIMIT 200) AS m
            WHERE m.spent <= budget);
END
$$
"""

_WRITE_EVENT = """
CREATE FUNCTION memories_write_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    m memories;
    kind text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        m := OLD;
        kind := 'memory.deleted';
    ELSIF TG_OP = 'INSERT' THEN
        m := NEW;
        kind := 'memory.created';
    ELSIF NEW.text IS DISTINCT FROM OLD.text THEN
        m := NEW;
        kind := 'memory.updated';
    ELSE
        RETURN NULL;
    END IF;
    PERFORM todo_write_event(m.user_id, kind, m.id,
                             jsonb_build_object('memory_id', m.id, 'text', m.text));
    RETURN NULL;
END
$$
"""


def _open_turn(*, memories: bool) -> str:
    """0013's todo_open_turn; with `memories`, taking a budget and answering the memories."""
    source: str = import_module("backend.alembic.versions.0013_turn_handover")._open_turn(
        import_module("backend.alembic.versions.0013_turn_handover")._TAKES_FREE
    )
    if not memories:
        return source
    replacements = (
        ("adds boolean, want integer\n)", "adds boolean, want integer, memory_chars integer\n)"),
        ("history json, held json\n)", "history json, held json, memories json\n)"),
        (
            "    name := gate.name;\n",
            "    IF taken IS NOT NULL AND memory_chars > 0 THEN\n"
            "        memories := todo_memories(owner, memory_chars);\n"
            "    END IF;\n"
            "    name := gate.name;\n",
        ),
    )
    for old, new in replacements:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column(
            "user_id",
            sa.String(length=255),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("text", sa.String(length=500), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("created_by", sa.String(length=8), nullable=False),
        sa.Column("source_session_id", sa.Uuid(), nullable=True),
        sa.Column("source_message_id", sa.Uuid(), nullable=True),
        sa.CheckConstraint(
            "created_by IN ('user', 'model', 'stub')", name="ck_memories_created_by"
        ),
        sa.CheckConstraint("char_length(text) BETWEEN 1 AND 500", name="ck_memories_text"),
    )
    op.create_index("ix_memories_user_created", "memories", ["user_id", "created_at"])
    op.create_index(
        "ix_memories_source_message",
        "memories",
        ["source_message_id"],
        postgresql_where=sa.text("source_message_id IS NOT NULL"),
    )
    op.execute("ALTER TABLE memories ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE memories FORCE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY memories_all ON memories FOR ALL TO {APP}"
        f" USING (user_id = {_ME}) WITH CHECK (user_id = {_ME})"
    )
    op.execute(
        f"CREATE POLICY memories_definer ON memories TO {DEFINER} USING (true) WITH CHECK (true)"
    )
    op.execute(_WRITE_EVENT)
    op.execute(
        "CREATE TRIGGER memories_events AFTER INSERT OR UPDATE OR DELETE ON memories "
        "FOR EACH ROW EXECUTE FUNCTION memories_write_event()"
    )
    op.execute(_MEMORIES)
    op.execute(f"DROP FUNCTION {_OLD_OPEN}")
    op.execute(_open_turn(memories=True))
    op.execute(f"ALTER FUNCTION {_NEW_OPEN} SET role = {APP}")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION {_NEW_OPEN}")
    op.execute(_open_turn(memories=False))
    op.execute(f"ALTER FUNCTION {_OLD_OPEN} SET role = {APP}")
    op.execute("DROP FUNCTION todo_memories(text, integer)")
    op.execute("DROP TRIGGER memories_events ON memories")
    op.execute("DROP FUNCTION memories_write_event()")
    op.drop_table("memories")
