"""Loop protection for agent-to-agent calls: the call path travels in the MCP request's `_meta`.

The operator refuses static dependency cycles, but a model decides at run time whom it calls:
A may ask B, whose model asks A again, and the two could ping-pong until every turn times out.
So every call to a peer agent carries, in the `tools/call` request's `_meta`,

    {"pallas.dev/callPath": ["boss", "researcher"], "pallas.dev/hops": 2}

the agents the call passed through, first caller first (a client that is not an agent adds
nothing), and their count. `_meta` rather than an HTTP header: it is part of the MCP request
itself, so it survives any HTTP proxy or gateway between agents and reaches the tool as the
request's own data.

Both ends check. An agent receiving a call refuses it when its own name is already in the path
(`LOOP_DETECTED`) or when it would be agent number `maxDepth + 1` of the chain (`MAX_DEPTH`); an
agent about to call a peer refuses the same way without sending anything, so its model reads
why at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pallas_api.errors import ErrorCode

CALL_PATH_META = "pallas.dev/callPath"
"""`_meta` key: the agents a call passed through, first caller first."""
HOPS_META = "pallas.dev/hops"
"""`_meta` key: how many agents the call passed through (the path's length)."""
MAX_PATH = 100
"""More agents than any `maxDepth` allows: a longer path is malformed, not deep."""


class CallRefused(Exception):
    """A call that would loop or go too deep, or whose path is malformed; `code` says which."""

    def __init__(self, message: str, code: ErrorCode) -> None:
        super().__init__(message)
        self.code = code


def _chain(agents: tuple[str, ...]) -> str:
    return " → ".join(agents)


@dataclass(frozen=True, slots=True)
class CallPath:
    """The agents a call has passed through, this agent last."""

    agents: tuple[str, ...]
    max_depth: int
    """This agent's `maxDepth`: the most agents a chain through it may have."""

    @classmethod
    def inbound(cls, meta: Mapping[str, Any] | None, agent: str, max_depth: int) -> CallPath:
        """The path of a call `agent` received, with `agent` appended.

        Args:
            meta: The request's `_meta` (the wire dict), or None.
            agent: The receiving agent's name.
            max_depth: The receiving agent's `maxDepth`.

        Raises:
            CallRefused: `agent` is already in the path, the chain would be longer than
                `max_depth`, or the path is malformed.
        """
        raw_path = (meta or {}).get(CALL_PATH_META, [])
        raw_hops = (meta or {}).get(HOPS_META, 0)
        if (
            not isinstance(raw_path, list)
            or len(raw_path) > MAX_PATH
            or not all(isinstance(a, str) and 0 < len(a) <= 253 for a in raw_path)
        ):
            raise CallRefused(
                f"_meta {CALL_PATH_META} must be a list of at most {MAX_PATH} agent names",
                ErrorCode.INVALID_ARGUMENTS,
            )
        if isinstance(raw_hops, bool) or not isinstance(raw_hops, int) or raw_hops < 0:
            raise CallRefused(f"_meta {HOPS_META} must be a whole number >= 0", ErrorCode.INVALID_ARGUMENTS)
        path = tuple(raw_path)
        if agent in path:
            raise CallRefused(
                f"agent {agent} is already in this call's path ({_chain((*path, agent))}): refusing a call "
                "that would loop between agents",
                ErrorCode.LOOP_DETECTED,
            )
        depth = max(raw_hops, len(path)) + 1
        if depth > max_depth:
            raise CallRefused(
                f"agent {agent} would be agent {depth} of the call chain ({_chain((*path, agent))}); "
                f"its maxDepth is {max_depth}",
                ErrorCode.MAX_DEPTH,
            )
        return cls((*path, agent), max_depth)

    def onward(self, peer: str) -> dict[str, Any]:
        """The `_meta` of a call to `peer`.

        Raises:
            CallRefused: `peer` is already in the path, or calling it would make the chain
                longer than this agent's `maxDepth`.
        """
        if peer in self.agents:
            raise CallRefused(
                f"calling agent {peer} would loop: it is already in this call's path "
                f"({_chain((*self.agents, peer))})",
                ErrorCode.LOOP_DETECTED,
            )
        if len(self.agents) + 1 > self.max_depth:
            raise CallRefused(
                f"calling agent {peer} would make a chain of {len(self.agents) + 1} agents "
                f"({_chain((*self.agents, peer))}); "
                f"the maxDepth of agent {self.agents[-1]} is {self.max_depth}",
                ErrorCode.MAX_DEPTH,
            )
        return {CALL_PATH_META: list(self.agents), HOPS_META: len(self.agents)}
