"""passages' vectors for search by meaning, where the database has pgvector

Revision ID: 0012
Revises: 0011

Only when the server offers the `vector` extension (the embedded PostgreSQL does); without
it this revision creates nothing, search stays by words, and the service says so once at
start. `todo-agent migrate` (and so every `serve`) tries again while the table is missing,
so installing pgvector later is enough (`create` below).

`passage_vectors` holds one row per passage and embeddings model, the unique key that makes
"at most once per passage version and model" the database's: a passage's id lasts while its
content does (0011), and `content_hash` records which content a vector was computed from. A
row is first a claim (no vector yet, leased to a worker, retried with backoff when the
embeddings server fails), then the vector and its `dims`. Search compares only the vectors
of the configured model and of the query's dimensions, so a change of model (or of its
dimensions) never compares vectors from two spaces.

The column is `vector` without a fixed size, since the model and so the size are the
operator's choice; an HNSW index needs one, so there is one partial expression index per
usual size (`embedding::vector(N)` where `dims = N`), cosine distance. Sizes outside the
list (and above HNSW's 2,000) are searched exactly. `todo_nearest_passages` (SECURITY
DEFINER, holding the policy's line itself like `todo_search_passages`) writes the size
into its statement so that the planner can match those indexes, and uses them only for a
reader who holds enough of all vectors that HNSW, which filters after it searches, brings
enough of theirs; anyone else's own vectors are compared one by one.

The rows carry their passage's list (a composite foreign key keeps it so, moving with the
document), under the same forced row-level security as passages: the list's members read
them; the worker writes them.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Connection

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP, WORKER, DEFINER = "todo_agent_app", "todo_agent_worker", "todo_agent_definer"

# Sizes of the usual models: all-MiniLM and bge-small (384), nomic-embed-text and bge-base
# (768), bge-large and mxbai-embed-large (1024), text-embedding-3-small and ada-002 (1536);
# 256 and 512 for models asked for fewer dimensions.
INDEXED_DIMENSIONS = (256, 384, 512, 768, 1024, 1536)
# HNSW finds the nearest among everyone's vectors and filters by reader after: to bring
# `want` of a reader's it must look at about want / (their share of all vectors), twice
# that to be safe, and it looks at no more than 1,000 (`hnsw.ef_search`'s limit). A reader
# holding too small a share for that gets an exact scan of their own vectors instead,
# which is cheap exactly because they are few.
_MAX_EF_SEARCH = 1000

_TABLE = """
CREATE TABLE passage_vectors (
    passage_id uuid NOT NULL,
    list_id uuid NOT NULL,
    model text NOT NULL,
    content_hash varchar(64) NOT NULL,
    dims integer,
    embedding vector,
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    leased_until timestamptz,
    embedded_at timestamptz,
    PRIMARY KEY (passage_id, model),
    CONSTRAINT fk_passage_vectors_passage FOREIGN KEY (list_id, passage_id)
        REFERENCES passages (list_id, id) ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT ck_passage_vectors_dims CHECK ((embedding IS NULL) = (dims IS NULL)
        AND (embedding IS NULL OR vector_dims(embedding) = dims))
)
"""

_INDEXED = "{" + ",".join(map(str, INDEXED_DIMENSIONS)) + "}"
_NEAREST = f"""
CREATE FUNCTION todo_nearest_passages(model text, query vector, list uuid, want integer)
RETURNS TABLE (passage_id uuid, distance float8)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    size integer := vector_dims(query);
    mine uuid[];
    readable integer;
    everyone float8;
    ef float8;
BEGIN
    mine := ARRAY(SELECT l FROM todo_my_lists() AS l WHERE list IS NULL OR l = list);
    SELECT count(*) INTO readable FROM passage_vectors v
    WHERE v.list_id = ANY (mine) AND v.model = $1 AND v.dims = size;
    IF readable = 0 THEN
        RETURN;
    END IF;
    SELECT greatest(c.reltuples, readable) INTO everyone FROM pg_class c
    WHERE c.oid = 'passage_vectors'::regclass;
    ef := 2 * want * everyone / readable;
    IF size = ANY ('{_INDEXED}'::integer[]) AND ef <= {_MAX_EF_SEARCH} AND readable > 10 * want THEN
        PERFORM set_config('hnsw.ef_search', greatest(40, ceil(ef))::text, true);
        RETURN QUERY EXECUTE format(
            'SELECT v.passage_id, (v.embedding::vector(%1$s) <=> $1::vector(%1$s))::float8'
            ' FROM passage_vectors v WHERE v.dims = %1$s AND v.model = $2'
            ' AND v.list_id = ANY ($3) ORDER BY 2 LIMIT $4', size)
        USING query, model, mine, want;
        RETURN;
    END IF;
    -- Their own vectors, each compared: kept off the HNSW index, which would find too few.
    PERFORM set_config('enable_indexscan', 'off', true);
    RETURN QUERY
    SELECT v.passage_id, (v.embedding <=> query)::float8 FROM passage_vectors v
    WHERE v.list_id = ANY (mine) AND v.model = $1 AND v.dims = size
    ORDER BY 2 LIMIT want;
    PERFORM set_config('enable_indexscan', 'on', true);
END
$$
"""  # noqa: S608 (the module's own constants, not input)


def available(connection: Connection) -> bool:
    """Whether this server can have pgvector (installed, or installable)."""
    found = connection.execute(
        sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    ).first()
    return found is not None


def present(connection: Connection) -> bool:
    table = connection.execute(sa.text("SELECT to_regclass('passage_vectors')")).scalar()
    return table is not None


def create(connection: Connection) -> bool:
    """The extension, the table, its indexes, policies and search function, when pgvector is
    available and they are not there yet; whether they are there now. Creating the
    extension may need a superuser: when the login cannot, nothing is created."""
    if present(connection):
        return True
    if not available(connection):
        return False
    try:
        with connection.begin_nested():
            connection.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector"))
    except sa.exc.DBAPIError:
        return False  # not ours to install: a superuser can (docs/documents.md)
    for statement in _statements():
        connection.execute(sa.text(statement))
    return True


def _statements() -> list[str]:
    read = "list_id IN (SELECT todo_my_lists())"
    statements = [
        "ALTER TABLE passages ADD CONSTRAINT uq_passages_list_id UNIQUE (list_id, id)",
        _TABLE,
        "CREATE INDEX ix_passage_vectors_list ON passage_vectors (list_id, model, dims)",
        # The claims to try again, by when.
        "CREATE INDEX ix_passage_vectors_pending ON passage_vectors (model, next_attempt_at)"
        " WHERE embedding IS NULL",
    ]
    statements += [
        f"CREATE INDEX ix_passage_vectors_hnsw_{size} ON passage_vectors"
        f" USING hnsw ((embedding::vector({size})) vector_cosine_ops) WHERE dims = {size}"
        for size in INDEXED_DIMENSIONS
    ]
    statements += [
        _NEAREST,
        "ALTER FUNCTION todo_nearest_passages(text, vector, uuid, integer) OWNER TO " + DEFINER,
        "REVOKE ALL ON FUNCTION todo_nearest_passages(text, vector, uuid, integer) FROM PUBLIC",
        f"GRANT EXECUTE ON FUNCTION todo_nearest_passages(text, vector, uuid, integer) TO {APP}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON passage_vectors TO {WORKER}",
        "ALTER TABLE passage_vectors ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE passage_vectors FORCE ROW LEVEL SECURITY",
        f"CREATE POLICY passage_vectors_select ON passage_vectors FOR SELECT TO {APP}"
        f" USING ({read})",
        f"CREATE POLICY passage_vectors_definer ON passage_vectors TO {DEFINER}"
        " USING (true) WITH CHECK (true)",
        f"CREATE POLICY passage_vectors_worker ON passage_vectors TO {WORKER}"
        " USING (true) WITH CHECK (true)",
    ]
    return statements


def upgrade() -> None:
    create(op.get_bind())


def downgrade() -> None:
    if present(op.get_bind()):
        op.execute("DROP FUNCTION todo_nearest_passages(text, vector, uuid, integer)")
        op.execute("DROP TABLE passage_vectors")
        op.execute("ALTER TABLE passages DROP CONSTRAINT uq_passages_list_id")
    # The extension stays: other databases' objects may use it, and dropping it needs a
    # superuser.
