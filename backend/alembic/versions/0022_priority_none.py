"""a task's priority may be "none", which is the default

Revision ID: 0022
Revises: 0021

Before, every task had low, medium or high (medium by default), and CalDAV remembered in
`dav_items.priority_none` that a client had sent a task without PRIORITY, so that it came
back without one. A task made in the chat or over REST was medium in every app. Now "none"
is a priority like the others (a string, so the column stays NOT NULL) and the default:

- `ck_tasks_priority` admits 'none'; the server default is 'none'.
- A task whose item carries `priority_none` (still medium: a change since clears the mark)
  becomes 'none'; every other task keeps its priority. Its ICS does not change (no PRIORITY
  before and after), so neither `updated_at` nor its ETag moves, and the tasks' triggers are
  off for it: it is not news.
- `dav_items.priority_none` goes, and `tasks_dav_track` (0018) no longer keeps it.

Downgrade: 'none' is medium again, marked `priority_none` where the task has an item.
"""

from collections.abc import Sequence
from importlib import import_module

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

caldav = import_module("backend.alembic.versions.0018_caldav")

_TRACK_SIGNATURE = "tasks_dav_track()"
_TRACK_EDITS = [
    (
        """UPDATE dav_items SET revision = rev, deleted = NEW.deleted_at IS NOT NULL,
               priority_none = priority_none AND NEW.priority = OLD.priority
        WHERE""",
        """UPDATE dav_items SET revision = rev, deleted = NEW.deleted_at IS NOT NULL
        WHERE""",
    ),
    (
        """INSERT INTO dav_items AS i (list_id, name, task_id, uid, revision, deleted, extra,
                                priority_none)""",
        "INSERT INTO dav_items AS i (list_id, name, task_id, uid, revision, deleted, extra)",
    ),
    (
        """moved.extra,
            COALESCE(moved.priority_none, false))""",
        "moved.extra)",
    ),
    (
        """deleted = EXCLUDED.deleted, extra = EXCLUDED.extra,
        priority_none = EXCLUDED.priority_none;""",
        "deleted = EXCLUDED.deleted, extra = EXCLUDED.extra;",
    ),
]


def _track_without_priority_none() -> str:
    source = caldav._TRACK
    for old, new in _TRACK_EDITS:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


def _replace_track(source: str) -> None:
    """Make `tasks_dav_track` again from `source`, owned and granted as 0018 made it."""
    op.execute("DROP TRIGGER tasks_track_dav ON tasks")
    op.execute(f"DROP FUNCTION {_TRACK_SIGNATURE}")
    op.execute(source)
    op.execute(f"ALTER FUNCTION {_TRACK_SIGNATURE} OWNER TO {caldav.DEFINER}")
    op.execute(f"REVOKE ALL ON FUNCTION {_TRACK_SIGNATURE} FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION {_TRACK_SIGNATURE} TO {caldav.APP}, {caldav.WORKER}")
    op.execute(
        "CREATE TRIGGER tasks_track_dav AFTER INSERT OR UPDATE OR DELETE ON tasks "
        "FOR EACH ROW EXECUTE FUNCTION tasks_dav_track()"
    )


def _constraint(levels: str, default: str) -> None:
    op.drop_constraint("ck_tasks_priority", "tasks", type_="check")
    op.create_check_constraint("ck_tasks_priority", "tasks", f"priority IN ({levels})")
    op.alter_column("tasks", "priority", server_default=default)


def upgrade() -> None:
    _constraint("'none', 'low', 'medium', 'high'", "none")
    op.execute("ALTER TABLE tasks DISABLE TRIGGER USER")  # the same ICS: not news
    op.execute(
        "UPDATE tasks SET priority = 'none' FROM dav_items i"
        " WHERE i.task_id = tasks.id AND i.priority_none AND tasks.priority = 'medium'"
    )
    op.execute("ALTER TABLE tasks ENABLE TRIGGER USER")
    _replace_track(_track_without_priority_none())
    op.drop_column("dav_items", "priority_none")


def downgrade() -> None:
    op.add_column(
        "dav_items",
        sa.Column("priority_none", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
    _replace_track(caldav._TRACK)
    op.execute(
        "UPDATE dav_items i SET priority_none = true FROM tasks t"
        " WHERE i.task_id = t.id AND t.priority = 'none'"
    )
    op.execute("ALTER TABLE tasks DISABLE TRIGGER USER")
    op.execute("UPDATE tasks SET priority = 'medium' WHERE priority = 'none'")
    op.execute("ALTER TABLE tasks ENABLE TRIGGER USER")
    _constraint("'low', 'medium', 'high'", "medium")
