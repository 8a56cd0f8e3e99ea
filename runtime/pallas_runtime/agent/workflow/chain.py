"""`chain`: each step gets the previous step's answer (with `cumulative`, every earlier one)."""

from __future__ import annotations

from pallas_api.workflow import ChainSpec
from pallas_runtime.agent.workflow.steps import Answer, Steps, headed


async def run(spec: ChainSpec, message: str, steps: Steps) -> str:
    """The last step's answer (with `cumulative`, every step's, each headed by its agent)."""
    path = " → ".join(spec.steps)
    answers: list[Answer] = []
    sent = message
    for number, step in enumerate(spec.steps, start=1):
        await steps.stage(f"chain {path}: step {number}/{len(spec.steps)} {step}…")
        answer = await steps.ask(step, sent)
        answers.append(answer)
        sent = f"{message}\n\n{headed(answers)}" if spec.cumulative else answer.text
    return headed(answers) if spec.cumulative else answers[-1].text
