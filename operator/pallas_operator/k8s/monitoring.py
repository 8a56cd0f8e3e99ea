"""Whether the Prometheus Operator's ServiceMonitor kind exists, and which ones are ours."""

from __future__ import annotations

from typing import Any

import httpx2
from lightkube import AsyncClient

from pallas_api import names
from pallas_operator.k8s.apply import Seen, seen
from pallas_operator.k8s.resources import ServiceMonitor


async def owned_service_monitors(
    client: AsyncClient, namespace: str, deployment: str
) -> dict[str, Seen] | None:
    """The deployment's ServiceMonitors by name; None when the ServiceMonitor CRD is not installed.

    One list request answers both questions: the API server says 404 for an unknown kind.
    """
    selector: dict[str, Any] = {names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_DEPLOYMENT: deployment}
    try:
        return {
            sm.metadata.name: seen({"metadata": sm.metadata.to_dict()})
            async for sm in client.list(ServiceMonitor, namespace=namespace, labels=selector)
            if sm.metadata is not None and sm.metadata.name
        }
    except httpx2.HTTPStatusError as exc:  # an unknown kind's 404 is plain text, not an ApiError
        if exc.response.status_code == 404:
            return None
        raise
