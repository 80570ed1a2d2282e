"""a turn outlives its replica: one reply per user message, and a lease only a live turn holds

Revision ID: 0013
Revises: 0012

A turn whose replica died is finished by another replica's sweeper (services/sweeper.py)
once its lease lapses. For that to happen exactly once:

- `agent_messages.reply_to`: the user message a reply answers, unique. A second reply to
  one message (a replica that wakes up after its turn was taken over, or two takeovers) is
  refused by the database. A regenerated answer is asked for again on purpose: it has none.
- `todo_finish_turn` stores the reply only while the turn still holds the session
  (`lease_owner`, each attempt's own token), locking the user's row and then the session's
  as `todo_open_turn` does, and says whether the turn was taken over.
- `todo_open_turn` takes a session only when no turn holds it: a lapsed lease still names
  a turn that must be finished first, by the sweeper, not dropped by the next message.
- `agent_sessions.takeovers`: counts the takeovers of the session's turns, so that each
  new attempt at a turn numbers its stream's events after the ones before it.
- `todo_lapsed_turns(n)`: the sessions whose turn's lease lapsed, for the worker role,
  which sees no one's sessions (a definer function, as in 0007); it reads a partial index.
- `idempotency_keys.message_id`: the user message a key's turn stored, so that a retry
  after its replica died still names that turn (409 until it is answered), and the sweeper
  stores the key's answer with the reply.
"""

from collections.abc import Sequence
from importlib import import_module

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD_FINISH = (
    "todo_finish_turn(text, uuid, uuid, uuid, text, boolean, integer, integer, integer, integer)"
)
_FINISH_SIGNATURE = (
    "todo_finish_turn(text, uuid, uuid, uuid, uuid, text, boolean, integer, integer, integer, "
    "integer)"
)

_FINISH_TURN = """
CREATE FUNCTION todo_finish_turn(
    owner text, session uuid, message uuid, turn uuid, answers uuid, content text,
    stub boolean, prompt integer, completion integer, total integer, cached integer
) RETURNS TABLE (created_at timestamptz, taken_over boolean) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    holder uuid;
BEGIN
    PERFORM set_config('todo_agent.user_id', owner, true);
    -- The user's row first, then the session's, as todo_open_turn takes them.
    PERFORM FROM users u WHERE u.id = owner FOR NO KEY UPDATE;
    SELECT s.lease_owner INTO holder FROM agent_sessions s
    WHERE s.id = session AND s.user_id = owner FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;  -- no row: not the user's session
    END IF;
    IF holder IS DISTINCT FROM turn THEN
        taken_over := true;  -- another replica finishes this turn: write nothing
        RETURN NEXT;
        RETURN;
    END IF;
    WITH spent AS (
        UPDATE users SET
            tokens_used = CASE WHEN tokens_day = CURRENT_DATE THEN tokens_used ELSE 0 END
                          + total,
            tokens_day = CURRENT_DATE
        WHERE id = owner
        RETURNING id
    ), reply AS (
        INSERT INTO agent_messages AS m (id, session_id, user_id, role, content, using_stub,
                                         prompt_tokens, completion_tokens, cached_tokens,
                                         reply_to, created_at)
        VALUES (message, session, owner, 'assistant', content, stub, prompt, completion,
                cached, answers, clock_timestamp())
        ON CONFLICT (id) DO UPDATE SET
            content = EXCLUDED.content, using_stub = EXCLUDED.using_stub,
            prompt_tokens = EXCLUDED.prompt_tokens,
            completion_tokens = EXCLUDED.completion_tokens,
            cached_tokens = EXCLUDED.cached_tokens
        RETURNING m.created_at
    )
    UPDATE agent_sessions s SET
        updated_at = now(),
        prompt_tokens = s.prompt_tokens + prompt,
        completion_tokens = s.completion_tokens + completion,
        total_tokens = s.total_tokens + total,
        cached_tokens = s.cached_tokens + cached,
        lease_owner = NULL,
        lease_expires_at = NULL
    FROM spent
    WHERE s.id = session
    RETURNING (SELECT created_at FROM reply) INTO created_at;
    taken_over := false;
    RETURN NEXT;
END
$$
"""

_LAPSED_TURNS = """
CREATE FUNCTION todo_lapsed_turns(want integer)
RETURNS TABLE (session_id uuid, user_id text, turn uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT s.id, s.user_id, s.lease_owner FROM agent_sessions s
    WHERE s.lease_owner IS NOT NULL AND s.lease_expires_at < now()
    ORDER BY s.lease_expires_at
    LIMIT want
$$
"""

# In todo_open_turn (0007), the two places that take a session whose lease expired.
_TAKES_LAPSED = (
    "WHERE s.lease_expires_at IS NULL OR s.lease_expires_at < now()",
    "AND (s.lease_expires_at IS NULL OR s.lease_expires_at < now())",
)
_TAKES_FREE = ("WHERE s.lease_owner IS NULL", "AND s.lease_owner IS NULL")


def _open_turn(taking: tuple[str, str]) -> str:
    """0007's todo_open_turn, taking sessions as `taking` says."""
    source: str = import_module("backend.alembic.versions.0007_lists_sharing_rls")._OPEN_TURN
    for lapsed, replacement in zip(_TAKES_LAPSED, taking, strict=True):
        assert source.count(lapsed) == 1, lapsed
        source = source.replace(lapsed, replacement)
    return source.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")


def upgrade() -> None:
    op.add_column("agent_messages", sa.Column("reply_to", sa.Uuid(), nullable=True))
    op.create_index(
        "ux_agent_messages_reply_to",
        "agent_messages",
        ["reply_to"],
        unique=True,
        postgresql_where=sa.text("reply_to IS NOT NULL"),
    )
    op.create_index(
        "ix_agent_sessions_lease",
        "agent_sessions",
        ["lease_expires_at"],
        postgresql_where=sa.text("lease_owner IS NOT NULL"),
    )
    op.add_column(
        "agent_sessions",
        sa.Column("takeovers", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column("idempotency_keys", sa.Column("message_id", sa.Uuid(), nullable=True))
    op.execute(f"DROP FUNCTION {_OLD_FINISH}")
    op.execute(_FINISH_TURN)
    op.execute(_open_turn(_TAKES_FREE))
    op.execute(_LAPSED_TURNS)
    op.execute("ALTER FUNCTION todo_lapsed_turns(integer) OWNER TO todo_agent_definer")
    op.execute("REVOKE ALL ON FUNCTION todo_lapsed_turns(integer) FROM PUBLIC")
    op.execute("GRANT EXECUTE ON FUNCTION todo_lapsed_turns(integer) TO todo_agent_worker")


def downgrade() -> None:
    op.execute("DROP FUNCTION todo_lapsed_turns(integer)")
    op.execute(_open_turn(_TAKES_LAPSED))
    op.execute(f"DROP FUNCTION {_FINISH_SIGNATURE}")
    old = import_module("backend.alembic.versions.0007_lists_sharing_rls")._FINISH_TURN
    op.execute(old)
    op.drop_column("idempotency_keys", "message_id")
    op.drop_column("agent_sessions", "takeovers")
    op.drop_index("ix_agent_sessions_lease", table_name="agent_sessions")
    op.drop_index("ux_agent_messages_reply_to", table_name="agent_messages")
    op.drop_column("agent_messages", "reply_to")
