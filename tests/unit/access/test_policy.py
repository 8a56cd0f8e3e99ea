"""Access control, the pure parts: who is admitted, what fastmcp keeps of a caller, the
decision cache, the rendered auth settings and the status the operator writes about it."""

from __future__ import annotations

import asyncio
import time

import pytest

from pallas_api.config import AccessConfig
from pallas_api.render import RenderError, render_agent
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec
from pallas_api.status import PallasAgentStatus, PallasDeploymentStatus
from pallas_operator.status import (
    AgentObservation,
    DeploymentObservation,
    HealthResult,
    Verification,
    Workload,
    agent_status,
    deployment_status,
)
from pallas_runtime.auth.cache import DecisionCache, token_key
from pallas_runtime.auth.identity import INVOKE_SCOPE, Caller, Decision, access_token, admits, string_list
from pallas_runtime.auth.kubernetes import token_expiry
from tests.support.operator import agent, at, deployment, spec

ALICE = Caller("alice", ("research", "ops"))


@pytest.mark.parametrize(
    ("subjects", "groups", "admitted"),
    [
        ([], [], True),  # no lists: every authenticated caller
        (["alice"], [], True),
        (["bob"], [], False),
        ([], ["ops"], True),
        ([], ["sales"], False),
        (["bob"], ["research"], True),  # either list admits
    ],
)
def test_access_lists_admit_by_subject_or_group(
    subjects: list[str], groups: list[str], admitted: bool
) -> None:
    assert admits(AccessConfig(subjects=subjects, groups=groups), ALICE) is admitted


def test_claims_read_as_string_lists_whatever_the_issuer_sends() -> None:
    assert string_list(["a", "b"]) == ("a", "b")
    assert string_list("a") == ("a",)
    assert string_list(["a", 3, None]) == ("a",)
    assert string_list({"a": 1}) == ()
    assert string_list(None) == ()


def test_the_access_token_carries_identity_and_decision_not_the_bearer_elsewhere() -> None:
    allowed = access_token("raw-bearer", Decision(Caller("alice", ("g",), "https://id"), True, 123))
    assert (allowed.token, allowed.client_id, allowed.subject) == ("raw-bearer", "alice", "alice")
    assert allowed.claims == {"sub": "alice", "groups": ["g"], "iss": "https://id"}
    assert allowed.scopes == [INVOKE_SCOPE]
    assert allowed.expires_at == 123
    denied = access_token("raw-bearer", Decision(Caller("bob"), False))
    assert denied.scopes == []
    assert denied.claims == {"sub": "bob", "groups": []}
    assert "raw-bearer" not in repr(denied.claims)


def test_token_expiry_reads_exp_of_a_jwt_only() -> None:
    import base64
    import json

    payload = base64.urlsafe_b64encode(json.dumps({"exp": 1700000000}).encode()).decode().rstrip("=")
    assert token_expiry(f"eyJhbGciOiJSUzI1NiJ9.{payload}.sig") == 1700000000
    assert token_expiry("opaque-token") is None
    assert token_expiry("a.!!!.c") is None


# --- the decision cache ------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_decisions_are_reused_for_the_ttl_then_asked_again() -> None:
    clock, asked = Clock(), []
    cache = DecisionCache(5, clock=clock)

    async def lookup() -> Decision | None:
        asked.append(1)
        return Decision(ALICE, True)

    key = token_key("t")
    assert (await cache.decide(key, lookup))[1] is False
    assert (await cache.decide(key, lookup))[1] is True
    clock.now += 5.1
    assert (await cache.decide(key, lookup))[1] is False
    assert len(asked) == 2


async def test_unauthenticated_is_cached_too_but_failures_never_are() -> None:
    cache, calls = DecisionCache(60), []

    async def nobody() -> Decision | None:
        calls.append("nobody")
        return None

    async def down() -> Decision | None:
        calls.append("down")
        raise RuntimeError("API server down")

    assert await cache.decide("a", nobody) == (None, False)
    assert await cache.decide("a", nobody) == (None, True)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            await cache.decide("b", down)
    assert calls == ["nobody", "down", "down"]


async def test_a_decision_is_not_kept_past_the_bearers_expiry() -> None:
    cache = DecisionCache(300)
    soon = Decision(ALICE, True, expires_at=int(time.time()) + 1)
    cache.put("k", soon)
    assert cache.get("k") == (True, soon)
    cache.put("gone", Decision(ALICE, True, expires_at=int(time.time()) - 1))
    assert cache.get("gone") == (False, None)


async def test_the_cache_is_bounded_least_recently_used_first() -> None:
    cache = DecisionCache(60, max_entries=3)
    for key in "abc":
        cache.put(key, Decision(ALICE, True))
    cache.get("a")  # a is now the most recently used
    cache.put("d", Decision(ALICE, True))
    assert len(cache) == 3
    assert cache.get("b") == (False, None)
    assert cache.get("a")[0] is True


async def test_concurrent_misses_of_one_bearer_share_one_lookup() -> None:
    cache, started = DecisionCache(60), []
    gate = asyncio.Event()

    async def slow() -> Decision | None:
        started.append(1)
        await gate.wait()
        return Decision(ALICE, True)

    waiters = [asyncio.create_task(cache.decide("k", slow)) for _ in range(10)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*waiters)
    assert len(started) == 1
    assert {r[0] for r in results} == {Decision(ALICE, True)}


def test_cache_keys_are_digests_not_bearers() -> None:
    assert token_key("secret-token") != "secret-token"
    assert len(token_key("secret-token")) == 64


# --- rendering ---------------------------------------------------------------------------------


def _specs(
    *deployment_mods: object, agent_mods: tuple[object, ...] = ()
) -> tuple[PallasAgentSpec, PallasDeploymentSpec]:
    return (
        PallasAgentSpec.model_validate(agent("research", *agent_mods)["spec"]),  # type: ignore[arg-type]
        PallasDeploymentSpec.model_validate(deployment("ouranos", *deployment_mods)["spec"]),  # type: ignore[arg-type]
    )


def test_rendered_auth_carries_mode_namespace_url_and_access() -> None:
    url = "http://research.agents.svc.cluster.local:8000/mcp"
    oidc = {
        "mode": "oidc",
        "oidc": {"issuer": "https://id.example/realms/a", "audience": "agents", "groupsClaim": "roles"},
    }
    agent_spec, dep = _specs(at("spec.auth", oidc), agent_mods=(at("spec.access", {"groups": ["ops"]}),))
    auth = render_agent("research", agent_spec, dep, {}, namespace="agents", url=url).config.auth
    assert (auth.mode, auth.namespace, auth.resource) == ("oidc", "agents", url)
    assert auth.oidc is not None
    assert (auth.oidc.issuer, auth.oidc.audience, auth.oidc.groups_claim) == (
        "https://id.example/realms/a",
        "agents",
        "roles",
    )
    assert auth.access == AccessConfig(groups=["ops"])
    kube = render_agent(
        "research", *_specs(at("spec.auth.mode", "kubernetes")), {}, namespace="agents", url=url
    )
    assert (kube.config.auth.mode, kube.config.auth.kubernetes.cache_seconds) == ("kubernetes", 10)


def test_access_lists_without_auth_are_refused_not_ignored() -> None:
    agent_spec, dep = _specs(agent_mods=(spec(access={"subjects": ["alice"]}),))
    with pytest.raises(RenderError) as caught:
        render_agent("research", agent_spec, dep, {})
    assert caught.value.reason == "AccessNotEnforceable"
    assert "set spec.auth.mode to kubernetes or oidc, or remove spec.access" in str(caught.value)


def test_spec_refuses_oidc_settings_that_do_not_match_the_mode() -> None:
    with pytest.raises(ValueError, match=r"auth\.mode oidc needs auth\.oidc"):
        PallasDeploymentSpec.model_validate(deployment("d", at("spec.auth", {"mode": "oidc"}))["spec"])
    with pytest.raises(ValueError, match=r"only used with auth\.mode oidc"):
        PallasDeploymentSpec.model_validate(
            deployment("d", at("spec.auth.oidc", {"issuer": "https://id", "audience": "a"}))["spec"]
        )


# --- status --------------------------------------------------------------------------------------

UP = Workload(replicas=1, ready_replicas=1, available=True, rolled_out=True, message="1/1 pods ready")


def _cond(status: PallasAgentStatus | PallasDeploymentStatus, type_: str) -> tuple[str, str]:
    found = next(c for c in status.conditions if c.type == type_)
    return found.status, found.reason


def test_an_oidc_agent_verified_without_a_token_is_ready_with_health_not_checkable() -> None:
    obs = AgentObservation(
        1,
        workload=UP,
        verification=Verification(ok=True, message="asks for a bearer of https://id", without_token=True),
        health=HealthResult(None, "no token", checkable=False),
    )
    status = agent_status(obs, PallasAgentStatus(), "2026-11-21T10:00:00Z")
    assert _cond(status, "Verified") == ("True", "VerifiedWithoutToken")
    assert _cond(status, "Healthy") == ("Unknown", "HealthNotCheckable")
    assert _cond(status, "Ready") == ("True", "AgentReady")
    assert (status.phase, status.health, status.tools) == ("Ready", None, [])


@pytest.mark.parametrize(
    ("mode", "template", "expected"),
    [
        ("kubernetes", "", ("True", "KubernetesRBAC")),
        ("oidc", "https://agents.example/{agent}/mcp", ("True", "OIDC")),
        ("none", "", ("False", "AuthDisabled")),
        ("none", "https://agents.example/{agent}/mcp", ("False", "Unauthenticated")),
    ],
)
def test_the_deployment_says_who_may_talk_to_its_agents(
    mode: str, template: str, expected: tuple[str, str]
) -> None:
    obs = DeploymentObservation(
        1, (), False, None, None, False, False, auth_mode=mode, public_url_template=template
    )
    status = deployment_status(obs, PallasDeploymentStatus(), "2026-11-21T10:00:00Z")
    assert _cond(status, "Authenticated") == expected
    assert _cond(status, "Ready")[0] == "True"  # advice, never a blocker


async def test_new_access_lists_drop_every_decision_and_one_being_made_is_not_kept() -> None:
    cache = DecisionCache(60)
    cache.put("old", Decision(ALICE, True))
    started, finish = asyncio.Event(), asyncio.Event()

    async def slow() -> Decision | None:
        started.set()
        await finish.wait()
        return Decision(ALICE, True)

    lookup = asyncio.create_task(cache.decide("new", slow))
    await started.wait()
    cache.clear()  # the agent's spec.access changed (applied in place)
    finish.set()
    assert (await lookup)[0] == Decision(ALICE, True)  # its caller gets it, decided before the change
    assert cache.get("old") == (False, None)
    assert cache.get("new") == (False, None)  # but it is not kept for the next request
