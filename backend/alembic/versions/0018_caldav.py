"""CalDAV: app passwords, slowed sign-in, and each list's and task's change counters

Revision ID: 0018
Revises: 0017

`app_passwords` and `dav_sign_ins` are a person's own rows (the acting user's).
`dav_collections` (a list's counter) and `dav_items` (a task's name, UID, revision and what
the service does not model) are held like tasks: members read them, owners and editors
write them.

`tasks_dav_track` (the trigger `tasks_track_dav`, the last to fire), after every change of
a task, bumps its list's counter and gives the task's item that revision: its ETag, and
what `sync-collection` reports after a token.
The counter row is locked until commit, so one list's changes commit in the order of their
revisions and a token never skips a change still in flight. A task leaving a list (trash,
purge, a move) leaves a tombstone there (`deleted`), which a client syncing from an older
token learns as gone; a trashed task keeps its row, so restoring it brings it back under
its name.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP, WORKER, DEFINER = "todo_agent_app", "todo_agent_worker", "todo_agent_definer"
_NOW = sa.text("now()")

_MINE = "user_id = (SELECT todo_acting_user())"
_READ = "list_id IN (SELECT todo_my_lists())"
_WRITE = "list_id IN (SELECT todo_my_lists('editor'))"
_POLICIES: dict[str, list[tuple[str, str, str]]] = {
    "app_passwords": [("all", "ALL", f"USING ({_MINE}) WITH CHECK ({_MINE})")],
    "dav_sign_ins": [("all", "ALL", f"USING ({_MINE}) WITH CHECK ({_MINE})")],
    **{
        table: [
            ("select", "SELECT", f"USING ({_READ})"),
            ("insert", "INSERT", f"WITH CHECK ({_WRITE})"),
            ("update", "UPDATE", f"USING ({_WRITE}) WITH CHECK ({_WRITE})"),
            ("delete", "DELETE", f"USING ({_WRITE})"),
        ]
        for table in ("dav_collections", "dav_items")
    },
}

# The list's next revision (its counter row locked until commit).
_BUMP = """
CREATE FUNCTION dav_bump(list uuid) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    INSERT INTO dav_collections (list_id, revision) VALUES (list, 1)
    ON CONFLICT (list_id) DO UPDATE SET revision = dav_collections.revision + 1
    RETURNING revision
$$
"""

_TRACK = """
CREATE FUNCTION tasks_dav_track() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    rev bigint;
    moved dav_items;
BEGIN
    IF TG_OP = 'DELETE' THEN
        -- Purged from the trash: already a tombstone, which now names no task. Deleted
        -- outright (a list's or an account's end): a tombstone from now on. The list may
        -- be going in the same statement, so nothing is inserted here.
        UPDATE dav_items SET task_id = NULL
        WHERE list_id = OLD.list_id AND task_id = OLD.id AND deleted;
        IF NOT FOUND THEN
            UPDATE dav_collections SET revision = revision + 1 WHERE list_id = OLD.list_id
            RETURNING revision INTO rev;
            UPDATE dav_items SET task_id = NULL, deleted = true, revision = rev
            WHERE list_id = OLD.list_id AND task_id = OLD.id AND rev IS NOT NULL;
        END IF;
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.list_id = OLD.list_id
       AND NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at THEN
        -- Not a change of the task as clients see it (every one sets updated_at): who
        -- made it forgotten, a reminder marked fired, ...
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.list_id <> OLD.list_id THEN
        rev := dav_bump(OLD.list_id);
        UPDATE dav_items SET task_id = NULL, deleted = true, revision = rev
        WHERE list_id = OLD.list_id AND task_id = OLD.id
        RETURNING * INTO moved;
    ELSIF TG_OP = 'UPDATE' THEN
        rev := dav_bump(NEW.list_id);
        UPDATE dav_items SET revision = rev, deleted = NEW.deleted_at IS NOT NULL,
               priority_none = priority_none AND NEW.priority = OLD.priority
        WHERE list_id = NEW.list_id AND task_id = NEW.id;
        IF FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    rev := dav_bump(NEW.list_id);
    INSERT INTO dav_items AS i (list_id, name, task_id, uid, revision, deleted, extra,
                                priority_none)
    VALUES (NEW.list_id, COALESCE(moved.name, NEW.id || '.ics'), NEW.id,
            COALESCE(moved.uid, NEW.id::text), rev, NEW.deleted_at IS NOT NULL, moved.extra,
            COALESCE(moved.priority_none, false))
    ON CONFLICT (list_id, name) DO UPDATE
    SET task_id = EXCLUDED.task_id, uid = EXCLUDED.uid, revision = EXCLUDED.revision,
        deleted = EXCLUDED.deleted, extra = EXCLUDED.extra,
        priority_none = EXCLUDED.priority_none;
    RETURN NULL;
END
$$
"""

_DEFINERS = ["dav_bump(uuid)", "tasks_dav_track()"]


def upgrade() -> None:
    op.create_table(
        "app_passwords",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column(
            "user_id",
            sa.String(length=255),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("read_only", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_NOW, nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index(
        "ux_app_passwords_user_secret", "app_passwords", ["user_id", "secret_hash"], unique=True
    )
    op.create_table(
        "dav_sign_ins",
        sa.Column(
            "user_id",
            sa.String(length=255),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("failures", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_failure_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("blocked_until", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "dav_collections",
        sa.Column(
            "list_id", sa.Uuid(), sa.ForeignKey("lists.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("revision", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "dav_items",
        sa.Column(
            "list_id", sa.Uuid(), sa.ForeignKey("lists.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=True),
        sa.Column("uid", sa.String(length=255), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("deleted", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("extra", sa.String(), nullable=True),
        sa.Column("priority_none", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.PrimaryKeyConstraint("list_id", "name"),
    )
    op.create_index("ix_dav_items_list_revision", "dav_items", ["list_id", "revision"])
    op.create_index("ix_dav_items_task", "dav_items", ["task_id", "list_id"])
    op.create_index(
        "ux_dav_items_list_uid",
        "dav_items",
        ["list_id", "uid"],
        unique=True,
        postgresql_where=sa.text("NOT deleted"),
    )
    # What exists already: every list at revision 1, every task an item of it.
    op.execute("INSERT INTO dav_collections (list_id, revision) SELECT id, 1 FROM lists")
    op.execute(
        "INSERT INTO dav_items (list_id, name, task_id, uid, revision, deleted)"
        " SELECT list_id, id || '.ics', id, id::text, 1, deleted_at IS NOT NULL FROM tasks"
    )
    for function in (_BUMP, _TRACK):
        op.execute(function)
    # Named to fire after every other trigger on tasks (PostgreSQL fires them by name): the
    # list's counter is then the last lock a change takes, after the users' rows that
    # numbering and events lock, so concurrent writes never wait on each other in a cycle.
    op.execute(
        "CREATE TRIGGER tasks_track_dav AFTER INSERT OR UPDATE OR DELETE ON tasks "
        "FOR EACH ROW EXECUTE FUNCTION tasks_dav_track()"
    )
    for signature in _DEFINERS:
        op.execute(f"ALTER FUNCTION {signature} OWNER TO {DEFINER}")
        op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {APP}, {WORKER}")
    for table, policies in _POLICIES.items():
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        for name, command, clauses in policies:
            op.execute(f"CREATE POLICY {table}_{name} ON {table} FOR {command} TO {APP} {clauses}")
        op.execute(
            f"CREATE POLICY {table}_definer ON {table} TO {DEFINER} USING (true) WITH CHECK (true)"
        )


def downgrade() -> None:
    op.execute("DROP TRIGGER tasks_track_dav ON tasks")
    for signature in reversed(_DEFINERS):
        op.execute(f"DROP FUNCTION {signature}")
    for table in ("dav_items", "dav_collections", "dav_sign_ins", "app_passwords"):
        op.drop_table(table)
