"""Agent identities: a wider `agent` key and the table of when each agent last ran.

Revision ID: 0002
Revises: 0001

Rows written before this revision are keyed by the bare agent name; the first agent of that name
to start adopts them under its identity (`tenancy.claim`), as the two stores shared them before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

IDENTITY = 300


def upgrade() -> None:
    """Widen both tables' `agent` to hold an identity; create `pallas_agents`."""
    # SQLite keeps any length in a VARCHAR column, and cannot alter a column's type in place.
    if op.get_bind().dialect.name != "sqlite":
        for table in ("pallas_conversations", "pallas_messages"):
            op.alter_column(table, "agent", type_=sa.String(IDENTITY), existing_nullable=False)
    op.create_table(
        "pallas_agents",
        sa.Column("identity", sa.String(IDENTITY), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("identity", name="pk_pallas_agents"),
    )


def downgrade() -> None:
    """Drop `pallas_agents` (the wider columns stay: identities may be stored in them)."""
    op.drop_table("pallas_agents")
