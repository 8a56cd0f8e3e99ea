"""The conversation store an agent's config asks for."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path

from pallas_api.config import AgentConfig
from pallas_io.paths import state_dir
from pallas_runtime.conversations.memory import MemoryStore
from pallas_runtime.conversations.model import ConversationStore


def default_sqlite_path(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_STATE_HOME/pallas/conversations.db` (`~/.local/state/pallas/` by default)."""
    return state_dir(environ) / "conversations.db"


def build_store(config: AgentConfig, environ: Mapping[str, str] | None = None) -> ConversationStore:
    """The store of `config.conversations`; nothing connects until `start()`.

    Raises:
        ValueError: a postgres store whose DSN is not a postgresql:// URL, or a SQLite directory
            that cannot be created; the message names the setting. An unset DSN is not an
            error here: the store reports it as unavailable until the value appears.
    """
    settings, history = config.conversations, config.history
    env = os.environ if environ is None else environ
    if settings.type == "memory":
        return MemoryStore(
            max_conversations=history.max_conversations,
            max_messages=history.max_messages,
            max_bytes=history.max_bytes,
            ttl_seconds=settings.ttl_seconds,
            turn_wait=settings.turn_wait_seconds,
        )
    # SQLAlchemy and Alembic cost ~0.3 s to import: only agents that keep conversations in a
    # database pay it.
    from sqlalchemy.engine import make_url

    from pallas_runtime.conversations.sql import SqlStore, engine_url

    if settings.type == "sqlite":
        path = Path(settings.sqlite_path) if settings.sqlite_path else default_sqlite_path(env)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(
                f"conversations: cannot create {path.parent} for the SQLite store: {exc.strerror}"
            ) from None
        url: str | None = engine_url("sqlite", str(path))
        secret, current_dsn, missing = None, None, None
    else:
        dsn = env.get(settings.dsn_env or "")
        # A pod's Secret file, read again for each new connection: a rotated password reaches
        # the connections made after the kubelet wrote it. A DSN not there yet (its Secret is
        # missing) does not stop the agent: it serves, `get_health` names what is missing, turns
        # that need the store answer STORE_UNAVAILABLE, and the first connection after the file
        # appears uses it (a pod that crash-looped instead would say less, and later).
        current_dsn = functools.partial(env.get, settings.dsn_env or "")
        missing = f"no postgres DSN: {settings.dsn_origin()} is not set (spec.conversations.postgres.dsn)"
        url = engine_url("postgres", dsn) if dsn else None
        secret = make_url(dsn).password if dsn else None

    return SqlStore(
        settings.type,
        url,
        max_messages=history.max_messages,
        cache_bytes=history.max_bytes,
        ttl_seconds=settings.ttl_seconds,
        turn_wait=settings.turn_wait_seconds,
        secret=secret,
        identity=config.identity,
        legacy_name=config.name,
        abandoned_after=settings.abandoned_after_seconds,
        max_connections=settings.max_connections,
        dsn=current_dsn,
        missing_dsn=missing,
    )
