"""Alembic migrations of the SQL conversation stores (run at start-up by `migrate`)."""
