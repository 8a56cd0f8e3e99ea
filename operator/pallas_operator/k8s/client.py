"""The operator's API client: in-cluster credentials, else the current kubeconfig."""

from __future__ import annotations

from lightkube import AsyncClient, KubeConfig

from pallas_api import names


def make_client(config: KubeConfig | None = None) -> AsyncClient:
    """A client whose writes all carry the operator's field manager.

    `KubeConfig.from_env()` prefers the pod's service account (and re-reads its rotated token),
    then $KUBECONFIG / ~/.kube/config.
    """
    return AsyncClient(config=config or KubeConfig.from_env(), field_manager=names.FIELD_MANAGER)
