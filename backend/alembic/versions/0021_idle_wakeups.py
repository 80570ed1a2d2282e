"""the database says when there is work: reminders and leases NOTIFY their times

Revision ID: 0021
Revises: 0020

An idle replica asked PostgreSQL about 9 statements a second (a reminder clock and a turn
sweeper polling every second, among others). Now each loop sleeps until the next time it
read (the earliest unfired reminder, the earliest lease to lapse) and is told of earlier
ones by the writer's own transaction, whatever path wrote them:

- `tasks_reminder_notify` (after INSERT, and after UPDATE OF the columns that make a
  reminder pending): when a row's reminder becomes pending or moves, NOTIFY
  `todo_agent_reminders` with its time (seconds since the epoch, rounded down to the
  second, so that a bulk write of many reminders sends one notification a second of them:
  PostgreSQL folds equal ones within a transaction).
- `agent_sessions_lease_notify`: when a turn's lease is cut short (a draining replica's
  hand-over), NOTIFY `todo_agent_leases` with when it lapses (now). A lease taken is
  announced by its replica, not here: a turn's transaction stays free of NOTIFY, which
  PostgreSQL serializes at commit (services/sweeper.py). A renewal, which only moves the
  lapse later, says nothing: a sweeper due to look at the old time looks, and reads the new
  one.
- `todo_next_lapse()`: when the earliest held lease lapses, for the worker role, which sees
  no one's sessions (a definer function, as `todo_lapsed_turns` of 0013); it reads 0013's
  partial index.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PENDING = (
    "NEW.remind_at IS NOT NULL AND NEW.reminded_at IS NULL AND NOT NEW.completed"
    " AND NEW.deleted_at IS NULL"
)

_REMINDER_NOTIFY = """
CREATE FUNCTION todo_reminder_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('todo_agent_reminders', floor(EXTRACT(EPOCH FROM NEW.remind_at))::text);
    RETURN NULL;
END
$$
"""

_LEASE_NOTIFY = """
CREATE FUNCTION todo_lease_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('todo_agent_leases', EXTRACT(EPOCH FROM NEW.lease_expires_at)::text);
    RETURN NULL;
END
$$
"""

_NEXT_LAPSE = """
CREATE FUNCTION todo_next_lapse()
RETURNS TABLE (due float8, now float8)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT EXTRACT(EPOCH FROM min(s.lease_expires_at))::float8,
           EXTRACT(EPOCH FROM clock_timestamp())::float8
    FROM agent_sessions s WHERE s.lease_owner IS NOT NULL
$$
"""


def upgrade() -> None:
    op.execute(_REMINDER_NOTIFY)
    op.execute(
        "CREATE TRIGGER tasks_reminder_notify_insert AFTER INSERT ON tasks FOR EACH ROW"
        f" WHEN ({_PENDING}) EXECUTE FUNCTION todo_reminder_notify()"
    )
    op.execute(
        "CREATE TRIGGER tasks_reminder_notify AFTER UPDATE OF remind_at, reminded_at,"
        f" completed, deleted_at ON tasks FOR EACH ROW WHEN ({_PENDING} AND ("
        " OLD.remind_at IS DISTINCT FROM NEW.remind_at OR OLD.reminded_at IS NOT NULL"
        " OR OLD.completed OR OLD.deleted_at IS NOT NULL)) EXECUTE FUNCTION todo_reminder_notify()"
    )
    op.execute(_LEASE_NOTIFY)
    op.execute(
        "CREATE TRIGGER agent_sessions_lease_notify AFTER UPDATE OF lease_expires_at"
        " ON agent_sessions FOR EACH ROW WHEN (NEW.lease_owner IS NOT NULL"
        " AND OLD.lease_owner = NEW.lease_owner AND NEW.lease_expires_at < OLD.lease_expires_at)"
        " EXECUTE FUNCTION todo_lease_notify()"
    )
    op.execute(_NEXT_LAPSE)
    op.execute("ALTER FUNCTION todo_next_lapse() OWNER TO todo_agent_definer")
    op.execute("REVOKE ALL ON FUNCTION todo_next_lapse() FROM PUBLIC")
    op.execute("GRANT EXECUTE ON FUNCTION todo_next_lapse() TO todo_agent_worker")


def downgrade() -> None:
    op.execute("DROP FUNCTION todo_next_lapse()")
    op.execute("DROP TRIGGER agent_sessions_lease_notify ON agent_sessions")
    op.execute("DROP FUNCTION todo_lease_notify()")
    op.execute("DROP TRIGGER tasks_reminder_notify ON tasks")
    op.execute("DROP TRIGGER tasks_reminder_notify_insert ON tasks")
    op.execute("DROP FUNCTION todo_reminder_notify()")
