"""The one filler of `publicURLTemplate`, shared by the operator and the registry."""

from __future__ import annotations

import pytest

from pallas_api import names


def test_every_placeholder_is_filled() -> None:
    template = "https://{deployment}-{agent}.{namespace}.example.com/{deployment}/{agent}/mcp"
    assert names.public_url(template, "research", "agents", "ouranos") == (
        "https://ouranos-research.agents.example.com/ouranos/research/mcp"
    )


def test_the_public_host_has_the_deployment_filled_in() -> None:
    template = "https://{deployment}-{agent}.example.com/mcp"
    assert names.public_host(template, "research", "agents", "ouranos") == "ouranos-research.example.com"


@pytest.mark.parametrize(
    "template",
    [
        "",
        "https://x/{user}/mcp",  # a placeholder nobody fills
        "https://x/{}/mcp",
        "ftp://x/{agent}",
        "https://x y/{agent}",
        "https:///{agent}",  # no host
        "{agent}.example.com/mcp",  # no scheme
    ],
)
def test_unusable_templates_give_no_url_and_no_host(template: str) -> None:
    assert names.public_url(template, "research", "agents", "ouranos") is None
    assert names.public_host(template, "research", "agents", "ouranos") is None


def test_the_resource_url_is_the_filled_template_else_cluster_dns() -> None:
    template = "https://{deployment}.example.com/{agent}/mcp"
    assert names.resource_url("research", "agents", 8000, "ouranos", template) == (
        "https://ouranos.example.com/research/mcp"
    )
    assert names.resource_url("research", "agents", 8000, "ouranos", "https://x/{user}") == (
        "http://research.agents.svc.cluster.local:8000/mcp"
    )
