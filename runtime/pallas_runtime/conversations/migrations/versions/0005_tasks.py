"""MCP tasks kept beside the conversations (`conversations.tasks`).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

IDENTITY = 300


def upgrade() -> None:
    """Create `pallas_tasks`."""
    op.create_table(
        "pallas_tasks",
        sa.Column("agent", sa.String(IDENTITY), nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(512), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("status_message", sa.Text, nullable=True),
        sa.Column("result", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("input_requests", sa.Text, nullable=True),
        sa.Column("input_responses", sa.Text, nullable=True),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("agent", "id", name="pk_pallas_tasks"),
    )
    op.create_index("ix_pallas_tasks_expires", "pallas_tasks", ["expires_at"])


def downgrade() -> None:
    """Drop `pallas_tasks`."""
    op.drop_index("ix_pallas_tasks_expires", "pallas_tasks")
    op.drop_table("pallas_tasks")
