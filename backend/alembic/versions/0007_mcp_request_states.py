"""MCP questions answered once: the nonce of each sealed requestState that came back

Revision ID: 0007
Revises: 0006
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
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


def downgrade() -> None:
    op.drop_table("mcp_request_states")
