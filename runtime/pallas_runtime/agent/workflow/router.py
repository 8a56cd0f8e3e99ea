"""`router`: the workflow agent's own model picks the one route that fits; the message goes there."""

from __future__ import annotations

import json

from pallas_api.fields import JsonSchemaFormat, ResponseFormat
from pallas_api.workflow import RouterSpec
from pallas_runtime.agent.workflow.steps import Steps, WorkflowFailed
from pallas_runtime.messages import TextPart, UserMessage


def route_format(routes: list[str]) -> ResponseFormat:
    """The structured output the model answers in: one route by name, or none."""
    schema = {
        "type": "object",
        "properties": {"route": {"type": "string", "enum": [*routes, "none"]}},
        "required": ["route"],
        "additionalProperties": False,
    }
    return ResponseFormat(type="json_schema", json_schema=JsonSchemaFormat(name="route", schema=schema))


def routing_prompt(instruction: str, listed: str) -> str:
    """The system prompt of the choice: the agent's instruction, then the routes (`Steps.menu`)."""
    ask = (
        "Pick the one agent below that should answer the user's message. Answer with JSON "
        '{"route": "<agent name>"}, or {"route": "none"} if none fits.\n' + listed
    )
    return f"{instruction}\n\n{ask}" if instruction else ask


def chosen(text: str, routes: list[str]) -> str | None:
    """The route the model's answer names: its JSON `route`, else the one route named in its text."""
    try:
        picked = json.loads(text).get("route")
    except (ValueError, AttributeError):
        named = [r for r in routes if r in text]
        return named[0] if len(named) == 1 else None
    return picked if picked in routes else None


async def run(spec: RouterSpec, message: str, steps: Steps) -> str:
    """The chosen route's answer; a choice of none goes to `fallback`, or fails listing the routes."""
    routes = list(spec.routes)
    system = routing_prompt(steps.instruction, steps.menu(routes))
    await steps.stage(f"router: choosing among {', '.join(routes)}…")
    completion = await steps.complete(system, [UserMessage((TextPart(message),))], route_format(routes))
    route = chosen(completion.text.strip(), routes) or spec.fallback
    if route is None:
        raise WorkflowFailed(
            f"the router's model named no route ({completion.text.strip()[:200]!r}); "
            f"routes: {', '.join(routes)}, and no fallback"
        )
    await steps.stage(f"router: {route}…")
    return (await steps.ask(route, message)).text
