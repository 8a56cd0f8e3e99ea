"""Server names and remote URLs."""

from __future__ import annotations

import random
import re
import string

from pallas_registry.naming import (
    cluster_url,
    default_name_prefix,
    remote_url,
    server_name,
)
from tests.support.registry import state

NAME_PATTERN = re.compile(r"^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$")


def test_default_prefix_is_the_namespace_domain_reversed() -> None:
    assert default_name_prefix("agents") == "local.cluster.svc.agents"
    assert server_name(state("research")) == "local.cluster.svc.agents/research"


def test_prefix_follows_the_cluster_domain() -> None:
    assert default_name_prefix("agents", "corp.example") == "example.corp.svc.agents"


def test_configured_prefix_wins() -> None:
    assert server_name(state("research", name_prefix="ca.helu.ouranos")) == "ca.helu.ouranos/research"


def test_odd_characters_become_dashes() -> None:
    name = server_name(state("wéird name/x", namespace="a b", name_prefix=None))
    assert NAME_PATTERN.match(name)
    assert name == "local.cluster.svc.a-b/w-ird-name-x"


def test_long_names_are_shortened_but_stay_distinct() -> None:
    first = server_name(state("a" * 250 + "1"))
    second = server_name(state("a" * 250 + "2"))
    assert len(first) == len(second) == 200
    assert first != second
    assert NAME_PATTERN.match(first)


def test_long_configured_prefix_is_shortened() -> None:
    name = server_name(state("research", name_prefix="x." * 100 + "y"))
    assert len(name) <= 200
    assert NAME_PATTERN.match(name)


def test_any_input_gives_a_schema_valid_name() -> None:
    rng = random.Random(7)
    alphabet = string.printable + "äöü€😀/\u200b"
    for _ in range(500):
        agent = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        namespace = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        prefix = rng.choice([None, "", "ca.helu", "".join(rng.choice(alphabet) for _ in range(50))])
        name = server_name(state(agent, namespace=namespace, name_prefix=prefix))
        assert NAME_PATTERN.match(name), name
        assert 3 <= len(name) <= 200


def test_remote_url_fills_agent_namespace_and_deployment() -> None:
    agent = state(
        "research", public_url_template="https://agents.example.com/{namespace}/{deployment}/{agent}/mcp"
    )
    assert remote_url(agent) == "https://agents.example.com/agents/ouranos/research/mcp"


def test_remote_url_prefers_the_public_template() -> None:
    agent = state(public_url_template="https://agents.example.com/{agent}/mcp")
    assert remote_url(agent) == "https://agents.example.com/research/mcp"


def test_remote_url_falls_back_to_status_url_when_the_template_is_unusable() -> None:
    agent = state(public_url_template="https://x/{unknown}")
    assert remote_url(agent) == "http://research.agents.svc.cluster.local:8000/mcp"


def test_remote_url_without_status_url_is_the_cluster_dns_name() -> None:
    agent = state(url=None, service_port=9000)
    assert remote_url(agent) == cluster_url(agent) == "http://research.agents.svc.cluster.local:9000/mcp"


def test_invalid_status_url_gives_none() -> None:
    assert remote_url(state(url="not a url")) is None
