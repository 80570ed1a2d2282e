"""reminders that reach people: notification settings, push subscriptions, deliveries (one
row per reminder and target, written by a trigger in the reminder's own transaction), the
daily plan's one row per person and local date

Revision ID: 0017
Revises: 0016

A reminder fires by one conditional UPDATE of `tasks.reminded_at` (0005, 0007). The trigger
`tasks_notify_deliveries` writes, in that same transaction, one `notify_deliveries` row per
target of the person it is for (each push subscription, the verified email, the ntfy URL,
as their `reminder_channels` say), with the task as it was then, and NOTIFYs
`todo_agent_notify` so a delivery worker wakes: fired once, so queued once. The delivery
worker (backend/services/notify/) claims due rows with a lease, as webhooks do.

`notify_digests` holds one row per (person, local date): the daily plan is written with it
in one transaction, so it is sent once a day whatever the number of replicas.

Every table holds one person's rows: forced row-level security, the person's own only;
the worker tends deliveries, reads settings and subscriptions, and removes a subscription
a push service says is gone.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WORKER, DEFINER, APP = "todo_agent_worker", "todo_agent_definer", "todo_agent_app"
_NOW = sa.text("now()")
_CHANNELS = sa.text("'{push,email,ntfy}'")

# One delivery row per target of the person the reminder is for (the assignee, else the
# creator, else the list's owner, as its `reminder.due` event), unless they are being
# erased; the task as the person sees it (their number) is kept in the row.
_QUEUE = """
CREATE FUNCTION tasks_notify_deliveries() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    for_whom text;
    channels text[];
    shown jsonb;
    queued integer := 0;
    n integer;
    s notification_settings;
BEGIN
    for_whom := COALESCE(NEW.assignee_id, NEW.created_by,
                         (SELECT owner_id FROM lists WHERE id = NEW.list_id));
    PERFORM 1 FROM users WHERE id = for_whom AND erasing_at IS NULL;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT * INTO s FROM notification_settings WHERE user_id = for_whom;
    channels := COALESCE(s.reminder_channels, '{push,email,ntfy}');
    shown := jsonb_build_object(
        'id', NEW.id,
        'number', (SELECT number FROM task_numbers WHERE user_id = for_whom AND task_id = NEW.id),
        'title', NEW.title, 'due_at', NEW.due_at, 'remind_at', NEW.remind_at);
    IF 'push' = ANY(channels) THEN
        INSERT INTO notify_deliveries (user_id, kind, channel, subscription_id, task_id,
                                       occurrence, payload, due_at)
        SELECT for_whom, 'reminder', 'push', p.id, NEW.id, NEW.reminded_at, shown, now()
        FROM push_subscriptions p WHERE p.user_id = for_whom;
        GET DIAGNOSTICS n = ROW_COUNT;
        queued := queued + n;
    END IF;
    IF 'email' = ANY(channels) AND s.email_verified AND s.email_address IS NOT NULL THEN
        INSERT INTO notify_deliveries (user_id, kind, channel, task_id, occurrence, payload,
                                       due_at)
        VALUES (for_whom, 'reminder', 'email', NEW.id, NEW.reminded_at, shown, now());
        queued := queued + 1;
    END IF;
    IF 'ntfy' = ANY(channels) AND s.ntfy_url IS NOT NULL THEN
        INSERT INTO notify_deliveries (user_id, kind, channel, task_id, occurrence, payload,
                                       due_at)
        VALUES (for_whom, 'reminder', 'ntfy', NEW.id, NEW.reminded_at, shown, now());
        queued := queued + 1;
    END IF;
    IF queued > 0 THEN
        PERFORM pg_notify('todo_agent_notify', '');
    END IF;
    RETURN NULL;
END
$$
"""

_TABLES = ["notification_settings", "push_subscriptions", "notify_deliveries", "notify_digests"]
_WORKER_GRANTS = {
    "notification_settings": "SELECT, UPDATE",
    "push_subscriptions": "SELECT, DELETE",
    "notify_deliveries": "SELECT, INSERT, UPDATE, DELETE",
    "notify_digests": "SELECT, INSERT",
}
_ME = "(SELECT todo_acting_user())"


def _user_fk() -> sa.ForeignKey:
    return sa.ForeignKey("users.id", ondelete="CASCADE")


def upgrade() -> None:
    op.create_table(
        "notification_settings",
        sa.Column("user_id", sa.String(length=255), _user_fk(), primary_key=True),
        sa.Column("email_address", sa.String(length=320), nullable=True),
        sa.Column("email_verified", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("email_code_hash", sa.String(length=64), nullable=True),
        sa.Column("email_code_tries", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("email_code_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ntfy_url", sa.String(length=2000), nullable=True),
        sa.Column(
            "reminder_channels",
            ARRAY(sa.String(length=10)),
            server_default=_CHANNELS,
            nullable=False,
        ),
        sa.Column("digest_at", sa.Time(), nullable=True),
        sa.Column(
            "digest_channels", ARRAY(sa.String(length=10)), server_default=_CHANNELS, nullable=False
        ),
        sa.Column("digest_next_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("quiet_start", sa.Time(), nullable=True),
        sa.Column("quiet_end", sa.Time(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=_NOW, nullable=False),
    )
    op.create_index(
        "ix_notification_settings_digest_next",
        "notification_settings",
        ["digest_next_at"],
        postgresql_where=sa.text("digest_next_at IS NOT NULL"),
    )
    op.create_table(
        "push_subscriptions",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("user_id", sa.String(length=255), _user_fk(), nullable=False),
        sa.Column("endpoint", sa.String(length=2000), nullable=False),
        sa.Column("p256dh", sa.String(length=200), nullable=False),
        sa.Column("auth", sa.String(length=100), nullable=False),
        sa.Column("expiration_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_NOW, nullable=False),
    )
    op.create_index(
        "ux_push_subscriptions_user_endpoint",
        "push_subscriptions",
        ["user_id", "endpoint"],
        unique=True,
    )
    op.create_table(
        "notify_deliveries",
        sa.Column("id", sa.BigInteger(), sa.Identity(), primary_key=True),
        sa.Column("user_id", sa.String(length=255), _user_fk(), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("channel", sa.String(length=10), nullable=False),
        sa.Column(
            "subscription_id",
            sa.Uuid(),
            sa.ForeignKey("push_subscriptions.id", ondelete="CASCADE"),
            nullable=True,
        ),
        sa.Column(
            "task_id", sa.Uuid(), sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=True
        ),
        sa.Column("occurrence", sa.DateTime(timezone=True), nullable=True),
        sa.Column("payload", sa.dialects.postgresql.JSONB(), nullable=True),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_NOW, nullable=False),
    )
    op.create_index(
        "ix_notify_deliveries_due",
        "notify_deliveries",
        ["due_at"],
        postgresql_where=sa.text("due_at IS NOT NULL"),
    )
    op.create_index("ix_notify_deliveries_user", "notify_deliveries", ["user_id"])
    op.create_index("ix_notify_deliveries_subscription", "notify_deliveries", ["subscription_id"])
    op.create_index("ix_notify_deliveries_task", "notify_deliveries", ["task_id"])
    op.create_table(
        "notify_digests",
        sa.Column("user_id", sa.String(length=255), _user_fk(), primary_key=True),
        sa.Column("local_date", sa.Date(), primary_key=True),
        sa.Column("sent_at", sa.DateTime(timezone=True), server_default=_NOW, nullable=False),
    )
    for table in _TABLES:
        op.execute(f"GRANT {_WORKER_GRANTS[table]} ON {table} TO {WORKER}")
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY {table}_own ON {table} TO {APP}"
            f" USING (user_id = {_ME}) WITH CHECK (user_id = {_ME})"
        )
        for role, name in ((DEFINER, "definer"), (WORKER, "worker")):
            op.execute(
                f"CREATE POLICY {table}_{name} ON {table} TO {role} USING (true) WITH CHECK (true)"
            )
    op.execute(f"GRANT USAGE, SELECT ON SEQUENCE notify_deliveries_id_seq TO {WORKER}")
    op.execute(_QUEUE)
    op.execute("ALTER FUNCTION tasks_notify_deliveries() OWNER TO " + DEFINER)
    op.execute("REVOKE ALL ON FUNCTION tasks_notify_deliveries() FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION tasks_notify_deliveries() TO {APP}, {WORKER}")
    op.execute(
        "CREATE TRIGGER tasks_notify_deliveries AFTER UPDATE OF reminded_at ON tasks"
        " FOR EACH ROW WHEN (NEW.reminded_at IS NOT NULL AND OLD.reminded_at IS NULL"
        # Firing sets reminded_at alone (as `reminder.due` reads it); an undo putting an
        # old reminder back, with its time, is no firing.
        " AND NEW.remind_at IS NOT DISTINCT FROM OLD.remind_at AND NOT NEW.completed"
        " AND NEW.deleted_at IS NULL)"
        " EXECUTE FUNCTION tasks_notify_deliveries()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER tasks_notify_deliveries ON tasks")
    op.execute("DROP FUNCTION tasks_notify_deliveries()")
    for table in reversed(_TABLES):
        op.drop_table(table)
