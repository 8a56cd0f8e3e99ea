"""An agent's A2A Agent Card, built from its config (pure: no I/O)."""

from __future__ import annotations

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    OpenIdConnectSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol

from pallas_api.config import AgentConfig

SCHEME = "bearer"
"""The card's name for the agent's one security scheme."""


def skill_description(config: AgentConfig) -> str:
    """What the agent's one skill does: its description, else a sentence naming the agent.

    Never anything of the instruction: it is the operator's (the model's system prompt), and the
    card is served to anyone.
    """
    return config.description or f"Talk to {config.display_title}."


def _security(config: AgentConfig) -> tuple[dict[str, SecurityScheme], list[SecurityRequirement]]:
    auth = config.auth
    if auth.mode == "none":
        return {}, []
    if auth.mode == "oidc" and auth.oidc is not None:
        discovery = auth.oidc.issuer.rstrip("/") + "/.well-known/openid-configuration"
        scheme = SecurityScheme(
            open_id_connect_security_scheme=OpenIdConnectSecurityScheme(
                open_id_connect_url=discovery, description="A JWT of the deployment's OIDC issuer"
            )
        )
    else:
        scheme = SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(
                scheme="Bearer",
                bearer_format="Kubernetes service account token",
                description="A Kubernetes token of a subject allowed to invoke this agent (RBAC verb invoke)",
            )
        )
    return {SCHEME: scheme}, [SecurityRequirement(schemes={SCHEME: StringList()})]


def agent_card(config: AgentConfig, url: str) -> AgentCard:
    """The card of the agent whose A2A endpoint callers reach at `url`.

    One skill, the agent itself: a Pallas agent does one thing, talk, with whatever tools and
    peers it has; its discovery tags (`spec.capabilities`) are the skill's tags. Streaming is
    on; push notifications are not offered.
    """
    schemes, requirements = _security(config)
    skill = AgentSkill(
        id=config.name,
        name=config.display_title,
        description=skill_description(config),
        tags=list(config.a2a.tags) or [config.name],
    )
    return AgentCard(
        name=config.name,
        description=config.description or skill.description,
        version=config.version,
        # Both versions at the one endpoint (the request says which it speaks, `A2A-Version`):
        # a 1.0 client picks the 1.0 interface; the 0.3 one is what gives the served card the
        # 0.3 fields (`url`, `preferredTransport`, `protocolVersion`) a 0.3 client needs.
        supported_interfaces=[
            AgentInterface(
                url=url, protocol_binding=TransportProtocol.JSONRPC.value, protocol_version=version
            )
            for version in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes=schemes,
        security_requirements=requirements,
        default_input_modes=["text/plain", *config.limits.image_types],
        default_output_modes=["text/plain"],
        skills=[skill],
    )
