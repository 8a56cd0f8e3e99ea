"""A peer's sessions move under a rollout or a drain, and no call is lost or run twice.

The peer is two replicas of a real fastmcp server behind one address (`tests.support.replicas`),
the old one behind the real `DrainGuard`. What a rollout does to a caller, in the order it
happens in a cluster: the Service sends new connections to the new replica while connections
already open stay on the old one; the old one starts draining and refuses new sessions (503) on
them; the replica that answers a session's request may not be the one that opened it (404).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator

import pytest

from pallas_api.config import PeerAgent
from pallas_api.errors import ErrorCode
from pallas_runtime.downstream.peer_agent import PeerAgentSource
from pallas_runtime.downstream.remote import LEAST_RETRY_PAUSES, SESSION_ATTEMPTS
from pallas_runtime.downstream.source import DownstreamError, Onward, ToolOutcome
from tests.support import mcp_servers as ms
from tests.support.replicas import Replica, ReplicaSet, Routed

LOG = "pallas.downstream"
BEARER = "Bearer caller-token"


@contextlib.asynccontextmanager
async def two_replicas(route: str = "connection") -> AsyncIterator[tuple[ReplicaSet, PeerAgentSource]]:
    replicas = ReplicaSet(
        [Replica(ms.peer_agent_mcp(f"r{i}").http_app(path="/mcp")) for i in range(2)],
        route=route,
    )
    async with ms.serve_app(replicas) as srv:
        source = PeerAgentSource(PeerAgent(name="helper", url=srv.url, timeout_seconds=10), probe_timeout=1.0)
        try:
            yield replicas, source
        finally:
            await source.aclose()


async def send(source: PeerAgentSource, text: str, bearer: str | None) -> ToolOutcome:
    return await source.call_tool("send_message", {"message": text}, Onward(credential=bearer))


def answered(outcome: ToolOutcome) -> str:
    assert not outcome.is_error, outcome
    (part,) = outcome.content
    return json.loads(part.text)["message"]


@pytest.mark.parametrize("bearer", [None, BEARER], ids=["shared-session", "forwarded-bearer"])
async def test_a_call_landing_on_a_replica_that_never_had_its_session_runs_once_on_a_new_one(bearer, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    async with two_replicas(route="request") as (replicas, source):
        assert answered(await send(source, "before", bearer)) == "before"

        def endpoints_change_after_the_handshake(routed: Routed) -> None:
            if routed.method == "initialize":
                replicas.current = 1  # the call after it lands on the replica that never saw the session

        if bearer is None:
            replicas.current = 1  # the shared session, opened on replica 0, now reaches replica 1
        else:
            replicas.on_routed = endpoints_change_after_the_handshake  # each call opens its own
        assert answered(await send(source, "during", bearer)) == "during"

    # Replica 1 refused the unknown session, then ran the call once on a session of its own;
    # replica 0 ran only the call before the move.
    assert replicas.calls(1, status=404) == 1
    assert replicas.calls(1) == 1
    assert replicas.calls(0) == 1
    assert "session ended by the server; trying again on a new session" in caplog.text


async def test_endpoints_still_moving_after_the_first_retry_are_waited_out() -> None:
    async with two_replicas(route="request") as (replicas, source):
        assert answered(await send(source, "before", BEARER)) == "before"
        moves: list[int] = []

        def endpoints_flap_twice(routed: Routed) -> None:
            if routed.method == "initialize" and len(moves) < 2:  # a rollout's endpoints, mid-change
                moves.append(routed.replica)
                replicas.current = 1 - routed.replica

        replicas.on_routed = endpoints_flap_twice
        started = time.monotonic()
        assert answered(await send(source, "during", BEARER)) == "during"
        took = time.monotonic() - started

    # Two sessions met the replica that never had them: the first retry went at once, the
    # second waited; the third session ran the call, once.
    assert replicas.calls(0, status=404) + replicas.calls(1, status=404) == 2
    assert replicas.calls(0) + replicas.calls(1) == 2  # "before" and "during"
    assert took >= LEAST_RETRY_PAUSES[1]


async def test_a_draining_replica_reached_over_a_kept_alive_connection_hands_the_call_on(caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOG)
    async with two_replicas(route="connection") as (replicas, source):
        assert answered(await send(source, "before", BEARER)) == "before"
        # The rollout: new connections go to replica 1; replica 0 drains, and the connections
        # the caller keeps alive still reach it.
        replicas.current = 1
        replicas.replicas[0].draining = True
        started = time.monotonic()
        assert answered(await send(source, "during", BEARER)) == "during"
        took = time.monotonic() - started

    assert replicas.replicas[0].refused >= 1, "the call must have met the draining replica first"
    assert replicas.calls(0) == 1
    assert replicas.calls(1) == 1
    assert took < 2.0, f"the first retry goes at once over a new connection ({took:.2f}s)"
    refused = "helper: the server is shutting down and takes no new sessions; trying again on a new session"
    assert refused in caplog.text


async def test_a_draining_replica_closes_each_connection_it_answers_so_calls_leave_it() -> None:
    async with two_replicas(route="connection") as (replicas, source):
        assert answered(await send(source, "before", None)) == "before"  # the shared session, on 0
        kept_alive = sum(1 for replica in replicas._pinned.values() if replica == 0)
        replicas.current = 1
        replicas.replicas[0].draining = True
        drain_began = len(replicas.routed)
        for n in range(kept_alive + 2):
            assert answered(await send(source, f"during {n}", None)) == f"during {n}"
        after = replicas.routed[drain_began:]

    # Replica 0 still serves its open session, but each answer closes its connection: once the
    # connections the caller kept alive are used up, calls go over new ones, to replica 1, where
    # the session is unknown (404) and a new one takes the call.
    served_by_draining = [r for r in after if r.replica == 0 and r.method is not None]  # not the GET stream
    assert 1 <= len(served_by_draining) <= kept_alive, (kept_alive, after)
    assert replicas.calls(1, status=404) == 1
    assert replicas.calls(1) >= 1
    assert replicas.calls(0) + replicas.calls(1) == kept_alive + 3


async def test_a_call_a_stopped_replica_ran_none_of_is_sent_again_on_a_new_session(caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOG)
    stopped = [False, False]
    replicas = ReplicaSet(
        [
            Replica(ms.peer_agent_mcp(f"r{i}", stopped=lambda i=i: stopped[i]).http_app(path="/mcp"))
            for i in range(2)
        ]
    )
    async with ms.serve_app(replicas) as srv:
        source = PeerAgentSource(PeerAgent(name="helper", url=srv.url, timeout_seconds=10), probe_timeout=1.0)
        try:
            assert answered(await send(source, "before", None)) == "before"  # the shared session, on 0
            # Replica 0's drain is over: it still has the session, and refuses its calls unrun.
            replicas.current = 1
            replicas.replicas[0].draining = True
            stopped[0] = True
            assert answered(await send(source, "during", None)) == "during"
        finally:
            await source.aclose()

    assert replicas.calls(0) == 2, "before, and the refused call"
    assert replicas.calls(1) == 1, "the refused call, once, on a new session"
    assert "the agent is stopping and did not process the call; trying again on a new session" in caplog.text


async def test_a_stopped_peer_everywhere_gives_the_caller_its_refusal() -> None:
    replicas = ReplicaSet([Replica(ms.peer_agent_mcp("r0", stopped=lambda: True).http_app(path="/mcp"))])
    async with ms.serve_app(replicas) as srv:
        source = PeerAgentSource(PeerAgent(name="helper", url=srv.url, timeout_seconds=10), probe_timeout=1.0)
        try:
            outcome = await send(source, "nobody home", None)
        finally:
            await source.aclose()

    assert outcome.is_error
    assert outcome.code is ErrorCode.AGENT_SHUTTING_DOWN
    assert (
        outcome.content[0].text == "agent r0 is shutting down; the message was not processed: send it again"
    )
    assert replicas.calls(0) == SESSION_ATTEMPTS


async def test_a_peer_draining_everywhere_fails_the_call_with_its_retryable_refusal_in_bounded_time() -> None:
    async with two_replicas(route="request") as (replicas, source):
        for replica in replicas.replicas:
            replica.draining = True
        started = time.monotonic()
        outcome = await send(source, "nobody home", BEARER)
        took = time.monotonic() - started

    assert outcome.is_error
    text = outcome.content[0].text
    assert text == "helper: send_message failed: the server is shutting down and takes no new sessions"
    assert sum(r.refused for r in replicas.replicas) == SESSION_ATTEMPTS
    assert not replicas.calls(0)
    assert not replicas.calls(1)
    # Attempts 2..N wait the 1 s the refusal asks for (capped): bounded, never the call's timeout.
    assert (SESSION_ATTEMPTS - 2) * 1.0 <= took < SESSION_ATTEMPTS * 1.0 + 1.0


async def test_a_call_that_may_have_run_is_never_sent_twice() -> None:
    # A server that fails the call after it arrived (HTTP 500) is not retried: it may have run it.
    async with ms.failing_calls_server() as srv:
        source = PeerAgentSource(PeerAgent(name="helper", url=srv.url), probe_timeout=1.0)
        try:
            with pytest.raises(DownstreamError, match=r"^helper: calling echo_headers failed: HTTP 500$"):
                await source.call_tool("echo_headers", {}, Onward(credential=BEARER))
        finally:
            await source.aclose()
    handshakes = [r for r in srv.received("POST") if "mcp-session-id" not in r.headers]
    assert len(handshakes) == 1, "one session: the call was not sent again"
