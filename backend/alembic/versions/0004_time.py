"""time: repeating tasks (RRULE, series), reminders

Revision ID: 0004
Revises: 0003
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("recurrence", sa.String(length=500), nullable=True))
    op.add_column("tasks", sa.Column("recurrence_text", sa.String(length=200), nullable=True))
    op.add_column("tasks", sa.Column("series_id", sa.Uuid(), nullable=True))
    # Where the rule is counted from (COUNT): the series' first due time, or the due time
    # the rule was last set or moved to.
    op.add_column("tasks", sa.Column("series_start", sa.DateTime(timezone=True), nullable=True))
    # The occurrence this one follows. Unique: an occurrence has at most one successor,
    # however often or concurrently it is completed.
    op.add_column("tasks", sa.Column("previous_id", sa.Uuid(), nullable=True))
    op.create_index("ux_tasks_previous", "tasks", ["previous_id"], unique=True)
    op.add_column("tasks", sa.Column("remind_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("tasks", sa.Column("reminded_at", sa.DateTime(timezone=True), nullable=True))
    # The reminders still to fire, in firing order: what the reminder loop scans.
    op.create_index(
        "ix_tasks_reminders_due",
        "tasks",
        ["remind_at"],
        postgresql_where=sa.text("remind_at IS NOT NULL AND reminded_at IS NULL AND NOT completed"),
    )
    op.create_check_constraint(
        "ck_tasks_repeating_has_due",
        "tasks",
        "recurrence IS NULL OR (due_at IS NOT NULL AND series_id IS NOT NULL)",
    )


def downgrade() -> None:
    op.drop_constraint("ck_tasks_repeating_has_due", "tasks")
    op.drop_index("ix_tasks_reminders_due", table_name="tasks")
    op.drop_index("ux_tasks_previous", table_name="tasks")
    for column in (
        "reminded_at", "remind_at", "previous_id", "series_start", "series_id",
        "recurrence_text", "recurrence",
    ):  # fmt: skip
        op.drop_column("tasks", column)
