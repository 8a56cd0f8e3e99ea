"""Workflows (`spec.workflow`): an agent answering with a declared pipeline over other agents.

One module per shape (`chain`, `parallel`, `router`, `evaluator`, `planner`), each a function of
its spec, the caller's message and `steps.Steps`, which reaches every step the way the agent's
model reaches a peer. `AgentLoop.run` hands a workflow agent's turns here in place of its
LLM/tool loop; everything else about the agent (its MCP surface, conversations, metrics, A2A
card, registry entry) is an ordinary agent's.
"""

from __future__ import annotations

from pallas_api.workflow import WorkflowSpec
from pallas_runtime.agent.workflow import chain, evaluator, parallel, planner, router
from pallas_runtime.agent.workflow.steps import StepFailed, Steps, WorkflowFailed

__all__ = ["StepFailed", "Steps", "WorkflowFailed", "answer"]


async def answer(spec: WorkflowSpec, message: str, steps: Steps) -> str:
    """The workflow's answer to `message`.

    Raises:
        StepFailed: a step failed (and the shape cannot go on without it).
        WorkflowFailed: the router named no route without a fallback, the planner no agent.
        BudgetExceeded: the turn's budget was spent before a step.
    """
    if spec.chain is not None:
        return await chain.run(spec.chain, message, steps)
    if spec.parallel is not None:
        return await parallel.run(spec.parallel, message, steps)
    if spec.router is not None:
        return await router.run(spec.router, message, steps)
    if spec.evaluator is not None:
        return await evaluator.run(spec.evaluator, message, steps)
    assert spec.planner is not None  # WorkflowSpec holds exactly one shape
    return await planner.run(spec.planner, message, steps)
