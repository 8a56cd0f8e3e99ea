"""A deleted agent's conversations: the `pallas.dev/conversations` finalizer (docs/operator.md).

While an agent's deployment keeps conversations in PostgreSQL with a `retainAfterDeleteSeconds`,
the agent carries the finalizer. When it is deleted the finalizer's work runs, one step per
reconcile (each returns when to look again):

1. its Deployment is deleted, so no pod writes a turn after the purge, and the pods are waited
   for (at most `PODS_WAIT` seconds: a pod stuck on a lost node must not block the purge);
2. the purge Job runs (`builders.purge`): its own backoff retries a failure;
3. the Job succeeded: the finalizer goes and the agent with it. It failed, or the whole took
   longer than `PURGE_BOUND`: a Warning Event says so and the finalizer goes anyway. Deletion is
   never blocked for good: the abandonment purge (`abandonedAfterSeconds`) remains the backstop.

Nothing here reads a Secret: the Job gets the DSN from the deployment's Secret itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ValidationError

from pallas_api import names
from pallas_api.spec import PallasDeploymentSpec
from pallas_operator.builders.meta import Owner, agent_selector
from pallas_operator.builders.purge import PurgeTarget, purge_job, purge_job_name, purge_target
from pallas_operator.engine.context import Operator
from pallas_operator.engine.world import OwnerRecord
from pallas_operator.k8s.cluster import OwnerEvent

FINALIZER = names.CONVERSATIONS_FINALIZER
POLL_SECONDS = 5.0
"""How often a deletion in progress is looked at again (the Job and pods are not watched)."""
PODS_WAIT = 120.0
"""Seconds after the deletion the purge waits for the agent's pods to be gone; then it runs anyway."""
PURGE_BOUND = 600.0
"""Seconds after the deletion the finalizer goes whatever happened (the Job's own deadline is shorter)."""

JobOutcome = Literal["absent", "running", "succeeded", "failed"]


def job_outcome(job: Mapping[str, Any] | None) -> JobOutcome:
    """Where the purge Job is, from its status conditions."""
    if job is None:
        return "absent"
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "succeeded"
        if condition.get("type") in ("Failed", "FailureTarget"):
            return "failed"
    return "succeeded" if int(status.get("succeeded") or 0) > 0 else "running"


def _job_failure(job: Mapping[str, Any] | None) -> str:
    for condition in ((job or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return f"{condition.get('reason', 'Failed')}: {condition.get('message', '')}".rstrip(": ")
    return "failed"


def seconds_since(timestamp: str, now: datetime | None = None) -> float:
    """Seconds from a Kubernetes timestamp to `now` (0 when it cannot be read)."""
    try:
        then = datetime.fromisoformat(timestamp)
    except ValueError:
        return 0.0
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return ((now or datetime.now(UTC)) - then).total_seconds()


def deployment_target(
    op: Operator, record: OwnerRecord
) -> tuple[PurgeTarget | None, PallasDeploymentSpec | None]:
    """What deleting `record` would purge, and its deployment's spec (None: gone or invalid)."""
    deployment = str(record.spec.get("deployment") or "")
    found = op.world.deployment(record.namespace, deployment)
    if found is None:
        return None, None
    try:
        spec = PallasDeploymentSpec.model_validate(found.spec)
    except ValidationError:
        return None, None
    owner = Owner(names.DEPLOYMENT_KIND, deployment, record.namespace, found.uid)
    return purge_target(owner, spec, record.name, record.uid), spec


CONFLICT_RETRY = 1.0
"""Seconds before a finalizer write refused as stale (409) is tried again on the newer object."""


async def keep_finalizer(op: Operator, record: OwnerRecord, wanted: bool) -> float | None:
    """Put the finalizer on a live agent whose deletion must purge; take it off one whose need not.

    Returns:
        When to look again: a write refused because the object changed since the watch showed it.
    """
    has = FINALIZER in record.finalizers
    if has == wanted:
        return None
    finalizers = (
        [*record.finalizers, FINALIZER] if wanted else [f for f in record.finalizers if f != FINALIZER]
    )
    return await _write_finalizers(op, record, finalizers)


async def finalize(op: Operator, record: OwnerRecord) -> float | None:
    """One step of a deleted agent's purge; seconds until the next, or None when the finalizer is gone."""
    if FINALIZER not in record.finalizers or record.deleting_since is None:
        return None
    target, spec = deployment_target(op, record)
    elapsed = seconds_since(record.deleting_since)
    if target is None or spec is None:
        if spec is None:  # the deployment went first: its Secret may be gone too
            await _event(op, record, "ConversationsNotPurged", _kept_because("its PallasDeployment is gone"))
        return await _let_go(op, record)
    if ("Deployment", record.name) in op.world.children(record.namespace, record.uid):
        await op.applier.delete(record.namespace, "Deployment", record.name)  # no pod writes after the purge
    job_name = purge_job_name(target.identity)
    job = await op.cluster.get("Job", record.namespace, job_name)
    outcome = job_outcome(job)
    if outcome == "succeeded":
        done = (
            "the agent's conversations were deleted"
            if target.retain_seconds == 0
            else f"the agent's conversations are deleted {target.retain_seconds}s from now "
            "(retainAfterDeleteSeconds)"
        )
        await _event(op, record, "ConversationsPurged", done, warning=False)
        return await _let_go(op, record)
    if outcome == "failed":
        reason = (
            f"Job {job_name} failed after its retries ({_job_failure(job)}; see kubectl logs job/{job_name})"
        )
        await _event(op, record, "ConversationsNotPurged", _kept_because(reason))
        return await _let_go(op, record)
    if elapsed > PURGE_BOUND:
        reason = f"the purge took longer than {PURGE_BOUND:g}s"
        await _event(op, record, "ConversationsNotPurged", _kept_because(reason))
        return await _let_go(op, record)
    if outcome == "running":
        return POLL_SECONDS
    pods = await op.cluster.names_of("Pod", (record.namespace,), agent_selector(record.name))
    if pods and elapsed < PODS_WAIT:
        return POLL_SECONDS
    await op.cluster.apply(purge_job(target, spec, op.settings.runtime_image))
    op.metrics.count_write("Job", "apply")
    started = f"Job {job_name} deletes the agent's conversations"
    await _event(op, record, "PurgingConversations", started, warning=False)
    return POLL_SECONDS


def _kept_because(reason: str) -> str:
    return (
        f"the agent's conversations were not purged: {reason}; they stay in the database until "
        "abandonedAfterSeconds passes (the deployment's other agents delete them then)"
    )


async def _let_go(op: Operator, record: OwnerRecord) -> float | None:
    return await _write_finalizers(op, record, [f for f in record.finalizers if f != FINALIZER])


async def _write_finalizers(op: Operator, record: OwnerRecord, finalizers: list[str]) -> float | None:
    written = await op.cluster.set_finalizers(
        names.AGENT_KIND, record.namespace, record.name, finalizers, record.resource_version
    )
    if not written:
        return CONFLICT_RETRY
    op.metrics.count_write(names.AGENT_KIND, "patch")
    return None


async def _event(
    op: Operator, record: OwnerRecord, reason: str, message: str, *, warning: bool = True
) -> None:
    await op.cluster.post_event(
        OwnerEvent(names.AGENT_KIND, record.namespace, record.name, record.uid, reason, message, warning)
    )
    op.metrics.count_write(names.AGENT_KIND, "event")
