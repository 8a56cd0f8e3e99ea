"""What the soak's clients say, and what the scripted fake LLM answers them (pure).

Every client message is one line (wrapped here) of `key=value` fields after a tag:

    soak-turn caller=c03 conv=soak-1f2e-c03-k2 turn=4 secret=SOAKSECRET-c03-9a8b7c6d5e4f \
        acked=1,3 delegated=1 delegate=1

`acked` lists the earlier turns of the conversation the client was answered for, `delegated`
those of them that went through the researcher. So the fake LLM can check, in every request it
receives, that the conversation it was sent holds each acknowledged turn (a context loss
otherwise) and no other caller's secret (a cross-caller leak), and say so in its answer; the
orchestrator passes a `soak-research` line of the same form to the researcher, whose own history
is checked the same way. The agents' roles come from their instructions (`instruction(role, n)`),
so an edited instruction (a new revision) is still recognised, and its revision is visible.

The orchestrator's answer, which the client parses (`Verdict.parse`):

    soak-verdict turn=4 missing= leaks= research=ok research-missing= research-leaks=
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.support.fake_llm import Call, Delay, Step, Text, ToolCalls

ORCHESTRATOR = "orchestrator"
RESEARCHER = "researcher"
TURN_TAG = "soak-turn"
RESEARCH_TAG = "soak-research"
VERDICT_TAG = "soak-verdict"
RESEARCH_VERDICT_TAG = "soak-research-verdict"

_ROLE = re.compile(r"You are the soak (orchestrator|researcher) \(revision (\d+)\)")
_SECRET = re.compile(r"SOAKSECRET-([a-z0-9]+)-[0-9a-f]+")
_FIELDS = re.compile(r"([a-z][a-z-]*)=(\S*)")


def instruction(role: str, revision: int) -> str:
    """An agent's instruction: its role and the revision of its spec (edits bump it)."""
    return f"You are the soak {role} (revision {revision}). Answer in the soak protocol."


def role_of(system: str) -> tuple[str, int] | None:
    """(role, revision) of an instruction made by `instruction`, else None."""
    found = _ROLE.search(system)
    return (found.group(1), int(found.group(2))) if found else None


def secret_for(caller: str) -> str:
    """A secret that names its owner, so a leak says whose it was."""
    return f"SOAKSECRET-{caller}-{secrets.token_hex(6)}"


def secret_owners(text: str) -> set[str]:
    """The callers whose secrets appear in `text`."""
    return set(_SECRET.findall(text))


def _numbers(raw: str) -> tuple[int, ...]:
    return tuple(int(n) for n in raw.split(",") if n.isdigit())


def _csv(values: Sequence[object]) -> str:
    return ",".join(str(v) for v in values)


def _fields(text: str, tag: str) -> dict[str, str] | None:
    """The `key=value` fields of the first line of `text` tagged `tag`, else None."""
    for line in text.splitlines():
        head, _, rest = line.strip().partition(" ")
        if head == tag:
            return dict(_FIELDS.findall(rest))
    return None


@dataclass(frozen=True)
class Turn:
    """One message of a client (tag `soak-turn`), or the orchestrator's request to the researcher
    for it (tag `soak-research`, where `acked` holds the delegated turns)."""

    caller: str
    conversation: str
    number: int
    secret: str
    acked: tuple[int, ...] = ()
    delegated: tuple[int, ...] = ()
    delegate: bool = False
    tag: str = TURN_TAG

    def text(self) -> str:
        """The message as sent."""
        fields = f"caller={self.caller} conv={self.conversation} turn={self.number} secret={self.secret}"
        fields += f" acked={_csv(self.acked)}"
        if self.tag == TURN_TAG:
            fields += f" delegated={_csv(self.delegated)} delegate={int(self.delegate)}"
        return f"{self.tag} {fields}"

    def research(self) -> Turn:
        """What the orchestrator asks the researcher for this turn."""
        return Turn(
            self.caller, self.conversation, self.number, self.secret, self.delegated, tag=RESEARCH_TAG
        )

    @staticmethod
    def parse(text: str, tag: str = TURN_TAG) -> Turn | None:
        """The turn a message carries, else None."""
        fields = _fields(text, tag)
        if fields is None or not fields.get("turn", "").isdigit():
            return None
        return Turn(
            caller=fields.get("caller", ""),
            conversation=fields.get("conv", ""),
            number=int(fields["turn"]),
            secret=fields.get("secret", ""),
            acked=_numbers(fields.get("acked", "")),
            delegated=_numbers(fields.get("delegated", "")),
            delegate=fields.get("delegate") == "1",
            tag=tag,
        )


def text_of(content: Any) -> str:
    """The text of an OpenAI message content (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def all_text(message: Mapping[str, Any]) -> str:
    """Everything a message carries: its text and its tool calls' arguments."""
    calls = message.get("tool_calls") or []
    return "\n".join([text_of(message.get("content")), *(str(c["function"]["arguments"]) for c in calls)])


@dataclass(frozen=True)
class Check:
    """What a model request showed of the conversation it belongs to."""

    missing: tuple[int, ...]
    """Acknowledged turns absent from it: context lost."""
    leaks: tuple[str, ...]
    """Other callers whose secrets it holds."""


def check(messages: Sequence[Mapping[str, Any]], turn: Turn) -> Check:
    """Does the conversation a model was sent hold `turn`'s acknowledged turns, and nothing of
    another caller's? (User messages of the same caller and conversation count as seen.)"""
    seen = set()
    owners: set[str] = set()
    for message in messages:
        text = all_text(message)
        owners |= secret_owners(text)
        if message.get("role") == "user":
            earlier = Turn.parse(text, turn.tag)
            if earlier and (earlier.caller, earlier.conversation) == (turn.caller, turn.conversation):
                seen.add(earlier.number)
    missing = tuple(n for n in turn.acked if n not in seen)
    return Check(missing, tuple(sorted(owners - {turn.caller})))


def _last(messages: Sequence[Mapping[str, Any]], role: str) -> Mapping[str, Any] | None:
    return next((m for m in reversed(messages) if m.get("role") == role), None)


def _peer_tool(body: Mapping[str, Any]) -> str | None:
    offered = sorted(str(t["function"]["name"]) for t in body.get("tools") or [])
    return next((name for name in offered if name.endswith(f"{RESEARCHER}__send_message")), None)


def _compact(text: str, limit: int = 60) -> str:
    """Free text as one field value: no spaces, bounded."""
    return re.sub(r"\s+", "_", text.strip())[:limit] or "-"


def answer(body: Mapping[str, Any]) -> Text | ToolCalls:
    """The model's reply to a chat-completions request of either soak agent."""
    messages: Sequence[Mapping[str, Any]] = body.get("messages") or []
    system = text_of(messages[0].get("content")) if messages and messages[0].get("role") == "system" else ""
    role = role_of(system)
    user = _last(messages, "user")
    if role is None or user is None:
        return Text("soak: not a soak agent's request")
    if role[0] == RESEARCHER:
        turn = Turn.parse(text_of(user.get("content")), RESEARCH_TAG)
        if turn is None:
            return Text(f"{RESEARCH_VERDICT_TAG} unreadable=1")
        seen = check(messages, turn)
        return Text(
            f"{RESEARCH_VERDICT_TAG} turn={turn.number} missing={_csv(seen.missing)} leaks={_csv(seen.leaks)}"
        )
    turn = Turn.parse(text_of(user.get("content")))
    if turn is None:
        return Text(f"{VERDICT_TAG} unreadable=1")
    last = messages[-1]
    if last.get("role") == "user" and turn.delegate:
        tool = _peer_tool(body)
        if tool is not None:
            return ToolCalls([Call(tool, {"message": turn.research().text()})])
    return Text(_verdict(messages, turn, last))


def _verdict(messages: Sequence[Mapping[str, Any]], turn: Turn, last: Mapping[str, Any]) -> str:
    seen = check(messages, turn)
    research = "none"
    extra = ""
    if turn.delegate:
        result = text_of(last.get("content")) if last.get("role") == "tool" else ""
        fields = _fields(result, RESEARCH_VERDICT_TAG)
        if fields is None or "missing" not in fields:
            research = "failed"
            extra = f" research-error={_compact(result or 'the researcher was not offered')}"
        else:
            research = "ok"
            extra = f" research-missing={fields['missing']} research-leaks={fields.get('leaks', '')}"
    return (
        f"{VERDICT_TAG} turn={turn.number} missing={_csv(seen.missing)} leaks={_csv(seen.leaks)} "
        f"research={research}{extra}"
    )


def llm_script(latency: float) -> Any:
    """The fake LLM's `default` step: `answer`, after `latency` seconds (a model's thinking)."""

    def step(body: Any) -> Step:
        return Delay(latency, then=answer(body))

    return step


@dataclass(frozen=True)
class Verdict:
    """What the orchestrator's answer says of a turn."""

    turn: int
    missing: tuple[int, ...]
    leaks: tuple[str, ...]
    research: str
    """`ok`, `failed` (the researcher's part did not come back), or `none` (not delegated)."""
    research_missing: tuple[int, ...] = ()
    research_leaks: tuple[str, ...] = ()
    research_error: str = ""

    @property
    def context_lost(self) -> bool:
        return bool(self.missing or self.research_missing)

    @property
    def leaked(self) -> tuple[str, ...]:
        return tuple(sorted({*self.leaks, *self.research_leaks}))

    @staticmethod
    def parse(text: str) -> Verdict | None:
        """The verdict in an answer, else None (the answer is not the fake LLM's)."""
        fields = _fields(text, VERDICT_TAG)
        if fields is None or not fields.get("turn", "").isdigit():
            return None

        def names(key: str) -> tuple[str, ...]:
            return tuple(n for n in fields.get(key, "").split(",") if n)

        return Verdict(
            turn=int(fields["turn"]),
            missing=_numbers(fields.get("missing", "")),
            leaks=names("leaks"),
            research=fields.get("research", "none"),
            research_missing=_numbers(fields.get("research-missing", "")),
            research_leaks=names("research-leaks"),
            research_error=fields.get("research-error", ""),
        )
