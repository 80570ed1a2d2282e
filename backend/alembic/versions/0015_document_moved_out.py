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

_WRITE_EVENT = """
CREATE OR REPLACE FUNCTION documents_write_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    d documents;
    kind text;
    reader record;
BEGIN
    IF TG_OP = 'DELETE' THEN
        d := OLD;
        kind := 'document.deleted';
    ELSIF TG_OP = 'INSERT' THEN
        d := NEW;
        kind := 'document.created';
    ELSIF (NEW.version, NEW.title, NEW.list_id) IS DISTINCT FROM
          (OLD.version, OLD.title, OLD.list_id) THEN
        d := NEW;
        kind := 'document.updated';
    ELSE
        RETURN NULL;
    END IF;
    FOR reader IN SELECT m.user_id FROM list_members m WHERE m.list_id = d.list_id
                  ORDER BY m.user_id
    LOOP
        PERFORM todo_write_event(reader.user_id, kind, d.id, jsonb_build_object(
            'document_id', d.id, 'list_id', d.list_id, 'title', d.title));
    END LOOP;
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
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    # CREATE OR REPLACE keeps 0011's owner (the definer) and grants.
    op.execute(_WRITE_EVENT)


def downgrade() -> None:
    documents = import_module("backend.alembic.versions.0011_documents")
    op.execute(documents._WRITE_EVENT.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
