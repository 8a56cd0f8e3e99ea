"""AgentState → catalogue entry: the Daedalus shape, the schema, and the edge cases."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from pallas_api.fields import ModelCapabilities
from pallas_api.spec import CallerAuth, Icon, ProviderSpec
from pallas_registry.builder import VENDOR_META, InvalidAgent, build_response, one_line
from pallas_registry.schema import OFFICIAL_META, SCHEMA_URL
from pallas_registry.state import HealthView, ProviderView
from tests.support.registry import T0, assert_valid_entry, state


def entry(**changes: Any) -> dict[str, Any]:
    built = build_response(state(**changes))
    assert_valid_entry(built)
    return built


def test_the_seed_shape_daedalus_reads() -> None:
    built = entry(name_prefix="ca.helu.ouranos", name="pallas-research")
    assert built["server"] == {
        "$schema": SCHEMA_URL,
        "name": "ca.helu.ouranos/pallas-research",
        "title": "Research Agent",
        "description": "Web search via Argos and knowledge graph via Neo4j",
        "version": "1.0.0",
        "icons": [{"src": "https://example.com/icons/research.svg", "sizes": ["any"]}],
        "remotes": [
            {"type": "streamable-http", "url": "http://pallas-research.agents.svc.cluster.local:8000/mcp"}
        ],
        "capabilities": {
            "model": "qwen3-8b",
            "vision": False,
            "context_window": 200000,
            "max_output_tokens": 32000,
        },
    }
    assert built["_meta"][OFFICIAL_META] == {
        "status": "active",
        "statusChangedAt": "2026-11-21T10:00:00Z",
        "publishedAt": "2026-11-21T10:00:00Z",
        "updatedAt": "2026-11-21T10:00:00Z",
        "isLatest": True,
    }


def test_vendor_meta_carries_live_state_and_discovery_info() -> None:
    vendor = entry()["_meta"][VENDOR_META]
    assert vendor == {
        "id": "research",
        "namespace": "agents",
        "deployment": "ouranos",
        "status": "ready",
        "phase": "Ready",
        "health": {"status": "ok", "message": "", "checkedAt": "2026-11-21T10:00:00Z"},
        "tools": ["send_message", "get_health"],
        "capabilities": ["web-search", "knowledge-graph"],
        "provider": "vllm",
        "model": "qwen3-8b",
        "modelCapabilities": {"vision": False, "contextWindow": 200000, "maxOutputTokens": 32000},
        "providers": [
            {
                "id": "vllm",
                "kind": "llm",
                "models": ["qwen3-8b"],
                "type": "openai",
                "displayName": "vllm",
                "capabilities": {"streaming": True, "tools": True, "vision": False, "jsonMode": True},
            }
        ],
        "auth": {"mode": "none"},
        "a2a": {
            "agentCard": "http://research.agents.svc.cluster.local:8000/.well-known/agent-card.json",
            "url": "http://research.agents.svc.cluster.local:8000/a2a",
        },
        "workflow": None,
    }


def test_an_agent_without_a2a_names_no_card() -> None:
    assert entry(a2a=False)["_meta"][VENDOR_META]["a2a"] is None


def test_a_workflow_agent_says_its_shape() -> None:
    assert entry(workflow="chain")["_meta"][VENDOR_META]["workflow"] == "chain"


def test_a_ready_agent_at_its_busy_at_is_busy_and_still_active() -> None:
    built = entry(health=HealthView("ok", "", T0, busy=True))
    assert built["_meta"][VENDOR_META]["status"] == "busy"
    assert built["_meta"][VENDOR_META]["health"]["busy"] is True
    assert built["_meta"][OFFICIAL_META]["status"] == "active"
    # Not ready wins: an agent that cannot be used is unavailable, busy or not.
    unready = entry(ready=False, phase="Degraded", health=HealthView("error", "x", T0, busy=True))
    assert unready["_meta"][VENDOR_META]["status"] == "unavailable"


def test_vendor_meta_says_what_a_client_must_present() -> None:
    oidc = CallerAuth("oidc", issuer="https://id.example/realms/a", audience="agents")
    assert entry(auth=oidc)["_meta"][VENDOR_META]["auth"] == {
        "mode": "oidc",
        "issuer": "https://id.example/realms/a",
        "audience": "agents",
    }
    kubernetes = CallerAuth("kubernetes", audiences=("pallas.dev",))
    assert entry(auth=kubernetes)["_meta"][VENDOR_META]["auth"] == {
        "mode": "kubernetes",
        "audiences": ["pallas.dev"],
        "verb": "invoke",
        "resource": "pallasagents.pallas.dev",
    }


def test_model_falls_back_to_the_configured_one() -> None:
    built = entry(model=None, model_ref="anthropic.claude-sonnet-4-5", provider=ProviderView())
    assert built["server"]["capabilities"]["model"] == "claude-sonnet-4-5"
    # The deployment could not be read: no type, the key as the name, conservative capabilities.
    assert built["_meta"][VENDOR_META]["providers"][0] == {
        "id": "anthropic",
        "kind": "llm",
        "models": ["claude-sonnet-4-5"],
        "displayName": "anthropic",
        "capabilities": {"streaming": True, "tools": True, "vision": False, "jsonMode": False},
    }


def test_provider_entry_as_seed_004_describes_it() -> None:
    spec = ProviderSpec.model_validate(
        {
            "type": "anthropic",
            "description": "Claude models",
            "capabilities": {"vision": True},
            "apiKey": {"secretKeyRef": {"name": "llm", "key": "ANTHROPIC_API_KEY"}},
        }
    )
    built = entry(model_ref="anthropic.claude-sonnet-4-5", provider=ProviderView.of("anthropic", spec))
    assert built["_meta"][VENDOR_META]["providers"] == [
        {
            "id": "anthropic",
            "kind": "llm",
            "models": ["qwen3-8b"],
            "type": "anthropic",
            "displayName": "Anthropic",
            "description": "Claude models",
            # Declared vision wins over the model's; JSON mode is not the Messages API's.
            "capabilities": {"streaming": True, "tools": True, "vision": True, "jsonMode": False},
        }
    ]


def test_no_model_known_means_no_capabilities() -> None:
    built = entry(model=None, model_ref="")
    assert "capabilities" not in built["server"]
    assert built["_meta"][VENDOR_META]["providers"] == []


def test_vision_model_capabilities() -> None:
    caps = ModelCapabilities(vision=True, context_window=1_000_000, max_output_tokens=64000)
    assert entry(model_capabilities=caps)["server"]["capabilities"] == {
        "model": "qwen3-8b",
        "vision": True,
        "context_window": 1_000_000,
        "max_output_tokens": 64000,
    }


@pytest.mark.parametrize(
    ("changes", "status", "message"),
    [
        ({"ready": False, "phase": "Progressing"}, "deprecated", "agent is Progressing, not ready"),
        (
            {"ready": False, "phase": "Failed", "status_message": "image pull failed"},
            "deprecated",
            "agent is Failed, not ready: image pull failed",
        ),
        ({"deleting": True}, "deleted", "agent is being deleted"),
    ],
)
def test_official_status_of_agents_not_ready(changes: dict[str, Any], status: str, message: str) -> None:
    official = entry(**changes)["_meta"][OFFICIAL_META]
    assert official["status"] == status
    assert official["statusMessage"] == message


def test_status_message_is_capped_at_500() -> None:
    official = entry(ready=False, phase="Failed", status_message="x" * 2000)["_meta"][OFFICIAL_META]
    assert len(official["statusMessage"]) == 500


def test_long_title_and_description_are_cut_to_100() -> None:
    built = entry(title="T" * 300, description="d " * 200)
    assert len(built["server"]["title"]) == 100
    assert built["server"]["title"].endswith("…")
    assert len(built["server"]["description"]) <= 100


@pytest.mark.parametrize(
    "text",
    [
        "Агент исследований 🔬🧪 — ünïcödé",
        "👩‍👩‍👧‍👦" * 60,
        "مساعد البحث" * 20,
        "e\u0301" * 80,
        "line\nbreaks\tand\r\nspaces   ",
    ],
)
def test_unicode_titles_and_descriptions(text: str) -> None:
    built = entry(title=text, description=text)
    assert "\n" not in built["server"]["title"]
    assert len(built["server"]["title"]) <= 100
    assert json.loads(json.dumps(built, ensure_ascii=False)) == built


def test_empty_title_and_description_get_defaults() -> None:
    built = entry(name="tech-research", title="", description="   ")
    assert built["server"]["title"] == "Tech Research"
    assert built["server"]["description"] == "Tech Research (Pallas agent)"


def test_many_icons_keep_only_what_the_schema_accepts() -> None:
    icons = [
        Icon(src=f"https://example.com/{i}.png", mime_type="image/png", sizes=[f"{i}x{i}"])
        for i in range(1, 60)
    ]
    icons += [
        Icon(src="https://example.com/" + "x" * 300),
        Icon(src="https://example.com/ä.png"),
        Icon(src="https://example.com/a.gif", mime_type="image/gif", theme="dark"),
        Icon(src="data:image/png;base64,iVBORw0KGgo="),
    ]
    built = entry(icons=tuple(icons))
    sources = [icon["src"] for icon in built["server"]["icons"]]
    assert len(sources) == 61
    assert "https://example.com/ä.png" not in sources
    gif = built["server"]["icons"][59]
    assert gif == {"src": "https://example.com/a.gif", "theme": "dark"}


@pytest.mark.parametrize(
    ("registry_url", "src", "published"),
    [
        ("https://agents.example.com/", "/icons/r.svg", "https://agents.example.com/icons/r.svg"),
        # The registry URL is a directory: its path prefix is kept for a relative path.
        ("https://agents.example.com/pallas", "icons/r.svg", "https://agents.example.com/pallas/icons/r.svg"),
        ("https://agents.example.com/pallas/", "/icons/r.svg", "https://agents.example.com/icons/r.svg"),
        ("https://agents.example.com/a/", "../b/r.svg", "https://agents.example.com/b/r.svg"),
        (
            "http://reg.agents.svc.cluster.local:8080/",
            "r.svg",
            "http://reg.agents.svc.cluster.local:8080/r.svg",
        ),
        ("https://agents.example.com/", "//cdn.example.com/r.svg", "https://cdn.example.com/r.svg"),
        # Absolute ones are published as they are.
        ("https://agents.example.com/", "https://cdn.example.com/r.svg", "https://cdn.example.com/r.svg"),
    ],
)
def test_relative_icons_resolve_against_the_registry_url(registry_url: str, src: str, published: str) -> None:
    icon = Icon(src=src, sizes=["48x48", "any"])
    built = entry(icons=(icon,), registry_url=registry_url)
    assert built["server"]["icons"] == [{"src": published, "sizes": ["48x48", "any"]}]


def test_relative_icons_without_a_registry_url_or_too_long_are_left_out() -> None:
    assert "icons" not in entry(icons=(Icon(src="/icons/r.svg"),), registry_url="")["server"]
    long = Icon(src="/" + "x" * 240 + ".svg")  # under 255 as given, over it once resolved
    assert "icons" not in entry(icons=(long,), registry_url="https://agents.example.com/")["server"]


def test_no_usable_icon_means_no_icons_key() -> None:
    assert "icons" not in entry(icons=(Icon(src="https://example.com/" + "x" * 300),))["server"]


def test_timestamps_are_utc_whole_seconds() -> None:
    moment = datetime(2026, 11, 21, 12, 30, 15, 999_999, tzinfo=timezone(timedelta(hours=2)))
    official = entry(updated_at=moment)["_meta"][OFFICIAL_META]
    assert official["updatedAt"] == "2026-11-21T10:30:15Z"


def test_naive_timestamps_are_taken_as_utc() -> None:
    naive = datetime(2026, 1, 2, 3, 4, 5)
    assert entry(published_at=naive)["_meta"][OFFICIAL_META]["publishedAt"] == "2026-01-02T03:04:05Z"


def test_without_timestamps_the_official_meta_has_none() -> None:
    official = entry(published_at=None, updated_at=None, ready_changed_at=None)["_meta"][OFFICIAL_META]
    assert official == {"status": "active", "isLatest": True}


def test_health_without_check_time() -> None:
    vendor = entry(health=HealthView("degraded", "slow"))["_meta"][VENDOR_META]
    assert vendor["health"] == {"status": "degraded", "message": "slow"}


def test_public_url_in_remotes() -> None:
    built = entry(public_url_template="https://agents.example.com/{agent}/mcp")
    assert built["server"]["remotes"] == [
        {"type": "streamable-http", "url": "https://agents.example.com/research/mcp"}
    ]


def test_agent_without_valid_url_is_refused() -> None:
    with pytest.raises(InvalidAgent, match="no valid http"):
        build_response(state(url="mailto:x@example.com"))


def test_over_long_version_is_refused_not_published() -> None:
    with pytest.raises(InvalidAgent, match="version"):
        build_response(state(version="1" * 256))


def test_one_line() -> None:
    assert one_line("  a \n b  ", 10) == "a b"
    assert one_line("abcdef", 4) == "abc…"


def test_updated_at_defaults_to_published_at() -> None:
    official = entry(updated_at=None, published_at=datetime(2026, 1, 1, tzinfo=UTC))["_meta"][OFFICIAL_META]
    assert official["updatedAt"] == "2026-01-01T00:00:00Z"
