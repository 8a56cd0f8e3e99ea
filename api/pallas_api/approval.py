"""Which tool calls wait for the caller's approval (`mcpServers.<name>.requireApproval`).

A downstream server whose tools change the world (a shell, a database, a ticket system) can
make each call of some of its tools wait for a human: the agent asks the client that started
the turn, through MCP elicitation, and runs the tool only when the answer is yes
(docs/api.md §3, "Approvals"). The policy lives on the server's entry of the deployment because
whoever configures the server knows which of its tools are dangerous; every agent using the
server follows it.
"""

from __future__ import annotations

import fnmatch
from typing import Annotated

from pydantic import BaseModel, Field

from pallas_api.wire import camel_config

DEFAULT_APPROVAL_SECONDS = 120.0
"""How long a call waits for the caller's answer by default."""


class ApprovalPolicy(BaseModel):
    """The tools of one server whose calls the caller must approve, and how long to wait."""

    model_config = camel_config(extra="forbid", validate_default=True)

    tools: Annotated[list[Annotated[str, Field(min_length=1, max_length=256)]], Field(max_length=64)] = Field(
        default_factory=list
    )
    """Globs over the server's tool names (`delete_*`, `*` for every tool) whose calls need approval."""
    destructive_hint: bool = True
    """Also ask for every tool the server annotates `destructiveHint: true` (and not `readOnlyHint`).
    A tool without annotations is not taken as destructive: name it in `tools`."""
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = DEFAULT_APPROVAL_SECONDS
    """How long a call waits for the answer; no answer in time and the tool is not run."""

    def reason(self, tool: str, *, destructive: bool) -> str | None:
        """Why a call of `tool` needs approval (for the question and the audit line), or None."""
        for glob in self.tools:
            if fnmatch.fnmatchcase(tool, glob):
                return f"requireApproval.tools {glob}"
        if destructive and self.destructive_hint:
            return "destructiveHint"
        return None
