"""documents in lists, cut into passages that full-text search finds; under the same
row-level security as tasks; `document.*` events to every member

Revision ID: 0011
Revises: 0010

A document belongs to a list: its members read it, owners and editors write it (the
tasks' policies). Its passages carry the list's id too, so that their policy needs no
join, and a composite foreign key keeps it the document's (moving a document moves them).

A passage's `search` vector weighs the document's title (A) and its heading path (B) above
its body (D), in the 'english' configuration so that word forms meet ("renewing",
"renewal"). Its `content_hash` names what it says (title, heading, text): a replaced
document keeps the rows (and ids) of passages whose content did not change, so work done
per passage (a vector) is done once per version of it.

Search runs in `todo_search_passages`, SECURITY DEFINER: under row-level security
PostgreSQL may not use a condition whose operator is not leakproof (`@@` is not) to scan an
index before the policy has filtered the rows, so the GIN index would go unused. The
function holds the policy's line itself (the acting user's lists, `todo_my_lists`).

The quota (DOCUMENT_QUOTA_BYTES) spans all the lists of a list's owner, some of which the
uploader may not reach: `todo_document_bytes` sums them, under a lock per owner, so two
uploads at once cannot both pass it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import TSVECTOR

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP, WORKER, DEFINER = "todo_agent_app", "todo_agent_worker", "todo_agent_definer"
_NOW = sa.text("now()")

_READ = "list_id IN (SELECT todo_my_lists())"
_WRITE = "list_id IN (SELECT todo_my_lists('editor'))"
_POLICIES = [
    ("select", "SELECT", f"USING ({_READ})"),
    ("insert", "INSERT", f"WITH CHECK ({_WRITE})"),
    ("update", "UPDATE", f"USING ({_WRITE}) WITH CHECK ({_WRITE})"),
    ("delete", "DELETE", f"USING ({_WRITE})"),
]
_TABLES = ("documents", "passages")

# Each change of a document (made, replaced or renamed, deleted) to every member of its
# list, and so to the webhook.
_WRITE_EVENT = """
CREATE FUNCTION documents_write_event() RETURNS trigger
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
    RETURN NULL;
END
$$
"""

# The bytes of documents in every list owned by the owner of `list`, which the acting user
# may write; the owner's uploads are serialized (a transaction-level advisory lock) until
# commit, so the sum stays true while the caller adds its own.
_BYTES = """
CREATE FUNCTION todo_document_bytes(list uuid) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    owner text;
BEGIN
    IF list NOT IN (SELECT todo_my_lists('editor')) THEN
        RAISE EXCEPTION 'cannot write list %', list USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT owner_id INTO owner FROM lists WHERE id = list;
    PERFORM pg_advisory_xact_lock(hashtextextended('todo_agent.documents:' || owner, 0));
    RETURN (SELECT COALESCE(sum(d.bytes), 0) FROM documents d
            JOIN lists l ON l.id = d.list_id WHERE l.owner_id = owner);
END
$$
"""

# Passages the acting user reads (in `list`, when given) holding any of the query's terms
# (each a word, or a phrase when `phrases` says so; stop words drop out), best first: a
# passage scores, for each term it holds, the term's rarity among the passages found
# (ln(1 + found / holding it)) times 1 plus its weighted rank (title and heading above
# body). So the more of the words, and the rarer, the better; no word is required. Each
# passage found is read once, into what it holds of each term (its vector, a kilobyte or
# more, is not carried further).
_SEARCH = """
CREATE FUNCTION todo_search_passages(words text[], phrases boolean[], list uuid, want integer)
RETURNS TABLE (passage_id uuid, document_id uuid, score float8)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    terms tsquery[] := '{}';
    any_term tsquery;
    term tsquery;
    mine uuid[];
BEGIN
    FOR i IN 1 .. COALESCE(array_length(words, 1), 0) LOOP
        term := CASE WHEN phrases[i] THEN phraseto_tsquery('english', words[i])
                     ELSE plainto_tsquery('english', words[i]) END;
        IF numnode(term) > 0 AND NOT term = ANY (terms) THEN
            terms := terms || term;
            any_term := CASE WHEN any_term IS NULL THEN term ELSE any_term || term END;
        END IF;
    END LOOP;
    IF any_term IS NULL THEN
        RETURN;
    END IF;
    mine := ARRAY(SELECT l FROM todo_my_lists() AS l WHERE list IS NULL OR l = list);
    RETURN QUERY
    WITH found AS MATERIALIZED (
        SELECT p.id, p.document_id,
               ARRAY(SELECT CASE WHEN p.search @@ t.term
                                 THEN 1 + ts_rank('{0.1, 0.2, 0.4, 1.0}', p.search, t.term)
                                 ELSE 0 END
                     FROM unnest(terms) WITH ORDINALITY AS t(term, n) ORDER BY t.n) AS held
        FROM passages p
        WHERE p.list_id = ANY (mine) AND p.search @@ any_term
    ), rarity AS (
        SELECT array_agg(ln(1 + total::float8 / GREATEST(holding, 1)) ORDER BY n) AS idf
        FROM (SELECT n, count(*) FILTER (WHERE f.held[n] > 0) AS holding, count(*) AS total
              FROM found f, generate_series(1, cardinality(terms)) AS n GROUP BY n) AS counted
    )
    SELECT f.id, f.document_id,
           (SELECT sum(r.idf[n] * f.held[n]) FROM generate_series(1, cardinality(terms)) AS n)
    FROM found f, rarity r
    ORDER BY 3 DESC, f.id
    LIMIT want;
END
$$
"""

_DEFINERS = [
    "documents_write_event()",
    "todo_document_bytes(uuid)",
    "todo_search_passages(text[], boolean[], uuid, integer)",
]


def upgrade() -> None:
    op.create_table(
        "documents",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column(
            "list_id", sa.Uuid(), sa.ForeignKey("lists.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("media_type", sa.String(length=100), nullable=False),
        sa.Column("bytes", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column(
            "created_by",
            sa.String(length=255),
            sa.ForeignKey("users.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=_NOW, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=_NOW, nullable=False),
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.UniqueConstraint("list_id", "id", name="uq_documents_list_id"),
    )
    op.create_index("ix_documents_list_created", "documents", ["list_id", "created_at"])
    op.create_index("ix_documents_created_by", "documents", ["created_by"])
    op.create_table(
        "passages",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("document_id", sa.Uuid(), nullable=False),
        sa.Column("list_id", sa.Uuid(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("heading", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("search", TSVECTOR(), nullable=False),
        sa.ForeignKeyConstraint(
            ["list_id", "document_id"],
            ["documents.list_id", "documents.id"],
            name="fk_passages_document",
            ondelete="CASCADE",
            onupdate="CASCADE",
        ),
    )
    op.create_index("ix_passages_document", "passages", ["document_id", "ordinal"])
    op.create_index("ix_passages_list", "passages", ["list_id"])
    op.create_index("ix_passages_search", "passages", ["search"], postgresql_using="gin")
    for function in (_WRITE_EVENT, _BYTES, _SEARCH):
        op.execute(function)
    op.execute(
        "CREATE TRIGGER documents_events AFTER INSERT OR UPDATE OR DELETE ON documents "
        "FOR EACH ROW EXECUTE FUNCTION documents_write_event()"
    )
    for signature in _DEFINERS:
        op.execute(f"ALTER FUNCTION {signature} OWNER TO {DEFINER}")
        op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {APP}")
    for table in _TABLES:
        # The app and definer have them by 0007's default privileges; background work
        # (erasure's sweep of `created_by`, vectors computed later) runs as the worker.
        op.execute(f"GRANT SELECT, UPDATE ON {table} TO {WORKER}")
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        for name, command, clauses in _POLICIES:
            op.execute(f"CREATE POLICY {table}_{name} ON {table} FOR {command} TO {APP} {clauses}")
        for role, name in ((DEFINER, "definer"), (WORKER, "worker")):
            op.execute(
                f"CREATE POLICY {table}_{name} ON {table} TO {role} USING (true) WITH CHECK (true)"
            )


def downgrade() -> None:
    op.execute("DROP TRIGGER documents_events ON documents")
    for signature in _DEFINERS:
        op.execute(f"DROP FUNCTION {signature}")
    op.drop_table("passages")
    op.drop_table("documents")
