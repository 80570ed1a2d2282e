"""a document moved to another list is `document.deleted` for those who no longer read it

Revision ID: 0015
Revises: 0014

0011's `documents_write_event` told a moved document's change (`document.updated`) only to
the members of its new list: a member of the old list who is not one of the new lost the
document and was never told. Now each of them gets `document.deleted` (`document_id`, the
OLD `list_id`, and the title they knew it by), as `tasks_write_event` (0007) does for a task
moved out of their reach. The new list's members get `document.updated` as before.
"""

from collections.abc import Sequence
from importlib import import_module

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_documents = import_module("backend.alembic.versions.0011_documents")
_ENDING = "    RETURN NULL;\nEND\n$$"  # 0011's body's last statement, once in it
# After 0011's events to the list's members (of the new list, on a move): a move's
# `document.deleted` to the old list's members who are not in the new one.
_MOVED_OUT = """
    IF TG_OP = 'UPDATE' AND NEW.list_id <> OLD.list_id THEN
        FOR reader IN
            SELECT m.user_id FROM list_members m
            WHERE m.list_id = OLD.list_id
              AND m.user_id NOT IN (SELECT user_id FROM list_members WHERE list_id = NEW.list_id)
            ORDER BY m.user_id
        LOOP
            PERFORM todo_write_event(reader.user_id, 'document.deleted', OLD.id,
                jsonb_build_object('document_id', OLD.id, 'list_id', OLD.list_id,
                                   'title', OLD.title));
        END LOOP;
    END IF;
"""
_BEFORE = _documents._WRITE_EVENT.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
assert _BEFORE.count(_ENDING) == 1
_AFTER = _BEFORE.replace(_ENDING, _MOVED_OUT.lstrip("\n") + _ENDING)


def upgrade() -> None:
    # CREATE OR REPLACE keeps 0011's owner (the definer) and grants.
    op.execute(_AFTER)


def downgrade() -> None:
    op.execute(_BEFORE)
