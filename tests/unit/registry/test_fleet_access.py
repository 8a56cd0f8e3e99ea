"""The fleet's access pieces that need no verifier: bearers, when the door is shut, what the
catalogue keeps of each agent's rules, and how long a verdict is kept."""

from __future__ import annotations

import time

import pytest

from pallas_api.spec import AccessSpec, AuthSpec
from pallas_registry.catalogue import Entry
from pallas_registry.fleet_access import FleetGate, _Verdicts, bearer, requires_auth
from pallas_registry.objects import UNREADABLE_ACCESS, agent_state, deployment_settings
from tests.support.operator import agent, at, deployment
from tests.support.registry import ready_status, state

KUBERNETES = AuthSpec(mode="kubernetes")


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer   abc ", "abc"),
        ("Basic abc", None),
        ("Bearer ", None),
        ("abc", None),
        (None, None),
    ],
)
def test_only_a_bearer_is_a_token(header: str | None, token: str | None) -> None:
    assert bearer(header) == token


def test_the_door_is_shut_while_any_listed_agent_checks_its_callers() -> None:
    open_agent = Entry.build(state("research"))
    checked = Entry.build(state("writer", auth_spec=KUBERNETES))
    leaving = Entry.build(state("writer", auth_spec=KUBERNETES, deleting=True))
    assert not requires_auth([open_agent])
    assert requires_auth([open_agent, checked])
    assert not requires_auth([leaving])  # listed as deleted: no tool, nothing to guard
    assert not requires_auth([])


async def test_an_open_agent_admits_anyone_and_a_checked_one_nobody_without_a_credential() -> None:
    gate = FleetGate()
    assert await gate.may_invoke(None, Entry.build(state("research")))
    assert not await gate.may_invoke(None, Entry.build(state("writer", auth_spec=KUBERNETES)))


def test_the_catalogue_keeps_each_agents_rules_and_an_unreadable_access_list_admits_nobody() -> None:
    settings = deployment_settings(deployment("ouranos", at("spec.auth", {"mode": "kubernetes"})))
    assert settings.auth_spec.mode == "kubernetes"
    listed = agent(
        "research",
        at("spec.access", {"groups": ["research"]}),
        at("status", ready_status("research", "default")),
    )
    assert agent_state(listed, settings).access == AccessSpec(groups=["research"])
    garbled = agent("research", at("status", ready_status("research", "default")))
    garbled["spec"]["access"] = {"groups": "research"}  # not a list: this version cannot read it
    assert agent_state(garbled, settings).access.subjects == [UNREADABLE_ACCESS]
    entry = Entry.build(agent_state(listed, settings))
    assert (entry.auth.mode, entry.access.groups) == ("kubernetes", ["research"])


async def test_a_verdict_is_kept_for_its_ttl_and_never_past_the_bearers_expiry() -> None:
    verdicts, made = _Verdicts(), []

    async def make() -> bool:
        made.append(1)
        return True

    await verdicts.get(("kept",), 30, None, make)
    await verdicts.get(("kept",), 30, None, make)
    assert len(made) == 1
    await verdicts.get(("expired",), 30, int(time.time()) - 1, make)
    await verdicts.get(("expired",), 30, int(time.time()) - 1, make)
    assert len(made) == 3
    await verdicts.get(("uncached",), 0, None, make)
    await verdicts.get(("uncached",), 0, None, make)
    assert len(made) == 5
