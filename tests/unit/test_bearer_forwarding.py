"""The one bearer-forwarding rule of MCP servers, peers and A2A agents (`downstream.inbound_auth`)."""

from __future__ import annotations

import pytest

from pallas_runtime.downstream.inbound_auth import BearerForwarding


def test_forwards_the_callers_bearer_when_asked() -> None:
    auth = BearerForwarding.of({"X-Team": "a"}, forward_inbound_auth=True)
    assert auth.forwards
    assert auth.bearer("Bearer caller") == "Bearer caller"
    assert auth.headers(auth.bearer("Bearer caller")) == {"X-Team": "a", "Authorization": "Bearer caller"}


@pytest.mark.parametrize("name", ["Authorization", "authorization", "AUTHORIZATION"])
def test_an_explicit_authorization_header_wins(name: str) -> None:
    auth = BearerForwarding.of({name: "Bearer own"}, forward_inbound_auth=True)
    assert not auth.forwards
    assert auth.bearer("Bearer caller") is None
    assert auth.headers(auth.bearer("Bearer caller")) == {name: "Bearer own"}


def test_off_by_default_sends_only_the_configured_headers() -> None:
    auth = BearerForwarding.of({"X-Team": "a"}, forward_inbound_auth=False)
    assert not auth.forwards
    assert auth.bearer("Bearer caller") is None
    assert auth.headers(None) == {"X-Team": "a"}


@pytest.mark.parametrize("inbound", [None, ""])
def test_a_caller_without_a_bearer_sends_none(inbound: str | None) -> None:
    auth = BearerForwarding.of({}, forward_inbound_auth=True)
    assert auth.bearer(inbound) is None
    assert auth.headers(auth.bearer(inbound)) == {}


def test_the_configured_headers_are_a_copy_never_changed_by_a_call() -> None:
    given = {"X-Team": "a"}
    auth = BearerForwarding.of(given, forward_inbound_auth=True)
    call = auth.headers("Bearer caller")
    call["X-Extra"] = "b"
    given["X-Team"] = "changed"
    assert auth.headers(None) == {"X-Team": "a"}
