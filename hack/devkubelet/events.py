"""Pod events (`kubectl describe pod`, `kubectl get events`), posted like the kubelet's.

Events are best-effort and never delay the work they describe: each is posted in the background,
and a failure to post one is only logged at debug level.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets

from devkubelet.kube import Kube, Obj, meta, now

log = logging.getLogger("dev-kubelet")


class Recorder:
    """Posts core/v1 Events about pods on behalf of the dev kubelet."""

    def __init__(self, kube: Kube, node: str) -> None:
        self._kube = kube
        self._node = node
        self._pending: set[asyncio.Task[None]] = set()

    def emit(self, pod: Obj, kind: str, reason: str, message: str, container: str | None = None) -> None:
        pod_meta = meta(pod)
        namespace = str(pod_meta.get("namespace", "default"))
        involved: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": namespace,
            "name": pod_meta.get("name"),
            "uid": pod_meta.get("uid"),
        }
        if container:
            involved["fieldPath"] = f"spec.containers{{{container}}}"
        stamp = now()
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod_meta.get('name')}.{secrets.token_hex(8)}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "kubelet", "host": self._node},
            "reportingComponent": "kubelet",
            "reportingInstance": self._node,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        task = asyncio.create_task(self._post(namespace, body))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _post(self, namespace: str, body: Obj) -> None:
        try:
            await self._kube.request(
                "POST", f"/api/v1/namespaces/{namespace}/events", body=body, request_timeout=5
            )
        except Exception as e:  # an event must never break the work it reports
            log.debug("event %s not posted: %s", body["reason"], e)

    async def drain(self, at_most: float = 3.0) -> None:
        """Let queued events go out before the dev kubelet exits."""
        if self._pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*self._pending, return_exceptions=True), at_most)
