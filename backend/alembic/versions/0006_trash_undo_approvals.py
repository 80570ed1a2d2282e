"""ask first, undo after: the trash, what each turn changed (to undo it), held tool calls,
and the user's `confirm` setting

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A task as events show it; steps in the trash are not counted.
_TASK_JSON = """
CREATE OR REPLACE FUNCTION task_event_json(t tasks) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', t.id, 'number', t.number, 'title', t.title, 'description', t.description,
        'completed', t.completed, 'completed_at', t.completed_at, 'due_at', t.due_at,
        'priority', t.priority, 'tags', to_jsonb(t.tags), 'created_at', t.created_at,
        'updated_at', t.updated_at, 'parent_id', t.parent_id,
        'steps_done', (SELECT count(*) FROM tasks s
                       WHERE s.user_id = t.user_id AND s.parent_id = t.id AND s.completed
                         AND s.deleted_at IS NULL),
        'steps_total', (SELECT count(*) FROM tasks s
                        WHERE s.user_id = t.user_id AND s.parent_id = t.id
                          AND s.deleted_at IS NULL),
        'recurrence', t.recurrence, 'recurrence_text', t.recurrence_text,
        'remind_at', t.remind_at, 'reminded_at', t.reminded_at, 'series_id', t.series_id)
$$
"""

# As in 0005, and: moving a task to the trash is `task.deleted`, bringing it back is
# `task.restored`; purging one from the trash says nothing more (it was told when it went
# there), nor does anything that happens to a task while it is in the trash.
_WRITE_EVENT = """
CREATE OR REPLACE FUNCTION tasks_write_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind text;
    task_row tasks;
    body jsonb;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.deleted_at IS NOT NULL THEN
            RETURN NULL;
        END IF;
        task_row := OLD;
        kind := 'task.deleted';
    ELSE
        task_row := NEW;
        IF TG_OP = 'INSERT' THEN
            kind := 'task.created';
        ELSIF NEW.deleted_at IS NOT NULL AND OLD.deleted_at IS NULL THEN
            kind := 'task.deleted';
        ELSIF NEW.deleted_at IS NULL AND OLD.deleted_at IS NOT NULL THEN
            kind := 'task.restored';
        ELSIF NEW.deleted_at IS NOT NULL THEN
            RETURN NULL;
        ELSIF NEW.completed AND NOT OLD.completed THEN
            kind := 'task.completed';
        ELSIF OLD.completed AND NOT NEW.completed THEN
            kind := 'task.reopened';
        ELSIF (NEW.title, NEW.description, NEW.due_at, NEW.priority, NEW.tags, NEW.recurrence,
               NEW.remind_at, NEW.parent_id)
              IS DISTINCT FROM
              (OLD.title, OLD.description, OLD.due_at, OLD.priority, OLD.tags, OLD.recurrence,
               OLD.remind_at, OLD.parent_id) THEN
            kind := 'task.updated';
        ELSIF NEW.reminded_at IS NOT NULL AND OLD.reminded_at IS NULL THEN
            kind := 'reminder.due';
        ELSE
            RETURN NULL;
        END IF;
    END IF;
    IF kind = 'task.deleted' THEN
        body := jsonb_build_object('id', task_row.id, 'number', task_row.number,
                                   'title', task_row.title);
    ELSE
        body := task_event_json(NEW);
    END IF;
    PERFORM 1 FROM users WHERE id = task_row.user_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;  -- the user is being deleted with everything they own
    END IF;
    body := jsonb_build_object('user_id', task_row.user_id, 'task', body);
    IF kind = 'reminder.due' THEN
        body := body || jsonb_build_object(
            'remind_at', NEW.remind_at,
            'late', NEW.reminded_at - NEW.remind_at > make_interval(secs => coalesce(
                nullif(current_setting('todo_agent.late_after_s', true), ''), '60')::float8)
        );
    END IF;
    INSERT INTO events (user_id, type, subject, data)
        VALUES (task_row.user_id, kind, task_row.id, body);
    PERFORM pg_notify('todo_agent_events', task_row.user_id);
    RETURN NULL;
END
$$
"""

# What a person sees of a task, to tell whether it changed since a turn changed it (a
# reminder firing is not a change of theirs).
_TASK_STATE = """
CREATE FUNCTION task_state(t tasks) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object(
        'title', t.title, 'description', t.description, 'completed', t.completed,
        'completed_at', t.completed_at, 'due_at', t.due_at, 'priority', t.priority,
        'tags', to_jsonb(t.tags), 'recurrence', t.recurrence, 'remind_at', t.remind_at,
        'parent_id', t.parent_id, 'deleted_at', t.deleted_at)
$$
"""

# While a chat turn's tool call runs, its transaction names the turn in `todo_agent.turn`
# ("<session id>:<assistant message id>"); every change to a task is then recorded here in
# the same transaction: the whole row before (NULL: the turn created it) and what it looks
# like after. Undo reads this, never the event log.
_RECORD_CHANGE = """
CREATE FUNCTION tasks_record_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    turn text := current_setting('todo_agent.turn', true);
    action text;
BEGIN
    IF turn IS NULL OR turn = '' THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        action := 'created';
    ELSIF TG_OP = 'DELETE' THEN
        action := 'purged';
    ELSIF task_state(NEW) = task_state(OLD) THEN
        RETURN NULL;
    ELSIF NEW.deleted_at IS NOT NULL AND OLD.deleted_at IS NULL THEN
        action := 'deleted';
    ELSIF NEW.deleted_at IS NULL AND OLD.deleted_at IS NOT NULL THEN
        action := 'restored';
    ELSIF NEW.completed AND NOT OLD.completed THEN
        action := 'completed';
    ELSIF OLD.completed AND NOT NEW.completed THEN
        action := 'reopened';
    ELSE
        action := 'updated';
    END IF;
    INSERT INTO task_changes (user_id, session_id, message_id, task_id, action, before, after)
    SELECT s.user_id, s.id, split_part(turn, ':', 2)::uuid, coalesce(NEW.id, OLD.id), action,
           CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE to_jsonb(OLD) END,
           CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE task_state(NEW) END
    FROM agent_sessions s WHERE s.id = split_part(turn, ':', 1)::uuid;
    RETURN NULL;
END
$$
"""

_REMINDERS_DUE = "remind_at IS NOT NULL AND reminded_at IS NULL AND NOT completed"


def upgrade() -> None:
    op.add_column("tasks", sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
    op.drop_index("ix_tasks_reminders_due", table_name="tasks")
    op.create_index(
        "ix_tasks_reminders_due",
        "tasks",
        ["remind_at"],
        postgresql_where=sa.text(_REMINDERS_DUE + " AND deleted_at IS NULL"),
    )
    op.create_index(
        "ix_tasks_user_trash",
        "tasks",
        ["user_id", "deleted_at"],
        postgresql_where=sa.text("deleted_at IS NOT NULL"),
    )
    op.create_index(
        "ix_tasks_trash_age",
        "tasks",
        ["deleted_at"],
        postgresql_where=sa.text("deleted_at IS NOT NULL"),
    )
    op.execute(_TASK_JSON)
    op.execute(_WRITE_EVENT)

    op.add_column("users", sa.Column("confirm", sa.String(length=10), nullable=True))
    op.create_check_constraint(
        "ck_users_confirm", "users", "confirm IN ('deletes', 'changes', 'never')"
    )

    op.create_table(
        "task_changes",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), primary_key=True),
        sa.Column(
            "user_id",
            sa.String(length=255),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "session_id",
            sa.Uuid(),
            sa.ForeignKey("agent_sessions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("message_id", sa.Uuid(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("before", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("after", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("undone_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index(
        "ix_task_changes_session",
        "task_changes",
        ["session_id", "id"],
        postgresql_where=sa.text("undone_at IS NULL"),
    )
    op.create_index("ix_task_changes_message", "task_changes", ["message_id"])
    op.create_index("ix_task_changes_user", "task_changes", ["user_id"])
    op.execute(_TASK_STATE)
    op.execute(_RECORD_CHANGE)
    op.execute(
        "CREATE TRIGGER tasks_changes AFTER INSERT OR UPDATE OR DELETE ON tasks "
        "FOR EACH ROW EXECUTE FUNCTION tasks_record_change()"
    )

    op.create_table(
        "approvals",
        sa.Column("id", sa.String(length=64), primary_key=True),
        sa.Column(
            "user_id",
            sa.String(length=255),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "session_id",
            sa.Uuid(),
            sa.ForeignKey("agent_sessions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("message_id", sa.Uuid(), nullable=False),
        sa.Column("tool_call_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("arguments", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("summary", sa.String(length=500), nullable=False),
        sa.Column("state", sa.String(length=10), server_default="pending", nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('pending', 'approved', 'denied', 'expired')", name="ck_approvals_state"
        ),
    )
    op.create_index(
        "ix_approvals_session_pending",
        "approvals",
        ["session_id"],
        postgresql_where=sa.text("state = 'pending'"),
    )
    op.create_index("ix_approvals_user", "approvals", ["user_id"])


def downgrade() -> None:
    op.drop_table("approvals")
    op.execute("DROP TRIGGER tasks_changes ON tasks")
    op.execute("DROP FUNCTION tasks_record_change()")
    op.execute("DROP FUNCTION task_state(tasks)")
    op.drop_table("task_changes")
    op.drop_constraint("ck_users_confirm", "users")
    op.drop_column("users", "confirm")
    # The trash empties for good; the functions go back to 0005's.
    op.execute("DELETE FROM tasks WHERE deleted_at IS NOT NULL")
    op.drop_index("ix_tasks_trash_age", table_name="tasks")
    op.drop_index("ix_tasks_user_trash", table_name="tasks")
    op.drop_index("ix_tasks_reminders_due", table_name="tasks")
    op.create_index(
        "ix_tasks_reminders_due", "tasks", ["remind_at"], postgresql_where=sa.text(_REMINDERS_DUE)
    )
    op.execute(
        "CREATE OR REPLACE FUNCTION tasks_write_event() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN RETURN NULL; END $$"
    )
    op.drop_column("tasks", "deleted_at")
    _restore_0005_functions()


def _restore_0005_functions() -> None:
    """0005's event functions, as that migration wrote them (they read no `deleted_at`)."""
    from importlib import import_module

    events = import_module("backend.alembic.versions.0005_events")
    op.execute(events._TASK_JSON.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
    op.execute(events._WRITE_EVENT.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
