"""The tables of the SQL stores (the migrations in `migrations/` create exactly these).

`agent` is the agent's identity (`<namespace>/<deployment>/<name>[/<uid>]`, `pallas_api.names.
agent_identity`): agents of different deployments and namespaces sharing one database never
meet, and a re-created agent (a new UID) starts empty.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)

from pallas_api.config import MAX_AGENT_IDENTITY

metadata = MetaData()

conversations = Table(
    "pallas_conversations",
    metadata,
    Column("agent", String(MAX_AGENT_IDENTITY), nullable=False),
    Column("owner", String(512), nullable=False),
    Column("id", String(256), nullable=False),
    Column("title", String(200), nullable=False, default=""),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("message_count", Integer, nullable=False, default=0),
    Column("next_seq", Integer, nullable=False, default=0),
    # Changes with every stored turn: a process whose cached transcript has it need not re-read.
    Column("version", String(32), nullable=False, default=""),
    # Who holds the conversation for a turn, until when: turns never interleave across replicas.
    Column("holder", String(100), nullable=True),
    Column("held_until", DateTime(timezone=True), nullable=True),
    # The settings `create_conversation` chose (JSON: provider, model); NULL when a turn started
    # it. A created conversation exists before its first message.
    Column("meta", Text, nullable=True),
    PrimaryKeyConstraint("agent", "owner", "id", name="pk_pallas_conversations"),
    Index("ix_pallas_conversations_updated", "agent", "owner", "updated_at"),
)

messages = Table(
    "pallas_messages",
    metadata,
    Column("agent", String(MAX_AGENT_IDENTITY), nullable=False),
    Column("owner", String(512), nullable=False),
    Column("conversation_id", String(256), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("role", String(16), nullable=False),
    Column("payload", Text, nullable=False),
    PrimaryKeyConstraint("agent", "owner", "conversation_id", "seq", name="pk_pallas_messages"),
    ForeignKeyConstraint(
        ["agent", "owner", "conversation_id"],
        ["pallas_conversations.agent", "pallas_conversations.owner", "pallas_conversations.id"],
        name="fk_pallas_messages_conversation",
        ondelete="CASCADE",
    ),
)

agents = Table(
    "pallas_agents",
    metadata,
    # When each agent identity last ran: an agent gone for longer than the deployment's
    # `conversations.abandonedAfterSeconds` was deleted (or parked), and its conversations go.
    Column("identity", String(MAX_AGENT_IDENTITY), nullable=False),
    Column("last_seen", DateTime(timezone=True), nullable=False),
    # A deleted agent's retention (`retainAfterDeleteSeconds`): its conversations go after this.
    Column("expires_at", DateTime(timezone=True), nullable=True),
    PrimaryKeyConstraint("identity", name="pk_pallas_agents"),
)

spend = Table(
    "pallas_spend",
    metadata,
    # What an agent's LLM calls spent per budget window: `subject` is `*` (the agent as a whole)
    # or a caller's owner key; charges are atomic increments, so replicas never lose spend.
    Column("agent", String(MAX_AGENT_IDENTITY), nullable=False),
    Column("subject", String(512), nullable=False),
    Column("window", String(8), nullable=False),
    Column("window_start", DateTime(timezone=True), nullable=False),
    Column("tokens", BigInteger, nullable=False, default=0),
    Column("cost_micros", BigInteger, nullable=False, default=0),
    PrimaryKeyConstraint("agent", "subject", "window", "window_start", name="pk_pallas_spend"),
)

tasks = Table(
    "pallas_tasks",
    metadata,
    # MCP tasks (`conversations.tasks`): one turn that outlives its request, polled by any replica.
    Column("agent", String(MAX_AGENT_IDENTITY), nullable=False),
    Column("id", String(64), nullable=False),
    Column("owner", String(512), nullable=False),
    Column("status", String(16), nullable=False),
    Column("status_message", Text, nullable=True),
    Column("result", Text, nullable=True),
    Column("error", Text, nullable=True),
    Column("input_requests", Text, nullable=True),
    Column("input_responses", Text, nullable=True),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=True),
    PrimaryKeyConstraint("agent", "id", name="pk_pallas_tasks"),
    Index("ix_pallas_tasks_expires", "expires_at"),
)
