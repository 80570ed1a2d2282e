"""events: the outbox of task changes (written by a trigger, in the change's transaction),
reminders firing, webhook delivery state, the calendar feed's secret

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A task as events show it: the fields of the API's task (steps_done/steps_total included).
_TASK_JSON = """
CREATE FUNCTION task_event_json(t tasks) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', t.id, 'number', t.number, 'title', t.title, 'description', t.description,
        'completed', t.completed, 'completed_at', t.completed_at, 'due_at', t.due_at,
        'priority', t.priority, 'tags', to_jsonb(t.tags), 'created_at', t.created_at,
        'updated_at', t.updated_at, 'parent_id', t.parent_id,
        'steps_done', (SELECT count(*) FROM tasks s
                       WHERE s.user_id = t.user_id AND s.parent_id = t.id AND s.completed),
        'steps_total', (SELECT count(*) FROM tasks s
                        WHERE s.user_id = t.user_id AND s.parent_id = t.id),
        'recurrence', t.recurrence, 'recurrence_text', t.recurrence_text,
        'remind_at', t.remind_at, 'reminded_at', t.reminded_at, 'series_id', t.series_id)
$$
"""

# Every committed change to a task writes its one event here, in the same transaction: no
# surface can forget to, a change that rolls back takes its event with it, and steps deleted
# by the cascade get theirs. A change that changes nothing a user sees writes none.
#
# The user's row is locked before an id is drawn, so one user's events commit in id order:
# a reader that has seen id N has seen every earlier one of that user's (Last-Event-ID
# resume cannot skip an event whose transaction committed late). NOTIFY is delivered at
# commit, to every replica's listener.
#
# `todo_agent.late_after_s` is set by the reminder loop's transaction: a reminder that fires
# later than that after its time says "late".
_WRITE_EVENT = """
CREATE FUNCTION tasks_write_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind text;
    task_row tasks;
    body jsonb;
BEGIN
    IF TG_OP = 'DELETE' THEN
        task_row := OLD;
        kind := 'task.deleted';
        body := jsonb_build_object('id', OLD.id, 'number', OLD.number, 'title', OLD.title);
    ELSE
        task_row := NEW;
        IF TG_OP = 'INSERT' THEN
            kind := 'task.created';
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


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), primary_key=True),
        sa.Column(
            "user_id",
            sa.String(length=255),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("subject", sa.Uuid(), nullable=False),
        sa.Column(
            "occurred_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("clock_timestamp()"),
        ),
        sa.Column("data", sa.dialects.postgresql.JSONB(), nullable=False),
        # Webhook delivery: when the next attempt is due (NULL: delivered or given up), how
        # many were claimed, and how it ended.
        sa.Column(
            "webhook_due_at",
            sa.DateTime(timezone=True),
            nullable=True,
            server_default=sa.text("clock_timestamp()"),
        ),
        sa.Column("webhook_attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("webhook_outcome", sa.String(length=16), nullable=True),
    )
    op.create_index("ix_events_user_id", "events", ["user_id", "id"])
    op.create_index("ix_events_occurred_at", "events", ["occurred_at"])
    op.create_index(
        "ix_events_webhook_due",
        "events",
        ["webhook_due_at"],
        postgresql_where=sa.text("webhook_due_at IS NOT NULL"),
    )
    op.execute(_TASK_JSON)
    op.execute(_WRITE_EVENT)
    op.execute(
        "CREATE TRIGGER tasks_events AFTER INSERT OR UPDATE OR DELETE ON tasks "
        "FOR EACH ROW EXECUTE FUNCTION tasks_write_event()"
    )
    op.add_column("users", sa.Column("calendar_secret_hash", sa.String(length=64), nullable=True))
    op.create_index("ux_users_calendar_secret", "users", ["calendar_secret_hash"], unique=True)


def downgrade() -> None:
    op.drop_index("ux_users_calendar_secret", table_name="users")
    op.drop_column("users", "calendar_secret_hash")
    op.execute("DROP TRIGGER tasks_events ON tasks")
    op.execute("DROP FUNCTION tasks_write_event()")
    op.execute("DROP FUNCTION task_event_json(tasks)")
    op.drop_table("events")
