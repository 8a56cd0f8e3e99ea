"""AgentState → one catalogue entry (a registry `ServerResponse`). Pure; shared by every source.

The entry is `{"server": ServerDetail, "_meta": {...}}`:

- `server` follows the 2025-12-11 schema and carries `capabilities` {model, vision,
  context_window, max_output_tokens} where Daedalus reads it. `ServerDetail` does not close its
  properties (no `additionalProperties: false`), so the extra member is valid as it stands.
- `_meta["io.modelcontextprotocol.registry/official"]` holds only the fields the registry API
  defines (that object is closed): `status` is `active` when the agent is ready, `deleted` while
  it is being deleted (or after it is gone), otherwise `deprecated` with a `statusMessage` naming
  the phase, the closest the registry's three statuses come to "exists but do not use now".
- `_meta["dev.pallas/agent"]` (our API group `pallas.dev`, reversed) holds the live state:
  phase, health, tools, discovery tags, provider and model (the agent-info shape of capability
  discovery: `id`, `capabilities`, `status`, `providers`), and `auth`: what a client must
  present (`mode`; the oidc `issuer` and `audience`; the kubernetes token `audiences`), and
  `a2a`: the agent's A2A Agent Card and JSON-RPC endpoint beside the MCP URL (null when the
  agent serves no A2A).

Every entry is checked with `validate_response` before it is returned, so nothing the schema
refuses can reach a client.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urljoin, urlsplit

from pallas_api import names
from pallas_api.spec import Icon
from pallas_registry.naming import remote_url, server_name
from pallas_registry.schema import (
    OFFICIAL_META,
    SCHEMA_URL,
    SchemaError,
    is_uri,
    validate_response,
)
from pallas_registry.state import AgentState, HealthView, ProviderView

VENDOR_META = "dev.pallas/agent"
MAX_TEXT = 100
MAX_STATUS_MESSAGE = 500
MAX_ICON_SRC = 255
ICON_TYPES = ("image/png", "image/jpeg", "image/jpg", "image/svg+xml", "image/webp")
_SPACE = re.compile(r"\s+")


class InvalidAgent(ValueError):
    """An agent no valid entry can be built for; it is left out of the catalogue."""


def rfc3339(moment: datetime) -> str:
    """`2026-11-21T10:00:00Z`: UTC, whole seconds (Kubernetes timestamps have no more)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def one_line(text: str, limit: int) -> str:
    """Whitespace collapsed to single spaces, cut to `limit` characters with an ellipsis."""
    flat = _SPACE.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def display_title(state: AgentState) -> str:
    """The spec title, else the name in title case (as the agent's own serverInfo does)."""
    return one_line(state.title, MAX_TEXT) or one_line(state.name.replace("-", " ").title(), MAX_TEXT)


def icon_url(src: str, registry_url: str) -> str:
    """`src` made absolute: a relative reference resolves against the registry's public URL.

    The schema wants an absolute URI; the original interface allows relative ones, which clients
    resolve against the registry they asked (docs/registry.md, "Relative icons").
    The registry URL is taken as a directory, so a path prefix it has
    (`https://agents.example.com/pallas`) is kept for `icons/a.svg`; `/icons/a.svg` is from the host.
    """
    if urlsplit(src).scheme or not registry_url:
        return src
    return urljoin(registry_url if registry_url.endswith("/") else registry_url + "/", src)


def _icon(icon: Icon, registry_url: str) -> dict[str, Any] | None:
    # The spec accepts more than the registry does (longer URLs, any image/* type); keep what
    # clients can use and drop only the parts the schema would refuse.
    src = icon_url(icon.src, registry_url)
    if len(src) > MAX_ICON_SRC or not is_uri(src):
        return None
    out: dict[str, Any] = {"src": src}
    if icon.mime_type in ICON_TYPES:
        out["mimeType"] = icon.mime_type
    if icon.sizes:
        out["sizes"] = list(icon.sizes)
    if icon.theme:
        out["theme"] = icon.theme
    return out


def _model_id(state: AgentState) -> tuple[str, str]:
    provider, _, configured = state.model_ref.partition(".")
    return provider, state.model or configured


def _capabilities(state: AgentState, model: str) -> dict[str, Any]:
    caps = state.model_capabilities
    return {
        "model": model,
        "vision": caps.vision,
        "context_window": caps.context_window,
        "max_output_tokens": caps.max_output_tokens,
    }


def _status(state: AgentState) -> tuple[str, str]:
    if state.deleting:
        return "deleted", "agent is being deleted"
    if state.ready:
        return "active", ""
    reason = f"agent is {state.phase}, not ready"
    if state.status_message:
        reason += f": {state.status_message}"
    return "deprecated", one_line(reason, MAX_STATUS_MESSAGE)


def _health(health: HealthView | None) -> dict[str, Any] | None:
    if health is None:
        return None
    out: dict[str, Any] = {"status": health.status, "message": health.message}
    if health.checked_at is not None:
        out["checkedAt"] = rfc3339(health.checked_at)
    if health.busy:
        out["busy"] = True
    if health.spend:
        out["spend"] = health.spend.model_dump(mode="json", by_alias=True, exclude_none=True)
    return out


def _agent_status(state: AgentState) -> str:
    """Seed 004's agent status: `ready`, `busy` (ready, at its `busyAt`) or `unavailable`."""
    if not state.ready or state.deleting:
        return "unavailable"
    return "busy" if state.health is not None and state.health.busy else "ready"


def _official(state: AgentState) -> dict[str, Any]:
    status, message = _status(state)
    official: dict[str, Any] = {"status": status}
    if message:
        official["statusMessage"] = message
    if state.ready_changed_at is not None:
        official["statusChangedAt"] = rfc3339(state.ready_changed_at)
    if state.published_at is not None:
        official["publishedAt"] = rfc3339(state.published_at)
    updated = state.updated_at or state.published_at
    if updated is not None:
        official["updatedAt"] = rfc3339(updated)
    official["isLatest"] = True
    return official


def _provider(name: str, view: ProviderView, models: list[str], vision: bool) -> dict[str, Any]:
    """One provider entry (docs/registry.md, "Provider entries"): id, kind, models, capabilities, names.

    `vision` is what its models say when the provider declares nothing.
    """
    entry: dict[str, Any] = {"id": name, "kind": "llm", "models": models}
    if view.type:
        entry["type"] = view.type
    entry["displayName"] = view.display_name or name
    if view.description:
        entry["description"] = view.description
    entry["capabilities"] = {
        "streaming": view.streaming,
        "tools": view.tools,
        "vision": vision if view.vision is None else view.vision,
        "jsonMode": view.json_mode,
    }
    return entry


def _providers(state: AgentState, provider: str, model: str) -> list[dict[str, Any]]:
    """The agent's provider with every model a call may pick on it, then each other provider's.

    A call may pick any model the deployment declares (`params.model`: an id of the agent's own
    provider, `<provider>.<model>` of another), so a client can see every choice before calling.
    """
    if not provider:
        return []
    own = [model] if model else []
    own += [ref.partition(".")[2] for ref, _ in state.choices if ref.partition(".")[0] == provider]
    entries = [_provider(provider, state.provider, list(dict.fromkeys(own)), state.model_capabilities.vision)]
    for name, view in state.other_providers.items():
        theirs = [
            (ref.partition(".")[2], caps) for ref, caps in state.choices if ref.partition(".")[0] == name
        ]
        vision = any(caps.vision for _, caps in theirs)
        entries.append(_provider(name, view, [m for m, _ in theirs], vision))
    return entries


def _a2a(state: AgentState, url: str) -> dict[str, str] | None:
    """Where A2A clients find the agent: its card and endpoint beside its MCP URL (`url`)."""
    if not state.a2a:
        return None
    return {"agentCard": names.agent_card_url(url), "url": names.a2a_url(url)}


def _vendor(state: AgentState, provider: str, model: str, url: str) -> dict[str, Any]:
    caps = state.model_capabilities
    providers = _providers(state, provider, model)
    return {
        "id": state.name,
        "namespace": state.namespace,
        "deployment": state.deployment,
        "status": _agent_status(state),
        "phase": state.phase,
        "health": _health(state.health),
        "tools": list(state.tools),
        "capabilities": list(state.tags),
        "provider": provider or None,
        "model": model or None,
        "modelCapabilities": {
            "vision": caps.vision,
            "contextWindow": caps.context_window,
            "maxOutputTokens": caps.max_output_tokens,
        },
        "providers": providers,
        "auth": _auth(state),
        "a2a": _a2a(state, url),
        "workflow": state.workflow,
    }


def _auth(state: AgentState) -> dict[str, Any]:
    """What a client must present (docs/api.md §6): mode and, per mode, where tokens come from."""
    auth = state.auth
    if auth.mode == "oidc":
        return {"mode": "oidc", "issuer": auth.issuer, "audience": auth.audience}
    if auth.mode == "kubernetes":
        return {
            "mode": "kubernetes",
            "audiences": list(auth.audiences),
            "verb": "invoke",
            "resource": "pallasagents.pallas.dev",
        }
    return {"mode": "none"}


def build_response(state: AgentState) -> dict[str, Any]:
    """The catalogue entry of one agent.

    Args:
        state: What is known about the agent.

    Returns:
        A `ServerResponse` dict that passes `validate_response`.

    Raises:
        InvalidAgent: no connectable URL, or a value the schema refuses.
    """
    url = remote_url(state)
    if url is None:
        raise InvalidAgent(f"agent {state.name!r}: no valid http(s) URL to publish")
    title = display_title(state)
    provider, model = _model_id(state)
    server: dict[str, Any] = {
        "$schema": SCHEMA_URL,
        "name": server_name(state),
        "title": title,
        "description": one_line(state.description, MAX_TEXT) or one_line(f"{title} (Pallas agent)", MAX_TEXT),
        "version": state.version,
    }
    icons = [icon for icon in (_icon(i, state.registry_url) for i in state.icons) if icon is not None]
    if icons:
        server["icons"] = icons
    server["remotes"] = [{"type": "streamable-http", "url": url}]
    if model:
        server["capabilities"] = _capabilities(state, model)
    response = {
        "server": server,
        "_meta": {OFFICIAL_META: _official(state), VENDOR_META: _vendor(state, provider, model, url)},
    }
    try:
        validate_response(response)
    except SchemaError as exc:
        raise InvalidAgent(f"agent {state.name!r}: {exc}") from None
    return response
