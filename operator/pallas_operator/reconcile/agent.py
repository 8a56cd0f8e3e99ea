"""Reconcile one PallasAgent: plan, apply the children, compute and write the status, probe."""

from __future__ import annotations

from pallas_api import conditions, names
from pallas_api.spec import CallerAuth
from pallas_api.status import PallasAgentStatus
from pallas_operator.builders.meta import agent_selector
from pallas_operator.engine.context import AGENT, Operator, now
from pallas_operator.engine.prober import OPEN, ProbeAccess, ProbeTarget
from pallas_operator.engine.world import OwnerRecord
from pallas_operator.k8s.cluster import OwnerEvent
from pallas_operator.reconcile import scaling
from pallas_operator.reconcile.children import apply_children, stored_status
from pallas_operator.reconcile.conversation_purge import finalize, keep_finalizer
from pallas_operator.reconcile.plan import AgentPlan, plan_agent
from pallas_operator.status import AgentObservation, Workload, agent_status
from pallas_operator.status.scaling import Decision


async def reconcile_agent(op: Operator, namespace: str, name: str) -> float | None:
    """Bring one agent's children and status in line with its spec and the world."""
    record = op.world.agent(namespace, name)
    if record is None:  # deleted: the garbage collector removes the children
        _forget(op, namespace, name)
        return None
    if record.deleting_since is not None:  # held by finalizers: the conversations' purge, if ours
        return await finalize(op, record)
    children = op.world.children(namespace, record.uid)
    settings = op.settings
    plan = plan_agent(
        op.world,
        record,
        children,
        settings.runtime_image,
        settings.default_telemetry,
        settings.node_failure_toleration_seconds,
    )
    if plan.problem is None:
        # Pods can run only once a Deployment exists: the watch has seen it, or this process
        # applied it in an earlier reconcile (an edit right after the agent's creation may come
        # before the Deployment's watch event, while its pods already run).
        pods_may_run = ("Deployment", name) in children or op.applier.applied((namespace, "Deployment", name))
        await scaling.hand_over(op, namespace, name, plan, children.get(("Deployment", name)))
        applied = await apply_children(op, namespace, plan.desired, children, plan.unwanted, name)
        if ("Deployment", name) in applied.written and not pods_may_run:
            await scaling.size_created(op, namespace, name, plan)
        current = applied.workload
        # Pods created from now on mount the new config anyway. Asking for them when none can
        # run cost every new agent a list of its namespace's pods, which the API server filters
        # in full: O(N) per agent while N agents are created.
        if ("ConfigMap", names.config_map_name(name)) in applied.written and pods_may_run:
            await _deliver_config(op, namespace, name, plan)
    else:  # nothing is applied; a Deployment from before keeps running and is reported
        seen = children.get(("Deployment", name))
        current = seen.workload if seen is not None else None
    op.prober.track((AGENT, namespace, name), _probe_target(op, plan, record, current))
    scaling.track(op, record, plan, deployed=plan.problem is None and current is not None)
    # A deployment that is missing or cannot be read decides nothing: the finalizer stays as it is.
    wanted = plan.purges_on_delete
    again = None if wanted is None else await keep_finalizer(op, record, wanted)
    old = stored_status(PallasAgentStatus, record)
    new = agent_status(_observation(op, plan, record, current), old, now())
    await op.applier.write_status(
        names.AGENT_KIND, namespace, name, new.to_wire(), record.status, record.resource_version
    )
    await _report(op, record, old, new)
    op.metrics.set_phase(names.AGENT_KIND, namespace, name, new.phase)
    return again


async def _deliver_config(op: Operator, namespace: str, name: str, plan: AgentPlan) -> None:
    """A new config in the ConfigMap: have the kubelet write it into the running pods now.

    Without this the pods get it at the kubelet's next sync of each (up to 90 s); a live edit
    is then taken by the agent at its next turn or health check (docs/operator.md "Live config").
    """
    if plan.config_hash is None or plan.spec is None:
        return
    patched = await op.cluster.sync_pods(namespace, agent_selector(name), plan.config_hash)
    for _ in range(patched):
        op.metrics.count_write("Pod", "patch")


def _forget(op: Operator, namespace: str, name: str) -> None:
    op.prober.track((AGENT, namespace, name), None)
    op.scaler.track((AGENT, namespace, name), None)
    op.applier.forget_owner(namespace, names.AGENT_KIND, name)
    op.metrics.set_phase(names.AGENT_KIND, namespace, name, None)


def _observation(
    op: Operator, plan: AgentPlan, record: OwnerRecord, current: Workload | None
) -> AgentObservation:
    verification, health = op.prober.results((AGENT, record.namespace, record.name))
    decision = op.scaler.decision((AGENT, record.namespace, record.name)) if plan.scaling else None
    spec = plan.spec
    return AgentObservation(
        generation=record.generation,
        problem=plan.problem,
        warning=plan.warning,
        waiting_for=tuple(plan.waiting),
        workload=current,
        verification=verification,
        health=health,
        url=names.agent_url(record.name, record.namespace, spec.service.port) if spec else None,
        model=plan.model,
        workflow=spec.workflow.type if spec and spec.workflow else None,
        replicas=_replicas(plan, current, decision),
        scaling=decision,
        scaled=plan.scaling is not None,
        dependencies=tuple(spec.dependencies()) if spec else (),
        config_hash=plan.config_hash,
    )


def _replicas(plan: AgentPlan, current: Workload | None, decision: Decision | None) -> int:
    """Pods wanted: the fixed size, else the loop's last decision, else the Deployment's replicas."""
    if plan.spec is None:
        return 0
    if plan.scaling is None:
        return plan.spec.fixed_replicas
    if decision is not None:
        return decision.replicas
    return current.replicas if current is not None else scaling.start_replicas(plan.scaling, None)


async def _report(op: Operator, record: OwnerRecord, old: PallasAgentStatus, new: PallasAgentStatus) -> None:
    """A Warning Event when the agent stops being accepted or is accepted with a warning (each new reason)."""
    before = next((c for c in old.conditions if c.type == conditions.ACCEPTED), None)
    after = next(c for c in new.conditions if c.type == conditions.ACCEPTED)
    warns = after.status == "False" or after.reason != conditions.ACCEPTED_REASON
    if warns and (before is None or (before.status, before.reason) != (after.status, after.reason)):
        await op.cluster.post_event(
            OwnerEvent(
                names.AGENT_KIND, record.namespace, record.name, record.uid, after.reason, after.message
            )
        )
        op.metrics.count_write(names.AGENT_KIND, "event")


def _probe_target(
    op: Operator, plan: AgentPlan, record: OwnerRecord, current: Workload | None
) -> ProbeTarget | None:
    if plan.spec is None or current is None or not current.available or plan.template_hash is None:
        return None
    # A rollout in progress is verified once it completes; until then the old result stands.
    # A live edit rolls nothing and changes nothing verification sees (name, version, tools).
    rollout = plan.template_hash if current.rolled_out else "rolling"
    return ProbeTarget(
        url=names.agent_url(record.name, record.namespace, plan.spec.service.port),
        interval=plan.health_interval,
        health_time_limit=plan.health_timeout + 5,
        verify_time_limit=op.settings.verify_timeout,
        rollout=rollout,
        access=_probe_access(plan, record),
        config_hash=plan.config_hash,
    )


def _probe_access(plan: AgentPlan, record: OwnerRecord) -> ProbeAccess:
    auth = CallerAuth.of(plan.auth)
    if auth.mode == "kubernetes" and plan.spec is not None:
        service_account = names.agents_service_account(plan.spec.deployment)
        return ProbeAccess(auth, namespace=record.namespace, service_account=service_account)
    if auth.mode == "oidc":
        return ProbeAccess(auth)
    return OPEN
