"""MCP questions answered once: the nonce of each sealed requestState that came back

Revision ID: 0008
Revises: 0007

Row-level security as for every table of people's rows (0007): the service sees the acting
user's, the worker prunes expired ones.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mcp_request_states",
        sa.Column("nonce", sa.String(length=64), primary_key=True),
        sa.Column(
            "user_id",
            sa.String(length=255),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "answered_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_mcp_request_states_expires_at", "mcp_request_states", ["expires_at"])
    op.create_index("ix_mcp_request_states_user", "mcp_request_states", ["user_id"])
    op.execute("ALTER TABLE mcp_request_states ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE mcp_request_states FORCE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY mcp_request_states_all ON mcp_request_states FOR ALL TO todo_agent_app"
        " USING (user_id = (SELECT todo_acting_user()))"
        " WITH CHECK (user_id = (SELECT todo_acting_user()))"
    )
    op.execute(
        "CREATE POLICY mcp_request_states_definer ON mcp_request_states TO todo_agent_definer"
        " USING (true) WITH CHECK (true)"
    )
    op.execute("GRANT SELECT, DELETE ON mcp_request_states TO todo_agent_worker")
    op.execute(
        "CREATE POLICY mcp_request_states_worker ON mcp_request_states TO todo_agent_worker"
        " USING (true)"
    )


def downgrade() -> None:
    op.drop_table("mcp_request_states")
