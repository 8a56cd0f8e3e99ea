"""One turn as the runtime carries it: built once at the protocol edge, read everywhere below.

A `Turn` is what a caller's request means to the agent for the length of one turn: who asked and
with which credential, where its progress goes, which conversation and path of agents it belongs
to, its request parameters and model choice. The loop, the toolbox and the tool calls read it;
none of them is handed its parts one keyword at a time. What a tool call hands its source (a
downstream server or a peer agent) is `turn.onward(...)`: the one place that says what a calling
turn passes on.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from pallas_api.fields import ModelCapabilities, RequestParams
from pallas_runtime.agent.progress import ProgressReporter
from pallas_runtime.approval.question import NO_CHANNEL, Approver
from pallas_runtime.conversations.caller import Caller
from pallas_runtime.conversations.model import ConversationKey
from pallas_runtime.downstream.call_path import CallPath
from pallas_runtime.downstream.source import Onward, ProgressHandler
from pallas_runtime.llm.provider import LLMProvider
from pallas_runtime.spending.guard import TurnBudget


@dataclass(frozen=True, slots=True)
class TurnChoice:
    """What a call chose for its turn (`params.model`, `params.systemAppend`)."""

    provider: LLMProvider
    """The provider serving the chosen model (with the caller's key, for `callerBearer`)."""
    model: str
    """The chosen model's id (as metrics label it)."""
    capabilities: ModelCapabilities
    """The chosen model's."""
    system_append: str = ""
    """Added to the end of the system prompt for this turn."""
    system_override: str | None = None
    """The turn's system prompt in place of the agent's instruction (None: the instruction)."""
    tools_allowlist: tuple[str, ...] | None = None
    """Globs narrowing the turn's tools to those matching one (None: every allowed tool)."""

    def system_prompt(self, instruction: str, shared: Sequence[str] = ()) -> str:
        """The turn's system prompt: shared prompts, instruction or override, then the addition.

        The parts present, in that order, a blank line between them.
        """
        own = instruction if self.system_override is None else self.system_override
        return "\n\n".join(part for part in (*shared, own, self.system_append) if part)

    def narrows(self, qualified_name: str) -> bool:
        """Whether the call's `toolsAllowlist` leaves `qualified_name` out of the turn."""
        if self.tools_allowlist is None:
            return False
        return not any(fnmatch.fnmatchcase(qualified_name, glob) for glob in self.tools_allowlist)


@dataclass(frozen=True, slots=True)
class Turn:
    """What one turn carries from the edge that accepted it to every tool call it makes."""

    caller: Caller
    """Whom the turn acts for."""
    credential: str | None
    """The `Authorization` value the agent sends on (see `edge.credential`); None: none."""
    progress: ProgressReporter
    """Where the turn's progress, streamed text and notes go."""
    conversation: ConversationKey | None = None
    """The turn's conversation (peer calls and stateful servers follow it; the loop stores nothing)."""
    call_path: CallPath | None = None
    """The agents this call passed through, this one last (a peer call extends it)."""
    params: RequestParams | None = None
    """The call's own request parameters, over the agent's."""
    choice: TurnChoice | None = None
    """The call's model and system prompt addition (None: the agent's own)."""
    budget: TurnBudget | None = None
    """The turn's budgets (`spending.guard`), checked before and charged after each LLM call and
    passed on to peers (None: a call outside a send_message turn, e.g. the gateway's)."""
    approver: Approver = NO_CHANNEL
    """Whom the turn asks to approve its tool calls (`approval`): its MCP request's client."""

    def onward(self, on_progress: ProgressHandler | None = None) -> Onward:
        """What this turn hands the source of one tool call, whose progress goes to `on_progress`.

        A peer agent's request is built from it (`Onward.meta`): the one definition of what a
        calling turn passes on, for Pallas and A2A peers alike.
        """
        return Onward(
            self.credential, on_progress, self.conversation, self.call_path, self.budget, self.approver
        )
