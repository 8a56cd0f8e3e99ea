"""Conversations and their messages.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the two tables."""
    op.create_table(
        "pallas_conversations",
        sa.Column("agent", sa.String(63), nullable=False),
        sa.Column("owner", sa.String(512), nullable=False),
        sa.Column("id", sa.String(256), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("message_count", sa.Integer, nullable=False),
        sa.Column("next_seq", sa.Integer, nullable=False),
        sa.Column("version", sa.String(32), nullable=False),
        sa.Column("holder", sa.String(100), nullable=True),
        sa.Column("held_until", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("agent", "owner", "id", name="pk_pallas_conversations"),
    )
    op.create_index(
        "ix_pallas_conversations_updated", "pallas_conversations", ["agent", "owner", "updated_at"]
    )
    op.create_table(
        "pallas_messages",
        sa.Column("agent", sa.String(63), nullable=False),
        sa.Column("owner", sa.String(512), nullable=False),
        sa.Column("conversation_id", sa.String(256), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("agent", "owner", "conversation_id", "seq", name="pk_pallas_messages"),
        sa.ForeignKeyConstraint(
            ["agent", "owner", "conversation_id"],
            ["pallas_conversations.agent", "pallas_conversations.owner", "pallas_conversations.id"],
            name="fk_pallas_messages_conversation",
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    """Drop them."""
    op.drop_table("pallas_messages")
    op.drop_index("ix_pallas_conversations_updated", "pallas_conversations")
    op.drop_table("pallas_conversations")
