"""Alembic's environment: migrate over the connection the store hands in (never from a file)."""

from __future__ import annotations

from alembic import context

from pallas_runtime.conversations.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, version_table="pallas_alembic_version")
with context.begin_transaction():
    context.run_migrations()
