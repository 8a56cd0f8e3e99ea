"""Names shared by the operator and the registry: the one filler of `publicURLTemplate`, the one
DNS-label pattern."""

from __future__ import annotations

import re

import pytest

from pallas_api import names
from pallas_api.spec import DNS_SUBDOMAIN, MODEL_REF
from tests.support.cluster import REPO


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


@pytest.mark.parametrize("label", ["a", "0", "ouranos", "vllm-2", "a" * 63])
def test_a_dns_label(label: str) -> None:
    assert re.fullmatch(names.DNS_LABEL, label)


@pytest.mark.parametrize("text", ["", "-a", "a-", "A", "a_b", "a.b", "a b", "ä"])
def test_not_a_dns_label(text: str) -> None:
    assert not re.fullmatch(names.DNS_LABEL, text)


def test_the_patterns_built_from_labels() -> None:
    assert re.fullmatch(DNS_SUBDOMAIN, "vllm.llm.svc")
    assert not re.fullmatch(DNS_SUBDOMAIN, "vllm..svc")
    assert re.fullmatch(MODEL_REF, "vllm.Qwen/Qwen3-8B")
    assert not re.fullmatch(MODEL_REF, "VLLM.qwen3")


def test_the_dns_label_is_spelled_out_once() -> None:
    """Every other pattern of a label imports `names.DNS_LABEL` (or its unanchored form)."""
    spelled = names.DNS_LABEL_FORM
    found = [
        str(path.relative_to(REPO))
        for folder in ("api", "operator", "runtime", "hack")
        for path in sorted((REPO / folder).rglob("*.py"))
        if spelled in path.read_text()
    ]
    assert found == ["api/pallas_api/names.py"]


def test_a_hosted_stdio_server_is_named_by_its_deployment_and_key() -> None:
    assert names.stdio_server_name("ouranos", "fs") == "ouranos-mcp-fs"
    assert names.stdio_server_url("ouranos", "fs", "agents") == (
        "http://ouranos-mcp-fs.agents.svc.cluster.local:8000/mcp"
    )
    # Keys a DNS label cannot carry as they are get a digest, so Fs and fs never meet.
    upper, lower = names.stdio_server_name("ouranos", "Fs"), names.stdio_server_name("ouranos", "fs")
    assert upper != lower
    assert upper.startswith("ouranos-mcp-fs-")
    long = names.stdio_server_name("d" * 54, "s" * 63)
    assert len(long) <= 63
    for name in (upper, long, names.stdio_server_name("ouranos", "my_server")):
        assert re.fullmatch(names.DNS_LABEL, name), name
