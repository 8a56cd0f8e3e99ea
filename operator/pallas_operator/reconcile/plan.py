"""What an agent should have: its references checked, its config rendered, its children built.

Pure apart from reading the world: no API calls. The reconcile then applies what this decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from pallas_api import names
from pallas_api.conditions import INVALID_SPEC
from pallas_api.config import render_config
from pallas_api.live import config_digest, process_digest
from pallas_api.render import RenderError, render_agent, split_model, with_default_telemetry
from pallas_api.spec import (
    DEFAULT_NODE_FAILURE_SECONDS,
    AuthSpec,
    PallasAgentSpec,
    PallasDeploymentSpec,
    TelemetrySpec,
)
from pallas_api.spec.common import ScalingSpec
from pallas_api.validation import describe
from pallas_operator.builders import (
    AgentWorkload,
    Manifest,
    Owner,
    agent_config_map,
    agent_deployment,
    agent_disruption_budget,
    agent_service,
)
from pallas_operator.builders.purge import purges_on_delete
from pallas_operator.engine.world import ChildRecord, OwnerRecord, World
from pallas_operator.status import Problem, check_agent, waiting_for


@dataclass
class AgentPlan:
    """The decision for one agent."""

    spec: PallasAgentSpec | None
    problem: Problem | None = None
    warning: Problem | None = None
    """What the accepted agent runs without (`RenderedAgent.warning`)."""
    waiting: list[str] = field(default_factory=list)
    desired: list[Manifest] = field(default_factory=list)
    unwanted: list[tuple[str, str]] = field(default_factory=list)
    """(kind, name) of children to delete."""
    config_hash: str | None = None
    """sha256 of the rendered config in the ConfigMap (`pallas_api.live.config_digest`)."""
    template_hash: str | None = None
    """sha256 of the part of it only a new process takes (`pallas_api.live.process_digest`):
    the pod template's `pallas.dev/config-hash`, so only edits of that part roll the pods."""
    model: str | None = None
    health_interval: float = 60.0
    health_timeout: float = 3.0
    auth: AuthSpec = field(default_factory=AuthSpec)
    """The deployment's auth: how the operator's probes authenticate."""
    purges_on_delete: bool | None = None
    """Deleting the agent purges its conversations (the `pallas.dev/conversations` finalizer);
    None when the deployment could not be read (the finalizer is left as it is)."""
    scaling: ScalingSpec | None = None
    """The scaling that applies (the agent's, else its deployment's): the scaling loop sizes it."""


def _invalid(what: str, exc: ValidationError) -> Problem:
    return Problem(INVALID_SPEC, f"{what} is invalid: {describe(exc, prefix='spec', limit=1)}")


def plan_agent(
    world: World,
    record: OwnerRecord,
    children: dict[tuple[str, str], ChildRecord],
    default_image: str,
    default_telemetry: TelemetrySpec | None = None,
    node_failure_seconds: int = DEFAULT_NODE_FAILURE_SECONDS,
) -> AgentPlan:
    """Decide what the agent `record` should have, given what the world holds."""
    try:
        spec = PallasAgentSpec.model_validate(record.spec)
    except ValidationError as exc:  # only when the CRD in the cluster is older than the operator
        return AgentPlan(None, _invalid("PallasAgent spec", exc))
    plan = AgentPlan(spec)
    ns, name = record.namespace, record.name
    dep_record = world.deployment(ns, spec.deployment)
    deployment: PallasDeploymentSpec | None = None
    if dep_record is not None:
        try:
            deployment = with_default_telemetry(
                PallasDeploymentSpec.model_validate(dep_record.spec), default_telemetry or TelemetrySpec()
            )
        except ValidationError as exc:
            plan.problem = _invalid(f"PallasDeployment {spec.deployment!r}", exc)
            return plan
        plan.model = split_model(spec.model or deployment.model.default)[1]
        plan.health_interval = float(deployment.health_check.interval_seconds)
        plan.health_timeout = deployment.health_check.timeout_seconds
        plan.auth = deployment.auth
        plan.purges_on_delete = purges_on_delete(deployment)
        plan.scaling = spec.scaling_with(deployment.scaling)
    peers = world.agents_in(ns)
    plan.problem = check_agent(name, spec, deployment, peers)
    if plan.problem is not None or deployment is None:
        return plan
    urls = {a: names.agent_url(a, ns, peers[a].port) for a in spec.peers()}
    try:
        url = names.resource_url(
            name, ns, spec.service.port, spec.deployment, deployment.registry.public_url_template
        )
        rendered = render_agent(name, spec, deployment, urls, namespace=ns, url=url, uid=record.uid)
    except RenderError as exc:
        plan.problem = Problem(exc.reason, str(exc))
        return plan
    plan.warning = rendered.warning
    plan.waiting = waiting_for(spec, peers)
    config_yaml = render_config(rendered.config)
    plan.config_hash = config_digest(config_yaml)
    plan.template_hash = process_digest(rendered.config)
    owner = Owner(names.AGENT_KIND, name, ns, record.uid)
    plan.desired = [
        agent_config_map(owner, spec.deployment, config_yaml),
        agent_service(owner, spec.deployment, spec),
    ]
    # Gate only the start: once pods run, a dependency turning unready does not stop them.
    if not plan.waiting or ("Deployment", name) in children:
        workload = AgentWorkload(
            owner,
            spec.deployment,
            spec,
            deployment,
            rendered.secrets,
            plan.template_hash,
            default_image,
            node_failure_seconds,
        )
        plan.desired.append(agent_deployment(workload))
        budget = agent_disruption_budget(owner, spec.deployment, spec)
        if budget is not None:
            plan.desired.append(budget)
    wanted = {(m["kind"], m["metadata"]["name"]) for m in plan.desired}
    plan.unwanted = [key for key in children if key not in wanted and key[0] == "PodDisruptionBudget"]
    return plan
