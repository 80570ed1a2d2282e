"""a person's data is theirs: an account being erased writes no events; the erasure's last
step (the user row, and one `user.deleted` event that outlives it); the identity
provider's webhook messages, received once

Revision ID: 0009
Revises: 0008

Erasure runs in short transactions (backend/services/erasure.py). Its first marks the user
row (`erasing_at`): from then on no event is written for them (`todo_write_event` skips a
user being erased, as it skipped a user already gone), so a reminder of theirs never fires,
and signing in again is refused until the erasure is done. Its last, `todo_finish_erasure`,
deletes the user row and writes `user.deleted`: the events table no longer refers to users
by a foreign key, so that one event can outlive the row it is about (the erasure deletes
the user's other events itself). Sessions delete their approvals and undo records by a
cascade, which needs an index on `session_id` (the existing ones hold only pending
approvals and undone-not-yet changes).

`todo_without` takes a user's id out of a JSON document (others' events and undo records
name an erased user: the task they were given, the member who left).

`identity_webhook_messages` holds the ids of the identity provider's webhook messages, so
that a replay is refused; it holds no one's rows, and only the worker reads and writes it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WORKER, DEFINER, APP = "todo_agent_worker", "todo_agent_definer", "todo_agent_app"

# 0007's, but a user being erased is skipped as a user already gone is.
_WRITE_ONE = """
CREATE OR REPLACE FUNCTION todo_write_event(recipient text, kind text, about uuid, body jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM 1 FROM users WHERE id = recipient AND erasing_at IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;  -- the user is being erased, or is gone
    END IF;
    INSERT INTO events (user_id, type, subject, data)
        VALUES (recipient, kind, about, jsonb_build_object('user_id', recipient) || body);
    PERFORM pg_notify('todo_agent_events', recipient);
END
$$
"""

# The last step of an erasure, for the acting user whose erasure has begun: the user row
# (its foreign keys cascade to whatever a request of theirs still wrote meanwhile, and set
# their tasks in others' lists to nobody's), their events and idempotency records (which
# no foreign key ties to them), then the one `user.deleted` event, delivered like any
# other. True when this call erased them (exactly once: the DELETE finds the row once).
# Every process forgets the user (`todo_agent_forget_user`), so that a new sign-in with the
# same id makes a new, empty account.
_FINISH = """
CREATE FUNCTION todo_finish_erasure() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    me text := todo_acting_user();
BEGIN
    DELETE FROM users WHERE id = me AND erasing_at IS NOT NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM events WHERE user_id = me;
    DELETE FROM idempotency_keys WHERE user_id = me;
    INSERT INTO events (user_id, type, subject, data)
        VALUES (me, 'user.deleted', NULL, jsonb_build_object('user_id', me));
    PERFORM pg_notify('todo_agent_events', me);
    PERFORM pg_notify('todo_agent_forget_user', me);
    RETURN true;
END
$$
"""
_FINISH_SIGNATURE = "todo_finish_erasure()"


# `doc` with every string equal to `gone` (at any depth) made null: an erased user's id
# taken out of what others keep (their events, their undo records).
_WITHOUT = """
CREATE FUNCTION todo_without(doc jsonb, gone text) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE jsonb_typeof(doc)
        WHEN 'object' THEN (SELECT COALESCE(jsonb_object_agg(key, todo_without(value, gone)),
                                            '{}')
                            FROM jsonb_each(doc))
        WHEN 'array' THEN (SELECT COALESCE(jsonb_agg(todo_without(value, gone) ORDER BY at),
                                           '[]')
                           FROM jsonb_array_elements(doc) WITH ORDINALITY AS items(value, at))
        WHEN 'string' THEN CASE WHEN doc #>> '{}' = gone THEN 'null'::jsonb ELSE doc END
        ELSE doc
    END
$$
"""
_WITHOUT_SIGNATURE = "todo_without(jsonb, text)"


def upgrade() -> None:
    op.add_column("users", sa.Column("erasing_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_users_erasing",
        "users",
        ["erasing_at"],
        postgresql_where=sa.text("erasing_at IS NOT NULL"),
    )
    op.drop_constraint("events_user_id_fkey", "events", type_="foreignkey")
    op.alter_column("events", "subject", nullable=True)
    op.create_index("ix_approvals_session", "approvals", ["session_id"])
    op.create_index("ix_task_changes_session_all", "task_changes", ["session_id"])
    op.execute(_WRITE_ONE)
    op.execute(_FINISH)
    op.execute(f"ALTER FUNCTION {_FINISH_SIGNATURE} OWNER TO {DEFINER}")
    op.execute(f"REVOKE ALL ON FUNCTION {_FINISH_SIGNATURE} FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION {_FINISH_SIGNATURE} TO {APP}")

    # The erasure, as the worker, takes the user's id out of others' undo records.
    op.execute(_WITHOUT)
    op.execute(f"GRANT SELECT, UPDATE ON task_changes TO {WORKER}")
    op.execute(
        f"CREATE POLICY task_changes_worker ON task_changes TO {WORKER}"
        " USING (true) WITH CHECK (true)"
    )

    op.create_table(
        "identity_webhook_messages",
        sa.Column("id", sa.String(length=255), primary_key=True),
        sa.Column(
            "received_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
    )
    op.create_index(
        "ix_identity_webhook_messages_received_at", "identity_webhook_messages", ["received_at"]
    )
    # No one's rows: the service's request role has no business here, the worker records
    # and prunes them. Row-level security all the same, like every table.
    op.execute(f"REVOKE ALL ON identity_webhook_messages FROM {APP}")
    op.execute(f"GRANT SELECT, INSERT, DELETE ON identity_webhook_messages TO {WORKER}")
    op.execute("ALTER TABLE identity_webhook_messages ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE identity_webhook_messages FORCE ROW LEVEL SECURITY")
    for role, name in ((WORKER, "worker"), (DEFINER, "definer")):
        op.execute(
            f"CREATE POLICY identity_webhook_messages_{name} ON identity_webhook_messages"
            f" TO {role} USING (true) WITH CHECK (true)"
        )


def downgrade() -> None:
    from importlib import import_module

    lists = import_module("backend.alembic.versions.0007_lists_sharing_rls")
    op.drop_table("identity_webhook_messages")
    op.execute("DROP POLICY task_changes_worker ON task_changes")
    op.execute(f"REVOKE ALL ON task_changes FROM {WORKER}")
    op.execute(f"DROP FUNCTION {_WITHOUT_SIGNATURE}")
    op.execute(f"DROP FUNCTION {_FINISH_SIGNATURE}")
    op.execute(lists._WRITE_ONE.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
    op.drop_index("ix_task_changes_session_all", table_name="task_changes")
    op.drop_index("ix_approvals_session", table_name="approvals")
    # What the foreign key and NOT NULL cannot hold: `user.deleted` events, about users gone.
    op.execute("DELETE FROM events WHERE subject IS NULL OR user_id NOT IN (SELECT id FROM users)")
    op.alter_column("events", "subject", nullable=False)
    op.create_foreign_key(
        "events_user_id_fkey", "events", "users", ["user_id"], ["id"], ondelete="CASCADE"
    )
    op.drop_index("ix_users_erasing", table_name="users")
    op.drop_column("users", "erasing_at")
