"""Asking the kubelet to bring an agent's pods a new config now rather than at its next sync.

The kubelet rewrites a pod's ConfigMap volume only when it syncs the pod: each sync schedules the
next one `syncFrequency` (1 min by default) times 1 to 1.5 later, so an edit waits up to 90 s
(docs/operator.md "Live config").
An update of the pod object is a sync too, so annotating each pod with the config hash it should
serve (`pallas.dev/config-sync`) gets the new file there in about 0.1 s. It touches only the
pods' metadata: no container restarts, and the pod template (so the Deployment) is unchanged.
Best effort: a pod that went meanwhile is skipped, a failure is logged, and the kubelet's own
sync delivers the config anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from pallas_api import names

log = logging.getLogger(__name__)


async def sync_pods(client: AsyncClient, namespace: str, labels: Mapping[str, str], config_hash: str) -> int:
    """Annotate each pod matching `labels` with `config_hash`; how many were patched."""
    patch = {"metadata": {"annotations": {names.ANNOTATION_CONFIG_SYNC: config_hash}}}
    patched = 0
    try:
        async for pod in client.list(Pod, namespace=namespace, labels=dict(labels)):
            meta = pod.metadata
            if meta is None or not meta.name or meta.deletionTimestamp is not None:
                continue
            if (meta.annotations or {}).get(names.ANNOTATION_CONFIG_SYNC) == config_hash:
                continue
            try:
                await client.patch(Pod, meta.name, patch, namespace=namespace, patch_type=PatchType.MERGE)
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
                continue
            patched += 1
    except ApiError as exc:
        log.warning(
            "could not ask the kubelet to refresh the config of pods %s in %s: %s",
            dict(labels), namespace, exc.status.message,
        )  # fmt: skip
    return patched


async def ready_pod_ips(client: AsyncClient, namespace: str, labels: Mapping[str, str]) -> list[str]:
    """The IPs of the pods matching `labels` that are Ready and not stopping.

    What the Service's EndpointSlices list as ready endpoints, read from the pods themselves: the
    operator may already list pods (`sync_pods`), so the scaling loop needs no new permission.
    """
    found: list[str] = []
    async for pod in client.list(Pod, namespace=namespace, labels=dict(labels)):
        if pod.metadata is None or pod.metadata.deletionTimestamp is not None or pod.status is None:
            continue
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or ())
        if ready and pod.status.podIP:
            found.append(pod.status.podIP)
    return found
