"""`planner`: the workflow agent's own model plans one step at a time over the agents, then answers.

Each round the model sees the request and every result so far and answers with JSON: the next
step (`{"agent": ..., "message": ...}`) or the answer (`{"answer": ...}`). At most `maxSteps`
steps run; then the model is asked for its answer.
"""

from __future__ import annotations

import json

from pallas_api.fields import ResponseFormat
from pallas_api.workflow import PlannerSpec
from pallas_runtime.agent.workflow.steps import Steps, WorkflowFailed
from pallas_runtime.messages import AssistantMessage, Message, TextPart, UserMessage

JSON_OBJECT = ResponseFormat(type="json_object")


def planning_prompt(instruction: str, listed: str, max_steps: int) -> str:
    """The system prompt of the plan: the instruction, the agents (`Steps.menu`), each move's form."""
    ask = (
        f"Plan the work over these agents and run it one step at a time (at most {max_steps} steps). "
        'Answer with JSON only: {"agent": "<name>", "message": "<what to ask it>"} for the next step, '
        'or {"answer": "<the final answer>"} when done.\n' + listed
    )
    return f"{instruction}\n\n{ask}" if instruction else ask


def move(text: str) -> dict[str, str]:
    """The model's move; text that is no JSON object is taken as its answer."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return {"answer": text}
    if not isinstance(parsed, dict):
        return {"answer": text}
    return {k: str(v) for k, v in parsed.items()}


async def run(spec: PlannerSpec, message: str, steps: Steps) -> str:
    """The model's answer once it has the results it planned for."""
    agents = list(spec.agents)
    system = planning_prompt(steps.instruction, steps.menu(agents), spec.max_steps)
    messages: list[Message] = [UserMessage((TextPart(message),))]
    for number in range(1, spec.max_steps + 2):
        completion = await steps.complete(system, messages, JSON_OBJECT)
        messages.append(AssistantMessage(completion.text))
        chosen = move(completion.text)
        if "answer" in chosen or number > spec.max_steps:
            return chosen.get("answer") or completion.text
        agent = chosen.get("agent", "")
        if agent not in agents:
            raise WorkflowFailed(f"the planner named agent {agent!r}, not one of {', '.join(agents)}")
        await steps.stage(f"planner: step {number}/{spec.max_steps} {agent}…")
        answer = await steps.ask(agent, chosen.get("message") or message)
        messages.append(UserMessage((TextPart(f"Result of {agent}:\n{answer.text}"),)))
    raise WorkflowFailed(f"the planner gave no answer within {spec.max_steps} steps")  # unreachable
