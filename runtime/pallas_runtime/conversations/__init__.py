"""Conversations that belong to their caller, behind one store interface (docs/api.md §3).

- `model`: keys, thread summaries, errors and the `ConversationStore` / `Turn` protocols;
- `memory`: the in-process store (a pod's default), LRU-bounded;
- `sql`: SQLite (`pallas run`'s default) and PostgreSQL (shared by replicas) through SQLAlchemy,
  with Alembic migrations in `migrations/`;
- `codec`: messages to and from JSON; `history`: where a conversation may be cut;
- `caller`: who is calling (the authenticated subject, else the anonymous caller) and the
  conversation ids an agent passes on to its peers;
- `database`, `driver_sql`, `tables`: where the SQL work runs (a SQLite thread, asyncpg), a
  turn's statements on the driver, and the tables the migrations create;
- `locks`: one turn of a conversation at a time inside a process;
- `weight`: what a kept message weighs, and the byte bound (`history.maxBytes`) of what a process keeps;
- `scope`: which conversation a request continues (caller, session or request scope);
- `tenancy`: whose rows are whose in a database shared by agents, deployments and namespaces;
- `factory`: the store an agent's config asks for;
- `tasks`, `sql_tasks`: MCP tasks kept beside the conversations (memory, or the database's table).

A turn holds its conversation exclusively from reading the history to storing the new
messages, so turns of one conversation never interleave, in one process or across replicas; a
turn that fails or is cancelled stores nothing.
"""
