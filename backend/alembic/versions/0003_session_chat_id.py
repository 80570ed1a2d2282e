"""sessions bound to a client's chat id (the AI SDK's useChat)

Revision ID: 0003
Revises: 0002
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("agent_sessions", sa.Column("chat_id", sa.String(length=255), nullable=True))
    op.create_index(
        "ux_agent_sessions_user_chat",
        "agent_sessions",
        ["user_id", "chat_id"],
        unique=True,
        postgresql_where=sa.text("chat_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ux_agent_sessions_user_chat", table_name="agent_sessions")
    op.drop_column("agent_sessions", "chat_id")
