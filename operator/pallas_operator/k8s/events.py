"""Kubernetes Events about PallasAgents and PallasDeployments (what `kubectl describe` shows)."""

from __future__ import annotations

import datetime
import logging
import socket

from lightkube import ApiError, AsyncClient
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event

from pallas_api import names
from pallas_operator.k8s.cluster import OwnerEvent

log = logging.getLogger(__name__)
_INSTANCE = socket.gethostname()


async def post_event(client: AsyncClient, event: OwnerEvent) -> None:
    """Post one Event about an owner; best effort, a failure is only logged.

    Callers post on transitions only (a new reason), never on every reconcile, so a stuck agent
    does not flood the namespace.
    """
    now = datetime.datetime.now(datetime.UTC)
    about = {"kind": event.kind, "name": event.name, "namespace": event.namespace, "uid": event.uid}
    body = Event(
        metadata=ObjectMeta(generateName=f"{event.name}.", namespace=event.namespace),
        involvedObject=ObjectReference(apiVersion=names.API_VERSION_STRING, **about),
        reason=event.reason,
        message=event.message[:1024],
        type="Warning" if event.warning else "Normal",
        source=EventSource(component=names.FIELD_MANAGER),
        reportingComponent=f"{names.GROUP}/operator",
        reportingInstance=_INSTANCE,
        firstTimestamp=now,
        lastTimestamp=now,
        count=1,
    )
    try:
        await client.create(body)
    except ApiError as exc:
        log.warning(
            "could not post event %s on %s %s/%s: %s",
            event.reason, event.kind, event.namespace, event.name, exc.status.message,
        )  # fmt: skip
