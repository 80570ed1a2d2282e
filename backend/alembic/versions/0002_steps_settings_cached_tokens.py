"""steps (tasks with a parent), user settings, cached prompt tokens

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A step's parent is a top-level task: checked when a row gets a parent. A task gets its
# parent only when it is created (the API cannot move a task), so the parent's own parent
# can no longer change afterwards and this check cannot be raced.
_ONE_LEVEL = """
CREATE FUNCTION tasks_steps_have_no_steps() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.parent_id IS NOT NULL AND (
        EXISTS (SELECT FROM tasks
                WHERE user_id = NEW.user_id AND id = NEW.parent_id AND parent_id IS NOT NULL)
        OR EXISTS (SELECT FROM tasks WHERE user_id = NEW.user_id AND parent_id = NEW.id)
    ) THEN
        RAISE EXCEPTION 'a step cannot have steps' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$
"""


def upgrade() -> None:
    op.add_column("tasks", sa.Column("parent_id", sa.Uuid(), nullable=True))
    # The target of the composite foreign key: a step's parent has the step's owner.
    op.create_unique_constraint("uq_tasks_user_id", "tasks", ["user_id", "id"])
    op.create_foreign_key(
        "fk_tasks_parent",
        "tasks",
        "tasks",
        ["user_id", "parent_id"],
        ["user_id", "id"],
        ondelete="CASCADE",
    )
    op.create_index("ix_tasks_user_parent", "tasks", ["user_id", "parent_id"], unique=False)
    op.execute(_ONE_LEVEL)
    op.execute(
        "CREATE TRIGGER tasks_one_level BEFORE INSERT OR UPDATE OF parent_id ON tasks "
        "FOR EACH ROW EXECUTE FUNCTION tasks_steps_have_no_steps()"
    )

    op.add_column("users", sa.Column("display_name", sa.String(length=255), nullable=True))
    op.add_column("users", sa.Column("instructions", sa.String(length=2000), nullable=True))
    op.add_column("users", sa.Column("model", sa.String(length=100), nullable=True))

    op.add_column("agent_messages", sa.Column("cached_tokens", sa.Integer(), nullable=True))
    op.add_column(
        "agent_sessions",
        sa.Column("cached_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("agent_sessions", "cached_tokens")
    op.drop_column("agent_messages", "cached_tokens")
    op.drop_column("users", "model")
    op.drop_column("users", "instructions")
    op.drop_column("users", "display_name")
    op.execute("DROP TRIGGER tasks_one_level ON tasks")
    op.execute("DROP FUNCTION tasks_steps_have_no_steps()")
    op.drop_index("ix_tasks_user_parent", table_name="tasks")
    op.drop_constraint("fk_tasks_parent", "tasks", type_="foreignkey")
    op.drop_constraint("uq_tasks_user_id", "tasks", type_="unique")
    op.drop_column("tasks", "parent_id")
