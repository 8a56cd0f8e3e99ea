"""`spec.workflow`: a declared pipeline over other agents, in place of a model's choice.

A workflow agent answers a `send_message` by calling other agents (its steps) in a fixed shape
rather than by an LLM/tool loop: `chain`, `parallel`, `router`, `evaluator` or `planner`, exactly
one of them. A step is a PallasAgent of the same deployment, reached as `spec.agents` peers are
(and so an implied dependency), or a name from the agent's `a2aAgents`. The spec and the pod's
config share these models (the runtime reads the shape as the user wrote it).
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, Field, model_validator

from pallas_api.fields import ONCE, SET
from pallas_api.names import DNS_LABEL
from pallas_api.wire import camel_config


class _Model(BaseModel):
    """camelCase fields; an unknown field is an error (as in every spec model)."""

    model_config = camel_config(extra="forbid")


StepName = Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
"""An agent a workflow calls: a PallasAgent of the deployment, or one of the agent's `a2aAgents`."""

StepList = Annotated[list[StepName], Field(min_length=1, max_length=32), SET, ONCE]
"""Steps, each named once."""

Rating = Literal["POOR", "FAIR", "GOOD", "EXCELLENT"]
RATINGS: tuple[Rating, ...] = ("POOR", "FAIR", "GOOD", "EXCELLENT")
"""The evaluator's ratings, worst first."""


class ChainSpec(_Model):
    """A sequence: each step gets the previous step's answer (the first, the caller's message)."""

    steps: StepList
    """The agents, in order."""
    cumulative: bool = False
    """Each step gets the caller's message and every earlier answer, each headed by its agent."""


class ParallelSpec(_Model):
    """The same message to every fan-out agent at once; their answers to `fanIn`, or returned."""

    fan_out: StepList
    """The agents asked at once."""
    fan_in: StepName | None = None
    """The agent given every answer (each headed by its agent's name); unset: they are the answer."""

    @model_validator(mode="after")
    def _fan_in_apart(self) -> Self:
        if self.fan_in is not None and self.fan_in in self.fan_out:
            raise ValueError(f"fanIn {self.fan_in!r} is also in fanOut")
        return self


class RouterSpec(_Model):
    """The workflow agent's own model picks the one route that fits, from the routes' descriptions."""

    routes: StepList
    """The agents the message may go to."""
    fallback: StepName | None = None
    """Where a message goes when the model names no route; unset: such a call fails."""


class EvaluatorSpec(_Model):
    """A generator's answer refined on an evaluator's feedback until it is rated good enough."""

    generator: StepName
    """The agent that answers, then refines its answer on the feedback."""
    evaluator: StepName
    """The agent that rates an answer POOR, FAIR, GOOD or EXCELLENT, with feedback."""
    min_rating: Rating = "GOOD"
    """The rating that ends the refinement."""
    max_refinements: Annotated[int, Field(ge=0, le=20)] = 3
    """Refinements after the first answer; the best one is returned when none reaches `minRating`."""

    @model_validator(mode="after")
    def _two_agents(self) -> Self:
        if self.generator == self.evaluator:
            raise ValueError("the evaluator must be another agent than the generator")
        return self


class PlannerSpec(_Model):
    """The workflow agent's own model plans steps over the agents, runs them, re-plans, answers."""

    agents: StepList
    """The agents the plan may use."""
    max_steps: Annotated[int, Field(ge=1, le=100)] = 10
    """The most steps (agent calls) one answer may take."""


WorkflowType = Literal["chain", "parallel", "router", "evaluator", "planner"]
WORKFLOW_TYPES: tuple[WorkflowType, ...] = ("chain", "parallel", "router", "evaluator", "planner")


class WorkflowSpec(_Model):
    """Exactly one workflow shape."""

    chain: ChainSpec | None = None
    """A sequence of agents."""
    parallel: ParallelSpec | None = None
    """A fan-out to agents at once, and an optional fan-in."""
    router: RouterSpec | None = None
    """One agent picked by the model."""
    evaluator: EvaluatorSpec | None = None
    """A generator refined until an evaluator rates it good enough."""
    planner: PlannerSpec | None = None
    """A plan over agents, re-planned on their results."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        given = [t for t in WORKFLOW_TYPES if getattr(self, t) is not None]
        if len(given) != 1:
            got = ", ".join(given) or "none"
            raise ValueError(f"a workflow needs exactly one of {', '.join(WORKFLOW_TYPES)} (got {got})")
        return self

    @property
    def type(self) -> WorkflowType:
        """The shape set."""
        return next(t for t in WORKFLOW_TYPES if getattr(self, t) is not None)

    def steps(self) -> list[str]:
        """Every agent the workflow may call, in declaration order, without repeats."""
        names: list[str] = []
        if self.chain is not None:
            names = list(self.chain.steps)
        elif self.parallel is not None:
            names = [*self.parallel.fan_out, *([self.parallel.fan_in] if self.parallel.fan_in else [])]
        elif self.router is not None:
            names = [*self.router.routes, *([self.router.fallback] if self.router.fallback else [])]
        elif self.evaluator is not None:
            names = [self.evaluator.generator, self.evaluator.evaluator]
        elif self.planner is not None:
            names = list(self.planner.agents)
        return list(dict.fromkeys(names))


def step_names(workflow: object) -> list[str]:
    """The steps of a raw (unvalidated) `spec.workflow` mapping, for checks that see plain YAML."""
    if not isinstance(workflow, dict):
        return []
    found: list[str] = []
    for shape in workflow.values():
        if not isinstance(shape, dict):
            continue
        for key in ("steps", "fanOut", "routes", "agents"):
            listed = shape.get(key)
            if isinstance(listed, list):
                found.extend(s for s in listed if isinstance(s, str))
        for key in ("fanIn", "fallback", "generator", "evaluator"):
            if isinstance(one := shape.get(key), str):
                found.append(one)
    return list(dict.fromkeys(found))
