"""PallasDeployment / PallasAgent objects (plain dicts, as the API returns them) → AgentState. Pure.

Parsing is lenient field by field rather than through the strict spec models: the registry must
keep serving the agents it understands even if one object carries a field it does not know or a
value it cannot use. A missing or unusable `status` is the one thing that leaves an agent out
(`MissingStatus`); everything else falls back to a default (an invalid icon is dropped, an
unknown deployment means default version and capabilities).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from pallas_api import names
from pallas_api.fields import ModelCapabilities
from pallas_api.health import HEALTH_STATUSES
from pallas_api.spec import (
    UNDECLARED_MODEL,
    AccessSpec,
    AuthSpec,
    CallerAuth,
    Icon,
    ProviderSpec,
    RegistrySpec,
)
from pallas_api.spending import SpendReport
from pallas_api.status import PHASES
from pallas_api.workflow import WORKFLOW_TYPES
from pallas_registry.state import AgentState, HealthView, ProviderView

_TAG = re.compile(names.DNS_LABEL)
UNREADABLE_ACCESS = "pallas.dev/unreadable-access"
"""The one subject of access lists the registry cannot read: no caller has that name."""


class MissingStatus(ValueError):
    """The agent has no status the registry can publish yet (or an invalid one)."""


@dataclass(frozen=True, slots=True)
class DeploymentSettings:
    """What the catalogue takes from a PallasDeployment."""

    name: str
    version: str = "1.0.0"
    name_prefix: str | None = None
    public_url_template: str = ""
    registry_url: str = ""
    """The registry's public URL: `registry.publicURL`, else its cluster URL."""
    model_default: str = ""
    capabilities: ModelCapabilities = field(default_factory=ModelCapabilities)
    """The default model's."""
    model_capabilities: Mapping[str, ModelCapabilities] = field(default_factory=dict)
    """Other models', by `<provider>.<model>` (`spec.model.models`)."""
    providers: Mapping[str, ProviderView] = field(default_factory=dict)
    provider_specs: Mapping[str, ProviderSpec] = field(default_factory=dict)
    """The providers this version can read whole (what the registry checks)."""
    auth: CallerAuth = field(default_factory=CallerAuth)
    auth_spec: AuthSpec = field(default_factory=AuthSpec)
    """`spec.auth` whole, for the fleet endpoint's checks of its callers."""


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _capabilities(raw: Any) -> ModelCapabilities:
    try:
        return ModelCapabilities.model_validate(_map(raw))
    except ValidationError:
        return ModelCapabilities()


def _provider_spec(raw: Any) -> ProviderSpec | None:
    try:
        return ProviderSpec.model_validate(raw)
    except ValidationError:  # a spec the CRD let through but this version cannot read
        return None


def _provider(name: str, spec: ProviderSpec | None, raw: Any) -> ProviderView:
    """The view of one provider; only its type when the rest does not validate."""
    if spec is not None:
        return ProviderView.of(name, spec)
    kind = _text(_map(raw).get("type"))
    return ProviderView(type=kind, json_mode=kind == "openai") if kind else ProviderView()


def deployment_settings(obj: Mapping[str, Any]) -> DeploymentSettings:
    """The catalogue-relevant settings of a PallasDeployment object."""
    spec = _map(obj.get("spec"))
    registry = _map(spec.get("registry"))
    model = _map(spec.get("model"))
    capabilities = _capabilities(model.get("capabilities"))
    others = {ref: _capabilities(raw) for ref, raw in _map(model.get("models")).items()}
    raw_providers = _map(spec.get("providers"))
    specs = {name: _provider_spec(raw) for name, raw in raw_providers.items()}
    providers = {name: _provider(name, specs[name], raw) for name, raw in raw_providers.items()}
    try:
        auth_spec = AuthSpec.model_validate(_map(spec.get("auth")))
    except ValidationError:  # a spec the CRD let through but this version cannot read
        auth_spec = AuthSpec()
    auth = CallerAuth.of(auth_spec)
    meta = _map(obj.get("metadata"))
    name = _text(meta.get("name"))
    port = registry.get("port", RegistrySpec().port)
    registry_url = _text(registry.get("publicURL"))
    if not registry_url and name and isinstance(port, int):
        registry_url = names.registry_base_url(name, _text(meta.get("namespace"), "default"), port)
    return DeploymentSettings(
        name=name,
        version=_text(spec.get("version")) or "1.0.0",
        name_prefix=_text(registry.get("namePrefix")) or None,
        public_url_template=_text(registry.get("publicURLTemplate")),
        registry_url=registry_url,
        model_default=_text(model.get("default")),
        capabilities=capabilities,
        model_capabilities=others,
        providers={name: view for name, view in providers.items() if view.type},
        provider_specs={name: s for name, s in specs.items() if s is not None},
        auth=auth,
        auth_spec=auth_spec,
    )


def _access(raw: Any) -> AccessSpec:
    """`spec.access`; one this version cannot read admits nobody (the fleet fails closed)."""
    try:
        return AccessSpec.model_validate(_map(raw))
    except ValidationError:
        return AccessSpec(subjects=[UNREADABLE_ACCESS])


def _icons(raw: Any) -> tuple[Icon, ...]:
    icons = []
    for item in _list(raw):
        try:
            icons.append(Icon.model_validate(item))
        except ValidationError:
            continue
    return tuple(icons)


def _ready_condition(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in _list(status.get("conditions")):
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition
    return None


def _health(raw: Any) -> HealthView | None:
    health = _map(raw)
    status = health.get("status")
    for known in HEALTH_STATUSES:
        if status == known:
            busy = health.get("busy") is True
            spend = _spend(health.get("spend"))
            return HealthView(
                known, _text(health.get("message")), _time(health.get("checkedAt")), busy, spend
            )
    return None


def _spend(raw: Any) -> SpendReport | None:
    """The agent budget's spend of a status, checked (None: none, or not one)."""
    if raw is None:
        return None
    try:
        return SpendReport.model_validate(raw)
    except ValidationError:
        return None


def _latest(*moments: datetime | None) -> datetime | None:
    present = [moment for moment in moments if moment is not None]
    return max(present) if present else None


def agent_state(obj: Mapping[str, Any], deployment: DeploymentSettings | None) -> AgentState:
    """The AgentState of a PallasAgent object.

    Args:
        obj: The object as a dict (camelCase keys, RFC 3339 timestamps).
        deployment: Its deployment's settings, or None when that cannot be read.

    Raises:
        MissingStatus: no status yet, or a phase that is not one of the API's phases.
    """
    meta = _map(obj.get("metadata"))
    spec = _map(obj.get("spec"))
    status = obj.get("status")
    if not isinstance(status, Mapping) or not status:
        raise MissingStatus("no status yet")
    phase = status.get("phase")
    if phase not in PHASES:
        raise MissingStatus(f"status.phase {phase!r} is not one of {', '.join(PHASES)}")
    settings = deployment or DeploymentSettings(name=_text(spec.get("deployment")))
    model_ref = _text(spec.get("model")) or settings.model_default
    own = model_ref.partition(".")[0]
    declared = {settings.model_default: settings.capabilities, **settings.model_capabilities}
    choices = tuple((ref, caps) for ref, caps in declared.items() if ref and ref != model_ref)
    serving = {ref.partition(".")[0] for ref, _ in choices} - {own}
    ready_condition = _ready_condition(status)
    ready = ready_condition.get("status") == "True" if ready_condition else phase == "Ready"
    health = _health(status.get("health"))
    changes = [_time(_map(f).get("time")) for f in _list(meta.get("managedFields"))]
    transitions = [_time(_map(c).get("lastTransitionTime")) for c in _list(status.get("conditions"))]
    created = _time(meta.get("creationTimestamp"))
    port = _map(spec.get("service")).get("port")
    return AgentState(
        name=_text(meta.get("name")),
        namespace=_text(meta.get("namespace"), "default"),
        deployment=settings.name,
        title=_text(spec.get("title")),
        description=_text(spec.get("description")),
        icons=_icons(spec.get("icons")),
        tags=tuple(t for t in _list(spec.get("capabilities")) if isinstance(t, str) and _TAG.match(t)),
        model_ref=model_ref,
        model_capabilities=(
            settings.capabilities
            if model_ref == settings.model_default
            else settings.model_capabilities.get(model_ref, UNDECLARED_MODEL)
        ),
        provider=settings.providers.get(own, ProviderView()),
        choices=choices,
        other_providers={name: view for name, view in settings.providers.items() if name in serving},
        version=settings.version,
        name_prefix=settings.name_prefix,
        public_url_template=settings.public_url_template,
        registry_url=settings.registry_url,
        auth=settings.auth,
        auth_spec=settings.auth_spec,
        access=_access(spec.get("access")),
        service_port=port if isinstance(port, int) and 0 < port < 65536 else 8000,
        phase=phase,
        ready=ready,
        status_message=_text(_map(ready_condition).get("message")),
        health=health,
        tools=tuple(t for t in _list(status.get("tools")) if isinstance(t, str)),
        a2a=_map(spec.get("a2a")).get("enabled") is not False,
        workflow=next((t for t in WORKFLOW_TYPES if t in _map(spec.get("workflow"))), None),
        url=_text(status.get("url")) or None,
        model=_text(status.get("model")) or None,
        published_at=created,
        updated_at=_latest(created, *changes, *transitions, health.checked_at if health else None),
        ready_changed_at=_time(_map(ready_condition).get("lastTransitionTime")),
        deleting=meta.get("deletionTimestamp") is not None,
    )
