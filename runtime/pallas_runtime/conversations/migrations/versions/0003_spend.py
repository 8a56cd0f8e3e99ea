"""Spend per budget window, kept beside the conversations (`spec.budgets`).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

IDENTITY = 300


def upgrade() -> None:
    """Create `pallas_spend`."""
    op.create_table(
        "pallas_spend",
        sa.Column("agent", sa.String(IDENTITY), nullable=False),
        sa.Column("subject", sa.String(512), nullable=False),
        sa.Column("window", sa.String(8), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tokens", sa.BigInteger, nullable=False),
        sa.Column("cost_micros", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("agent", "subject", "window", "window_start", name="pk_pallas_spend"),
    )


def downgrade() -> None:
    """Drop `pallas_spend`."""
    op.drop_table("pallas_spend")
