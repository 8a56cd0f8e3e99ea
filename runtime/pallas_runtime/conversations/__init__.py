"""Conversations that belong to their caller, behind one store interface (docs/api.md §3).

- `model`: keys, thread summaries, errors and the `ConversationStore` / `Turn` protocols;
- `memory`: the in-process store (a pod's default), LRU-bounded;
- `sql`: SQLite (`pallas run`'s default) and PostgreSQL (shared by replicas) through SQLAlchemy,
  with Alembic migrations in `migrations/`;
- `codec`: messages to and from JSON; `history`: where a conversation may be cut;
- `caller`: who is calling (the authenticated subject, else the anonymous caller) and the
  conversation ids an agent passes on to its peers;
- `factory`: the store an agent's config asks for.

A turn holds its conversation exclusively from reading the history to storing the new
messages, so turns of one conversation never interleave, in one process or across replicas; a
turn that fails or is cancelled stores nothing.
"""
