"""The one-shot Job that purges a deleted agent's conversations (`pallas conversations purge`).

It runs the deployment's runtime image with the DSN from the deployment's Secret, as the agent's
pods had it, retries with the Job controller's backoff, and gives up after a deadline. It belongs
to the PallasDeployment (not the agent, which is going): it is removed with it, or
`ttlSecondsAfterFinished` after it ends.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from pallas_api import names
from pallas_api.spec import PallasDeploymentSpec
from pallas_operator.builders.meta import Manifest, Owner, component_labels
from pallas_operator.builders.pod import container_security, pod_security

PURGE_COMPONENT = "conversations-purge"
DSN_ENV = "PALLAS_CONVERSATIONS_DSN"
BACKOFF_LIMIT = 4
"""Retries of a failed purge (the Job controller waits 10 s, 20 s, 40 s, 80 s between them)."""
ACTIVE_DEADLINE_SECONDS = 240
"""The most the Job runs, retries included: the finalizer's bound (`PURGE_BOUND`) is longer."""
TTL_AFTER_FINISHED = 3600
"""The finished Job (and its pod's logs) stays an hour for `kubectl logs`, then goes."""


class PurgeTarget(NamedTuple):
    """Whose conversations to purge, the Job's owner, and the retention in seconds.

    `deployment` is the agent's PallasDeployment (the Job's owner); `identity` the rows' key
    (`names.agent_identity`, with the agent's UID).
    """

    deployment: Owner
    agent: str
    identity: str
    retain_seconds: int


def purges_on_delete(spec: PallasDeploymentSpec) -> bool:
    """Whether deleting one of the deployment's agents purges its conversations (its finalizer).

    Not for memory and SQLite stores, which live in the agent's pods and go with them; not with
    a null retention, which keeps them until the abandonment purge.
    """
    conversations = spec.conversations
    return (
        conversations.store == "postgres"
        and conversations.postgres is not None
        and conversations.retain_after_delete_seconds is not None
    )


def purge_target(deployment: Owner, spec: PallasDeploymentSpec, agent: str, uid: str) -> PurgeTarget | None:
    """What deleting the agent purges; None when nothing is."""
    conversations = spec.conversations
    if not purges_on_delete(spec) or conversations.retain_after_delete_seconds is None:
        return None
    identity = names.agent_identity(deployment.namespace, deployment.name, agent, uid)
    return PurgeTarget(deployment, agent, identity, conversations.retain_after_delete_seconds)


def purge_job_name(identity: str) -> str:
    """A name per agent identity (a re-created agent's purge is another Job), short enough for labels."""
    return f"pallas-purge-{hashlib.sha256(identity.encode()).hexdigest()[:20]}"


def purge_job(target: PurgeTarget, spec: PallasDeploymentSpec, default_image: str) -> Manifest:
    """The Job running `pallas conversations purge --identity <id> --dsn-env … --after <retention>`."""
    assert spec.conversations.postgres is not None, "purge_target checked the store"
    dsn = spec.conversations.postgres.dsn.secret_key_ref
    owner = target.deployment
    labels = {**component_labels(owner.name, PURGE_COMPONENT, target.agent), names.LABEL_AGENT: target.agent}
    # Not the controller: the Job controller is its pods' controller, and nothing of Pallas
    # reconciles the Job from its events; the reference only removes it with the deployment.
    reference = {**owner.reference(), "controller": False, "blockOwnerDeletion": False}
    command = [
        "pallas", "conversations", "purge", "--identity", target.identity,
        "--dsn-env", DSN_ENV, "--after", str(target.retain_seconds),
    ]  # fmt: skip
    container = {
        "name": "purge",
        "image": spec.runtime.image or default_image,
        "command": command,
        "env": [{"name": DSN_ENV, "valueFrom": {"secretKeyRef": {"name": dsn.name, "key": dsn.key}}}],
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": container_security(),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": purge_job_name(target.identity),
            "namespace": owner.namespace,
            "labels": labels,
            "annotations": {names.ANNOTATION_IDENTITY: target.identity},
            "ownerReferences": [reference],
        },
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "activeDeadlineSeconds": ACTIVE_DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": pod_security(),
                    "containers": [container],
                },
            },
        },
    }
