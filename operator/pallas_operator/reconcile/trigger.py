"""Reconcile one PallasTrigger: read its spec and agent, set its conditions, fire it or not."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from pydantic import ValidationError

from pallas_api import names
from pallas_api.spec import CallerAuth, PallasDeploymentSpec, PallasTriggerSpec
from pallas_api.status import PallasTriggerStatus
from pallas_api.triggers.event import EventKind
from pallas_api.validation import describe
from pallas_io.triggers.runs import Credentials, TriggerTarget
from pallas_operator.engine.context import Operator, now
from pallas_operator.engine.triggers import parse_time
from pallas_operator.engine.world import OwnerRecord
from pallas_operator.k8s.cluster import OwnerEvent
from pallas_operator.reconcile.children import stored_status
from pallas_operator.status.trigger import TriggerObservation, runnable, with_conditions


async def reconcile_trigger(op: Operator, namespace: str, name: str) -> float | None:
    """Fire a trigger whose conditions say it can, stop one that cannot; write its status."""
    key = (namespace, name)
    record = op.world.trigger(namespace, name)
    if record is None:  # deleted: nothing fires it any more
        await op.triggers.stop(key)
        return None
    seen, spec = _observe(op, record)
    engine = op.triggers.engine(key)
    old = engine.status if engine is not None else stored_status(PallasTriggerStatus, record)
    new = with_conditions(old, seen, now())
    if spec is not None and runnable(new) and seen.agent_url is not None:
        # Through the resolver, as the prober's checks: a development seam (operator.md).
        url = op.settings.resolver.resolve(seen.agent_url)
        target = TriggerTarget(
            namespace, name, spec, url, credentials=_credentials(op, namespace, spec.agent)
        )
        created = parse_time(record.created) or datetime.now(UTC)
        engine = await op.triggers.fire(
            target, new, generation=record.generation, uid=record.uid, created=created
        )
        engine.amend(with_conditions(engine.status, seen, now()))  # written by the engine's writer
        if engine.status != stored_status(PallasTriggerStatus, record):
            # A new engine starts with this reconcile's status, so amending it changed nothing,
            # yet the API may still hold the one before (AgentNotReady): an event trigger, which
            # writes only when an event runs it, would say so until then.
            op.triggers.publish(key)
    else:  # a trigger that fired until now: its runs in flight are closed, and kept in status
        if (last := await op.triggers.stop(key)) is not None:
            new = with_conditions(last, seen, now())
        await op.applier.write_status(
            names.TRIGGER_KIND, namespace, name, new.to_wire(), record.status, record.resource_version
        )
    await _report(op, record, old, new)
    return None


def _credentials(op: Operator, namespace: str, agent: str) -> Credentials | None:
    """A bearer for runs to agents that check callers by Kubernetes token, else None.

    The token is the one the operator's probes of the agent carry: the deployment's agents
    ServiceAccount (`<deployment>-agents`), which may `invoke` the deployment's agents. So runs
    reach kubernetes-mode agents, named by that identity in their audit lines and budgets (a
    ServiceAccount of the trigger's own is not built: docs/triggers.md). oidc-mode agents get
    none: the operator holds no token of their issuer.
    """
    record = op.world.agent(namespace, agent)
    home = str((record.spec if record is not None else {}).get("deployment") or "")
    deployment = op.world.deployment(namespace, home) if home else None
    if deployment is None:
        return None
    try:
        auth = CallerAuth.of(PallasDeploymentSpec.model_validate(deployment.spec).auth)
    except ValidationError:
        return None
    if auth.mode != "kubernetes":
        return None
    service_account = names.agents_service_account(home)

    async def bearer() -> Mapping[str, str]:
        token = await op.tokens.token(namespace, service_account, auth.audiences)
        return {"Authorization": f"Bearer {token}"}

    return bearer


def _observe(op: Operator, record: OwnerRecord) -> tuple[TriggerObservation, PallasTriggerSpec | None]:
    try:
        spec = PallasTriggerSpec.model_validate(record.spec)
    except ValidationError as exc:
        return TriggerObservation(record.generation, describe(exc, prefix="spec", limit=1)), None
    agent = op.world.agent(record.namespace, spec.agent)
    url = agent.status.get("url") if agent is not None else None
    event_problem, watched = _event_scope(op, record.namespace, spec)
    seen = TriggerObservation(
        record.generation,
        None,
        source=spec.source(),
        agent=spec.agent,
        agent_found=agent is not None,
        agent_url=str(url) if url else None,
        suspend=spec.suspend,
        event_problem=event_problem,
        watched=watched,
    )
    return seen, spec


def _event_scope(op: Operator, namespace: str, spec: PallasTriggerSpec) -> tuple[str | None, str]:
    """(why the operator may not watch an event trigger's objects or None, what it watches)."""
    event = spec.event
    if event is None:
        return None, ""
    where = event.namespace or namespace
    kind = EventKind.of(event.api_version, event.kind)
    if kind not in op.settings.event_kinds:
        allowed = ", ".join(str(k) for k in op.settings.event_kinds) or "none"
        return (
            f"the operator may not watch {event.kind} ({kind}); add {kind.value()} to the chart's "
            f"triggers.eventKinds (allowed now: {allowed})"
        ), ""
    if op.settings.namespaces and where not in op.settings.namespaces:
        return f"the operator does not watch namespace {where!r} (the chart's watchNamespaces)", ""
    return None, f"{kind.resource} in {where}"


async def _report(
    op: Operator, record: OwnerRecord, old: PallasTriggerStatus, new: PallasTriggerStatus
) -> None:
    """A Warning Event when the trigger stops being accepted, or with a new reason."""
    before = {c.type: c for c in old.conditions}
    for cond in new.conditions:
        was = before.get(cond.type)
        if cond.type == "Accepted" and cond.status == "False" and (was is None or was.reason != cond.reason):
            event = OwnerEvent(
                names.TRIGGER_KIND, record.namespace, record.name, record.uid, cond.reason, cond.message
            )
            await op.cluster.post_event(event)
