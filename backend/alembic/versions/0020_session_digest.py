"""a session's older messages fold into its digest, with the turn's two statements

Revision ID: 0020
Revises: 0019

- `agent_sessions.digest`: a short account of the session's messages that no longer go
  to the model one by one (services/digest/); `digest_seq`: the last message folded into
  it (0: none). The digest holds the person's own session's words: the session row's
  row-level security holds it.
- `todo_history(session, after, want)`: as 0007's, reading only messages after the fold,
  and with each message's `created_at` (the time the model is told a message was sent is
  its stored time, so that it is sent again as it was first sent).
- `todo_open_turn` also answers the session's digest and fold position (from the row it
  takes the lease on: no statement more) and the new message's `created_at`.
- `todo_finish_turn` also writes a fold the turn decided, only while the session's fold
  position is still the one the turn started from: a fold is written once, whichever
  attempt or replica finishes first.
"""

from collections.abc import Sequence
from importlib import import_module

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_handover = import_module("backend.alembic.versions.0013_turn_handover")
_rls = import_module("backend.alembic.versions.0007_lists_sharing_rls")
_memories = import_module("backend.alembic.versions.0019_memories")

_OPEN_ARGS = (
    "text, uuid, boolean, text, uuid, float8, float8, float8, text, uuid, text, text, boolean,"
    " integer, integer"
)
_OLD_HISTORY = "todo_history(uuid, integer)"
_HISTORY_SIGNATURE = "todo_history(uuid, bigint, integer)"
_FINISH_SIGNATURE = (
    "todo_finish_turn(text, uuid, uuid, uuid, uuid, text, boolean, integer, integer, integer,"
    " integer, text, bigint, bigint)"
)

_HISTORY = """
CREATE FUNCTION todo_history(session uuid, after bigint, want integer) RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT COALESCE(json_agg(h ORDER BY h.seq), '[]') FROM (
        WITH RECURSIVE back AS (
            SELECT 0 AS n, 9223372036854775807::bigint AS seq, (NULL::agent_messages).id,
                   (NULL::agent_messages).role, (NULL::agent_messages).content,
                   (NULL::agent_messages).tool_calls, (NULL::agent_messages).tool_results,
                   (NULL::agent_messages).created_at
            UNION ALL
            SELECT back.n + 1, earlier.*
            FROM back, LATERAL (
                SELECT seq, id, role, content, tool_calls, tool_results, created_at
                FROM agent_messages
                WHERE session_id = session AND seq < back.seq AND seq > after
                ORDER BY seq DESC LIMIT 1
            ) AS earlier
            WHERE back.n < want
        )
        SELECT seq, id, role, content, tool_calls, tool_results, created_at
        FROM back WHERE n > 0
    ) AS h);
END
$$
"""

# 0019's todo_open_turn (0013's with the memories), and what it changes of it.
_OPEN_EDITS = (
    ("held json, memories json\n)", "held json, memories json, sent_at timestamptz,\n"
     "    digest text, folded bigint\n)"),
    ("RETURNING s.id, s.xmax = 0 INTO taken, fresh;",
     "RETURNING s.id, s.xmax = 0, s.digest, s.digest_seq INTO taken, fresh, digest, folded;"),
    ("RETURNING s.id INTO taken;",
     "RETURNING s.id, s.digest, s.digest_seq INTO taken, digest, folded;"),
    ("todo_history(taken, want)", "todo_history(taken, folded, want)"),
    ("VALUES (message, taken, owner, 'user', content, clock_timestamp());",
     "VALUES (message, taken, owner, 'user', content, clock_timestamp())\n"
     "            RETURNING agent_messages.created_at INTO sent_at;"),
)  # fmt: skip

# 0013's todo_finish_turn, and what it changes of it.
_FINISH_EDITS = (
    ("stub boolean, prompt integer, completion integer, total integer, cached integer\n)",
     "stub boolean, prompt integer, completion integer, total integer, cached integer,\n"
     "    new_digest text, new_folded bigint, fold_from bigint\n)"),
    ("        lease_owner = NULL,\n",
     "        lease_owner = NULL,\n"
     "        digest = CASE WHEN new_folded IS NOT NULL AND s.digest_seq = fold_from\n"
     "                      THEN new_digest ELSE s.digest END,\n"
     "        digest_seq = CASE WHEN new_folded IS NOT NULL AND s.digest_seq = fold_from\n"
     "                          THEN new_folded ELSE s.digest_seq END,\n"),
)  # fmt: skip


def _edited(source: str, edits: tuple[tuple[str, str], ...]) -> str:
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source.replace("CREATE OR REPLACE FUNCTION", "CREATE FUNCTION")


def _old_open_turn() -> str:
    return str(_memories._open_turn(memories=True))


def upgrade() -> None:
    op.add_column("agent_sessions", sa.Column("digest", sa.Text(), nullable=True))
    op.add_column(
        "agent_sessions",
        sa.Column("digest_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )
    op.execute(f"DROP FUNCTION todo_open_turn({_OPEN_ARGS})")
    op.execute(f"DROP FUNCTION {_OLD_HISTORY}")
    op.execute(f"DROP FUNCTION {_handover._FINISH_SIGNATURE}")
    op.execute(_HISTORY)
    op.execute(_edited(_old_open_turn(), _OPEN_EDITS))
    op.execute(_edited(_handover._FINISH_TURN, _FINISH_EDITS))
    _settings(_HISTORY_SIGNATURE, _FINISH_SIGNATURE)


def downgrade() -> None:
    op.execute(f"DROP FUNCTION todo_open_turn({_OPEN_ARGS})")
    op.execute(f"DROP FUNCTION {_HISTORY_SIGNATURE}")
    op.execute(f"DROP FUNCTION {_FINISH_SIGNATURE}")
    op.execute(_rls._HISTORY)
    op.execute(_old_open_turn().replace("CREATE OR REPLACE FUNCTION", "CREATE FUNCTION"))
    op.execute(_handover._FINISH_TURN)
    _settings(_OLD_HISTORY, _handover._FINISH_SIGNATURE)
    op.drop_column("agent_sessions", "digest_seq")
    op.drop_column("agent_sessions", "digest")


def _settings(history: str, finish: str) -> None:
    """What 0010 and 0014 set on the functions this migration makes again."""
    op.execute(f"ALTER FUNCTION {history} SET enable_bitmapscan = off")
    for function in (f"todo_open_turn({_OPEN_ARGS})", finish):
        op.execute(f"ALTER FUNCTION {function} SET role = todo_agent_app")
