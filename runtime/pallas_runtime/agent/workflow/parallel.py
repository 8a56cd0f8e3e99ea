"""`parallel`: the same message to every fan-out agent at once; their answers to `fanIn`, or returned.

A fan-out agent that fails does not sink the others: the rest are fanned in with the failures
named, and only when none answered does the workflow fail (with the first failure's code).
"""

from __future__ import annotations

from pallas_api.workflow import ParallelSpec
from pallas_runtime.agent.workflow.steps import Answer, StepFailed, Steps, headed


async def run(spec: ParallelSpec, message: str, steps: Steps) -> str:
    """The fan-in agent's answer to the fan-out's answers, or those answers headed by agent."""
    results = await steps.ask_all(spec.fan_out, message)
    answers = [r for r in results if isinstance(r, Answer)]
    failures = [r for r in results if isinstance(r, StepFailed)]
    if not answers:
        raise failures[0]
    gathered = headed(answers)
    if failures:
        gathered += "\n\nNo answer from: " + "; ".join(f"{f.step} ({f.code.value})" for f in failures)
    if spec.fan_in is None:
        return gathered
    await steps.stage(f"parallel: fan-in {spec.fan_in}…")
    return (await steps.ask(spec.fan_in, f"{message}\n\n{gathered}")).text
