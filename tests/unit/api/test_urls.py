"""URLs with credentials (`https://user:password@host/…`) are refused by the models and the CRDs.

Before, they passed every check and failed at run time with "unexpected ValueError", the
password sitting in the spec, the agent's ConfigMap and status on the way.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from pallas_api import crds
from pallas_api.config import ConfigError, parse_config
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec
from pallas_api.urls import WITH_CREDENTIALS
from tests.support.operator import agent, at, deployment

PASSWORD = "s3cret-pw"
WITH_USER_INFO = [
    f"https://admin:{PASSWORD}@tools.example/mcp",
    "https://token@tools.example:8443/mcp",  # a user name alone is a credential too
]
ALSO_WITH_USER_INFO = [
    f"HTTP://admin:{PASSWORD}@tools.example/mcp",  # (the URL patterns refuse these already)
    f"//admin:{PASSWORD}@tools.example/a.svg",  # scheme-relative: an icon src may be relative
]
WITHOUT = [
    "https://tools.example/mcp",
    "https://tools.example/models/llama@v2",  # an @ in the path is no user-info
    "https://tools.example/mcp?by=me@example.org",
    "https://tools.example/mcp#x@y",
    "http://[::1]:8000/mcp",
]
DEPLOYMENT_FIELDS = [
    ("spec.mcpServers.argos.url", "put them in a header from a Secret"),
    ("spec.providers.vllm.baseURL", "put the key in apiKey"),
    ("spec.registry.publicURLTemplate", "published to every client"),
    ("spec.registry.publicURL", "published to every client"),
]
OIDC = {"mode": "oidc", "oidc": {"issuer": "https://id.example", "audience": "a"}}


def _deployment_spec(path: str, url: str) -> dict[str, Any]:
    return dict(deployment("d1", at(path, url))["spec"])


def _problems(model: Any, data: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        model.model_validate(data)
    except ValidationError as exc:
        return [(".".join(map(str, e["loc"])), e["msg"]) for e in exc.errors(include_input=False)]
    return []


@pytest.mark.parametrize("url", WITH_USER_INFO)
@pytest.mark.parametrize(("path", "instead"), DEPLOYMENT_FIELDS)
def test_deployment_urls_with_credentials_are_refused_saying_what_to_do(
    path: str, instead: str, url: str
) -> None:
    problems = _problems(PallasDeploymentSpec, _deployment_spec(path, url))
    field = path.removeprefix("spec.")
    assert [p for p, _ in problems] == [field]
    message = problems[0][1]
    assert message.startswith("must not carry credentials (user:password@host): ")
    assert instead in message
    assert PASSWORD not in message


@pytest.mark.parametrize("url", WITHOUT)
@pytest.mark.parametrize(("path", "instead"), DEPLOYMENT_FIELDS)
def test_urls_without_user_info_pass(path: str, instead: str, url: str) -> None:
    assert _problems(PallasDeploymentSpec, _deployment_spec(path, url)) == []


@pytest.mark.parametrize("field", ["issuer", "jwksURL"])
def test_oidc_urls_with_credentials_are_refused(field: str) -> None:
    auth = {**OIDC, "oidc": {**OIDC["oidc"], field: f"https://admin:{PASSWORD}@id.example/keys"}}  # type: ignore[dict-item]
    problems = _problems(PallasDeploymentSpec, _deployment_spec("spec.auth", auth))  # type: ignore[arg-type]
    assert [p for p, _ in problems] == [f"auth.oidc.{field}"]
    assert "signing keys are public" in problems[0][1]


def test_icon_urls_with_credentials_are_refused_and_data_uris_are_not_urls() -> None:
    icons = [
        {"src": f"https://admin:{PASSWORD}@icons.example/a.svg"},
        {"src": "data:image/svg+xml,<svg>//a@b</svg>"},
    ]
    problems = _problems(PallasAgentSpec, {**agent("a1")["spec"], "icons": icons})
    assert [p for p, _ in problems] == ["icons.0.src"]


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"servers": [{"name": "s", "url": f"https://u:{PASSWORD}@s.example/mcp"}]}, "servers.0.url"),
        ({"agents": [{"name": "p", "url": f"http://u:{PASSWORD}@p.example/mcp"}]}, "agents.0.url"),
        ({"provider": {"name": "p", "type": "openai", "baseURL": f"https://u:{PASSWORD}@llm.example/v1"}},
         "provider.baseURL"),
    ],
)  # fmt: skip
def test_an_agent_config_with_credentials_in_a_url_is_a_clear_error(
    fields: dict[str, Any], where: str
) -> None:
    config = {"name": "a", "model": "m", "provider": {"name": "p", "type": "openai"}, **fields}
    with pytest.raises(ConfigError) as refused:
        parse_config(config, "agent.yaml")
    assert f"agent.yaml: {where}: must not carry credentials (user:password@host)" in str(refused.value)
    assert PASSWORD not in str(refused.value)


def _node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    for part in path.split("."):
        schema = schema["additionalProperties"] if part == "*" else schema["properties"][part]
        if schema.get("type") == "array":
            schema = schema["items"]
    return schema


@pytest.mark.parametrize(
    ("crd", "path"),
    [
        (crds.deployment_crd, "spec.mcpServers.*.url"),
        (crds.deployment_crd, "spec.providers.*.baseURL"),
        (crds.deployment_crd, "spec.registry.publicURLTemplate"),
        (crds.deployment_crd, "spec.registry.publicURL"),
        (crds.deployment_crd, "spec.auth.oidc.issuer"),
        (crds.deployment_crd, "spec.auth.oidc.jwksURL"),
        (crds.agent_crd, "spec.icons.src"),
    ],
)
def test_the_crd_carries_the_same_rule_as_a_cel_expression(crd: Any, path: str) -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    (rule,) = [r for r in _node(schema, path)["x-kubernetes-validations"] if "credentials" in r["message"]]
    assert rule["rule"] == f"!self.matches(r'{WITH_CREDENTIALS}')"
    assert rule["message"].startswith("must not carry credentials (user:password@host): ")
    # CEL's matches() is RE2: the pattern must not use what RE2 lacks (backreferences, lookaround).
    assert not re.search(r"\\[1-9]|\(\?[=!<]", WITH_CREDENTIALS)
    for url in [*WITH_USER_INFO, *ALSO_WITH_USER_INFO]:
        assert re.match(WITH_CREDENTIALS, url)
    for url in WITHOUT:
        assert not re.match(WITH_CREDENTIALS, url)
