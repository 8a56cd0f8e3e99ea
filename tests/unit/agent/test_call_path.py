"""The call path of agent-to-agent calls: what an agent accepts, and what it sends on."""

from __future__ import annotations

import pytest

from pallas_api.errors import ErrorCode
from pallas_runtime.downstream.call_path import CallPath, CallRefused


def test_a_call_from_a_client_starts_the_path() -> None:
    path = CallPath.inbound(None, "boss", 5)
    assert path.agents == ("boss",)
    assert path.onward("worker") == {"pallas.dev/callPath": ["boss"], "pallas.dev/hops": 1}
    deeper = CallPath.inbound(path.onward("worker"), "worker", 5)
    assert deeper.onward("helper") == {"pallas.dev/callPath": ["boss", "worker"], "pallas.dev/hops": 2}


@pytest.mark.parametrize(
    ("meta", "code"),
    [
        ({"pallas.dev/callPath": ["boss", "worker"]}, ErrorCode.LOOP_DETECTED),
        ({"pallas.dev/callPath": ["a", "b", "c", "d", "e"]}, ErrorCode.MAX_DEPTH),
        ({"pallas.dev/callPath": ["a"], "pallas.dev/hops": 5}, ErrorCode.MAX_DEPTH),  # hops count too
        ({"pallas.dev/callPath": "boss"}, ErrorCode.INVALID_ARGUMENTS),
        ({"pallas.dev/callPath": [1]}, ErrorCode.INVALID_ARGUMENTS),
        ({"pallas.dev/hops": -1}, ErrorCode.INVALID_ARGUMENTS),
        ({"pallas.dev/hops": True}, ErrorCode.INVALID_ARGUMENTS),
    ],
)
def test_the_receiving_agent_refuses_loops_depth_and_malformed_paths(
    meta: dict[str, object], code: ErrorCode
) -> None:
    with pytest.raises(CallRefused) as refused:
        CallPath.inbound(meta, "boss", 5)
    assert refused.value.code is code


def test_the_calling_agent_refuses_before_sending() -> None:
    path = CallPath.inbound({"pallas.dev/callPath": ["boss"]}, "worker", 2)
    with pytest.raises(CallRefused, match=r"calling agent boss would loop: .*\(boss → worker → boss\)"):
        path.onward("boss")
    with pytest.raises(CallRefused, match="chain of 3 agents") as refused:
        path.onward("helper")
    assert refused.value.code is ErrorCode.MAX_DEPTH
