"""Conversation settings chosen at create, and when a deleted agent's conversations go.

Revision ID: 0004
Revises: 0003

- `pallas_conversations.meta`: the JSON settings `create_conversation` stored (its provider and
  model); NULL for a conversation that a turn started.
- `pallas_agents.expires_at`: set by `pallas conversations purge --after` when the agent was
  deleted with a retention; every agent's housekeeping deletes the identity's rows after it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the two nullable columns (no rewrite of existing rows)."""
    op.add_column("pallas_conversations", sa.Column("meta", sa.Text, nullable=True))
    op.add_column("pallas_agents", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Drop them."""
    with op.batch_alter_table("pallas_agents") as batch:
        batch.drop_column("expires_at")
    with op.batch_alter_table("pallas_conversations") as batch:
        batch.drop_column("meta")
