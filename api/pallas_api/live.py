"""What of an agent's config a running process takes in place, what needs a new one, and the hashes.

An agent process applies most of its config live (docs/runtime.md "Live changes"): the
instruction, the model and its provider, request and call parameters, tools, servers and peer
agents, limits, health settings, `busyAt`, title and description, and the access lists of
`auth`. New turns run on the new config; a turn in flight finishes on the one it started with.

The rest is fixed for the life of the process, because something built once at start-up holds
it: `name` (the agent's identity, its metric labels), `version` (the `serverInfo` clients recorded
at `initialize`; fastmcp offers no public way to change it on a running server), `conversations`
and `history` (the conversation store and its pool), `sessions` (the MCP session table), `http`
(the listener's limits) and `auth` apart from its access lists (the verifier and the
protected-resource metadata are part of the HTTP app). These are `process_settings`.

The operator hashes exactly these into the pod template (`process_digest`), so editing them
rolls the pods while a live edit only rewrites the ConfigMap; `pallas run --reload` restarts an
agent only when they change. `config_digest` names one version of the whole config: the sha256
of the rendered text, the same in the operator (what it wrote into the ConfigMap), in the agent
(what it read and serves, reported by `get_health` as `configHash`) and in `PallasAgent` status.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from pallas_api.config import AgentConfig, render_config

PROCESS_FIELDS: Final = ("name", "version", "conversations", "history", "sessions", "http", "auth")
"""The config fields a running agent process cannot change (`auth` except `access`)."""
LIVE_AUTH_FIELDS: Final = frozenset({"access"})
"""The part of `auth` applied in place: who may call, not how callers are checked."""


def process_settings(config: AgentConfig) -> dict[str, Any]:
    """The part of `config` only a new process can take, as plain JSON data."""
    data = config.model_dump(mode="json", by_alias=True, include=set(PROCESS_FIELDS))
    data["auth"] = {k: v for k, v in data["auth"].items() if k not in LIVE_AUTH_FIELDS}
    return data


def needs_new_process(old: AgentConfig, new: AgentConfig) -> bool:
    """Whether moving from `old` to `new` needs the agent to restart."""
    return process_settings(old) != process_settings(new)


def process_digest(config: AgentConfig) -> str:
    """sha256 of `process_settings(config)`: the pod-template hash of the agent's config part."""
    text = json.dumps(process_settings(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def config_digest(text: str | bytes) -> str:
    """sha256 of a rendered config's text (`render_config`): one version of an agent's config."""
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def config_hash(config: AgentConfig) -> str:
    """`config_digest` of `config` as the operator renders it."""
    return config_digest(render_config(config))
