"""The `pallas://instruction` resource: the agent's instruction, its model's system prompt.

A caller who may talk to the agent could ask its model for the same text, so serving it
discloses nothing new (docs/runtime.md); `pallas chat`'s `/system` reads it.
"""

from __future__ import annotations

from collections.abc import Callable

from fastmcp import FastMCP
from fastmcp.resources import Resource

from pallas_api.config import AgentConfig
from pallas_api.names import INSTRUCTION_URI
from pallas_runtime.server.descriptions import instruction_description


class InstructionResource:
    """The resource over the agent's configured instruction, as it is now."""

    def __init__(self, config: Callable[[], AgentConfig]) -> None:
        self._config = config

    def add_to(self, mcp: FastMCP) -> None:
        """Offer the resource at `pallas://instruction`, as text/plain (again: a new description)."""
        mcp.add_resource(
            Resource.from_function(
                self.instruction,
                uri=INSTRUCTION_URI,
                name="instruction",
                description=instruction_description(self._config()),
                mime_type="text/plain",
            )
        )

    def instruction(self) -> str:
        """The instruction text new turns run with."""
        return self._config().instruction
