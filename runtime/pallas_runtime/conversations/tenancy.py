"""Whose rows are whose in a database shared by agents, deployments and namespaces.

Every row is keyed by the agent's identity (`<namespace>/<deployment>/<name>[/<uid>]`). Three
pieces of housekeeping keep the rows of agents that no longer exist from lingering:

- `claim`, when an agent starts: it records that it runs (`pallas_agents.last_seen`), adopts rows
  an older Pallas keyed by its bare name, and deletes the conversations of its predecessors (the
  same namespace, deployment and name under another UID: a deleted agent, re-created).
- `heartbeat`, every few minutes while it runs.
- `purge_abandoned`, run by every agent on the database: the conversations of identities that
  have not run for the deployment's `abandonedAfterSeconds` (deleted agents, or agents scaled to
  zero that long) are deleted, with their `pallas_agents` row; so are those of identities whose
  retention after deletion (`expires_at`) has run out.
- `purge`, when an agent is deleted (`pallas conversations purge`, the operator's finalizer): its
  conversations go at once, or it is marked to go after its retention.

Each is one synchronous function over a connection, run in one transaction by the store.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, delete, exists, insert, literal, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from pallas_runtime.conversations.tables import agents, spend, tasks
from pallas_runtime.conversations.tables import conversations as conv
from pallas_runtime.conversations.tables import messages as msg

_COPIED = ("owner", "id", "title", "created_at", "updated_at", "message_count", "next_seq", "version")


def _insert(connection: Connection) -> Callable[..., Any]:
    """The dialect's INSERT, which knows ON CONFLICT."""
    return sqlite_insert if connection.dialect.name == "sqlite" else pg_insert


def heartbeat(connection: Connection, identity: str, now: datetime) -> None:
    """Record that `identity` runs now."""
    if connection.execute(update(agents).where(agents.c.identity == identity).values(last_seen=now)).rowcount:
        return
    connection.execute(insert(agents).values(identity=identity, last_seen=now))


Selects = Callable[[ColumnElement[str]], ColumnElement[bool]]
"""Which identities, as a condition on a table's `agent` column."""


def _forget_agents(connection: Connection, condition: Selects) -> int:
    """Delete the conversations (and messages) of the identities `condition` selects."""
    connection.execute(delete(msg).where(condition(msg.c.agent)))
    connection.execute(delete(spend).where(condition(spend.c.agent)))  # their budgets' spend too
    connection.execute(delete(tasks).where(condition(tasks.c.agent)))  # and their tasks
    return int(connection.execute(delete(conv).where(condition(conv.c.agent))).rowcount)


def predecessors_prefix(identity: str) -> str | None:
    """`<namespace>/<deployment>/<name>/` for an identity with a UID; None without one."""
    parts = identity.split("/")
    return "/".join(parts[:3]) + "/" if len(parts) == 4 else None


def claim(connection: Connection, identity: str, legacy_name: str | None, now: datetime) -> tuple[int, int]:
    """Start-up: heartbeat, adopt legacy rows, delete predecessors' conversations.

    Returns:
        (conversations adopted, conversations of predecessors deleted).
    """
    heartbeat(connection, identity, now)
    adopted = 0
    if legacy_name and legacy_name != identity:
        mine = conv.alias("mine")
        taken = exists().where(mine.c.agent == identity, mine.c.owner == conv.c.owner, mine.c.id == conv.c.id)
        legacy = select(literal(identity), *(conv.c[c] for c in _COPIED)).where(
            conv.c.agent == legacy_name, ~taken
        )
        # Two replicas may claim at once: the second one's copies of rows the first adopted are
        # skipped (ON CONFLICT DO NOTHING), and its moves and deletes then find nothing left.
        adopt = _insert(connection)(conv).from_select(["agent", *_COPIED], legacy).on_conflict_do_nothing()
        adopted = int(connection.execute(adopt).rowcount)
        if adopted:
            owned = exists().where(
                mine.c.agent == identity, mine.c.owner == msg.c.owner, mine.c.id == msg.c.conversation_id
            )
            connection.execute(update(msg).where(msg.c.agent == legacy_name, owned).values(agent=identity))
            _forget_agents(connection, lambda column: column == legacy_name)
    removed = 0
    prefix = predecessors_prefix(identity)
    if prefix is not None:
        removed = _forget_agents(
            connection, lambda column: and_(column.startswith(prefix, autoescape=True), column != identity)
        )
        connection.execute(
            delete(agents).where(
                agents.c.identity.startswith(prefix, autoescape=True), agents.c.identity != identity
            )
        )
    return adopted, removed


def purge(connection: Connection, identity: str, expires_at: datetime | None) -> int:
    """A deleted agent: forget its conversations now (`expires_at` None), or mark when they go.

    Returns:
        How many conversations were deleted (0 when only marked).
    """
    if expires_at is not None:
        if not connection.execute(
            update(agents).where(agents.c.identity == identity).values(expires_at=expires_at)
        ).rowcount:
            # It never ran on this database, or it was purged as abandoned already: the mark
            # still makes its rows go (a pod still draining may have written some since).
            connection.execute(
                insert(agents).values(identity=identity, last_seen=expires_at, expires_at=expires_at)
            )
        return 0
    removed = _forget_agents(connection, lambda column: column == identity)
    connection.execute(delete(agents).where(agents.c.identity == identity))
    return removed


def purge_abandoned(connection: Connection, cutoff: datetime | None, now: datetime | None = None) -> int:
    """Delete the conversations of identities last seen before `cutoff`, or expired by `now`; how many went.

    None for either checks nothing of that kind.
    """
    conditions = []
    if cutoff is not None:
        conditions.append(agents.c.last_seen < cutoff)
    if now is not None:
        conditions.append(and_(agents.c.expires_at.is_not(None), agents.c.expires_at <= now))
    if not conditions:
        return 0
    due = or_(*conditions)
    gone = [row.identity for row in connection.execute(select(agents.c.identity).where(due))]
    if not gone:
        return 0
    removed = _forget_agents(connection, lambda column: column.in_(gone))
    connection.execute(delete(agents).where(agents.c.identity.in_(gone)))
    return removed
