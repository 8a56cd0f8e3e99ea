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
import re
from typing import Annotated

from pydantic import BaseModel, Field

from pallas_api.wire import camel_config

DEFAULT_APPROVAL_SECONDS = 120.0
"""How long a call waits for the caller's answer by default."""
MAX_PENDING_QUESTIONS = 8
"""Approval questions one turn may have waiting at once; a call beyond them is refused unasked
(a model calling 40 guarded tools in one round put 40 questions to its caller in half a second)."""
_WORD_BREAK = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_PUNCTUATION = re.compile(r"[^a-z0-9*?\[\]!]+")


def normal_name(name: str) -> str:
    """A tool name (or a glob over names) as approval globs compare it.

    `Delete-Record`, `deleteRecord` and `delete.record` all read `delete_record`. Servers spell
    names as they like; a glob written `delete_*` must not miss `Delete-Record` (a call that then
    ran unasked). Words split at case changes, everything lower case, each run
    of punctuation one `_` (glob characters `*?[]!` kept).
    """
    return _PUNCTUATION.sub("_", _WORD_BREAK.sub("_", name).lower()).strip("_")


class ApprovalPolicy(BaseModel):
    """The tools of one server whose calls the caller must approve, and how long to wait."""

    model_config = camel_config(extra="forbid", validate_default=True)

    tools: Annotated[list[Annotated[str, Field(min_length=1, max_length=256)]], Field(max_length=64)] = Field(
        default_factory=list
    )
    """Globs over the server's tool names (`delete_*`, `*` for every tool) whose calls need approval.
    Compared without regard to case and punctuation (`normal_name`): `delete_*` also matches
    `Delete-Record` and `deleteRecord`."""
    destructive_hint: bool = True
    """Also ask for every tool the server annotates `destructiveHint: true` (and not `readOnlyHint`).
    A tool without annotations is not taken as destructive: name it in `tools`."""
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = DEFAULT_APPROVAL_SECONDS
    """How long a call waits for the answer; no answer in time and the tool is not run."""

    def reason(self, tool: str, *, destructive: bool) -> str | None:
        """Why a call of `tool` needs approval (for the question and the audit line), or None."""
        name = normal_name(tool)
        for glob in self.tools:
            if fnmatch.fnmatchcase(tool, glob) or fnmatch.fnmatchcase(name, normal_name(glob)):
                return f"requireApproval.tools {glob}"
        if destructive and self.destructive_hint:
            return "destructiveHint"
        return None
