"""The Kubernetes source: PallasAgents of one deployment, live from the API server.

Two reflectors run side by side: the PallasDeployment (name prefix, public URL template,
version, model capabilities) and the namespace's PallasAgents, filtered here on
`spec.deployment` (the operator labels the agents' children, not necessarily the agents). A
status change reaches the catalogue as soon as its watch event arrives; after a relist the new
view replaces the old one in a single step, so a restart never shows an empty catalogue.

Credentials come from `KubeConfig.from_env()`: the pod's ServiceAccount (the operator's
read-only Role: get/list/watch on pallasagents and pallasdeployments), else the kubeconfig.
Without permission to read the PallasDeployment the agents are still published, with default
settings. With a deployment named, its providers are checked (`providers.py`) with the keys the
operator renders into the registry pod.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any

import httpx2
from lightkube import AsyncClient, KubeConfig

from pallas_api.render import provider_key_env
from pallas_api.spec import ProviderSpec
from pallas_io.kube import PallasAgent, PallasDeployment
from pallas_registry.catalogue import CatalogueStore, Key
from pallas_registry.objects import (
    DeploymentSettings,
    MissingStatus,
    agent_state,
    deployment_settings,
)
from pallas_registry.providers import ProviderTarget, deployment_targets
from pallas_registry.reflector import Reflector
from pallas_registry.source import CatalogueSource
from pallas_registry.state import AgentState


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


class KubernetesSource(CatalogueSource):
    """List+watch of PallasAgents (and their PallasDeployment) in one namespace."""

    def __init__(
        self,
        namespace: str,
        deployment: str | None = None,
        *,
        client: AsyncClient | None = None,
        config: KubeConfig | None = None,
        watch_timeout: int = 240,
        store: CatalogueStore | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """Configure; nothing connects before `run()`.

        Args:
            namespace: Namespace of the agents.
            deployment: Publish only agents whose `spec.deployment` is this; None: every agent.
            client: API client to use (the caller closes it); default: one from `config`.
            config: Credentials; default `KubeConfig.from_env()` (in-cluster, else kubeconfig).
            watch_timeout: Seconds the API server keeps one watch open before it is renewed.
            store: The store to fill; default: a new one.
            environ: Where the deployment's provider keys are, by the names the renderer gives
                them (`PALLAS_PROVIDER_<NAME>_API_KEY`; in a pod the files of its Secret volume,
                read at every look-up); the process environment by default. Providers are
                checked only with a `deployment`.
        """
        super().__init__(store)
        self.namespace = namespace
        self.deployment = deployment
        self._client = client
        self._config = config
        self._watch_timeout = watch_timeout
        self._settings: dict[str, DeploymentSettings] = {}
        self._agents: dict[Key, Mapping[str, Any]] = {}
        self._reflectors: list[Reflector] = []
        self._environ = os.environ if environ is None else environ

    def _mine(self, obj: Mapping[str, Any]) -> bool:
        return self.deployment is None or (obj.get("spec") or {}).get("deployment") == self.deployment

    def _state(self, obj: Mapping[str, Any]) -> AgentState:
        name = (obj.get("spec") or {}).get("deployment")
        return agent_state(obj, self._settings.get(name) if isinstance(name, str) else None)

    def _synced(self) -> bool:
        return all(reflector.synced for reflector in self._reflectors)

    def _publish_all(self) -> None:
        if not self._synced():
            return
        states, left_out = [], {}
        for key, obj in self._agents.items():
            try:
                states.append(self._state(obj))
            except MissingStatus as exc:
                left_out[key] = str(exc)
        # Every new agent has no status until the operator's first write: not worth a warning.
        self.store.replace(states, left_out, logging.INFO)
        self.mark_ready()

    def _publish(self, key: Key) -> None:
        if not self._synced():
            return
        obj = self._agents.get(key)
        if obj is None:
            self.store.remove(key)
            return
        try:
            self.store.upsert(self._state(obj))
        except MissingStatus as exc:
            self.store.leave_out(key, str(exc), logging.INFO)

    def _on_deployments(self, objects: list[Mapping[str, Any]]) -> None:
        self._settings = {s.name: s for s in map(deployment_settings, objects)}
        self._publish_all()

    def _on_deployment(self, kind: str, obj: Mapping[str, Any]) -> None:
        settings = deployment_settings(obj)
        if kind == "DELETED":
            self._settings.pop(settings.name, None)
        else:
            self._settings[settings.name] = settings
        for key, agent in self._agents.items():
            if (agent.get("spec") or {}).get("deployment") == settings.name:
                self._publish(key)

    def _on_agents(self, objects: list[Mapping[str, Any]]) -> None:
        self._agents = {_key(obj): obj for obj in objects if self._mine(obj)}
        self._publish_all()

    def _on_agent(self, kind: str, obj: Mapping[str, Any]) -> None:
        key = _key(obj)
        if kind == "DELETED" or not self._mine(obj):
            if self._agents.pop(key, None) is not None:
                self._publish(key)
            return
        self._agents[key] = obj
        self._publish(key)

    def provider_targets(self) -> list[ProviderTarget]:
        """Every provider of the deployment, with the models its agents use and its key."""
        settings = self._settings.get(self.deployment or "")
        if settings is None:
            return []
        models = [settings.model_default]
        for obj in self._agents.values():
            model = (obj.get("spec") or {}).get("model")
            models.append(model if isinstance(model, str) and model else settings.model_default)

        def key(name: str, _: ProviderSpec) -> str | None:
            return self._environ.get(provider_key_env(name)) or None

        return deployment_targets(settings.name, settings.provider_specs, models, key)

    @property
    def connected(self) -> bool:
        """Whether every watch reached the API server on its last attempt."""
        return bool(self._reflectors) and all(reflector.healthy for reflector in self._reflectors)

    async def run(self) -> None:
        """List and watch until cancelled; API errors are retried, never raised."""
        client = self._client or AsyncClient(
            config=self._config or KubeConfig.from_env(), timeout=httpx2.Timeout(10.0)
        )
        common: dict[str, Any] = {"count_restart": self.count_restart, "watch_timeout": self._watch_timeout}
        self._reflectors = [
            Reflector(
                client,
                PallasDeployment,
                self.namespace,
                on_list=self._on_deployments,
                on_event=self._on_deployment,
                name=self.deployment,
                optional=True,
                **common,
            ),
            Reflector(
                client,
                PallasAgent,
                self.namespace,
                on_list=self._on_agents,
                on_event=self._on_agent,
                **common,
            ),
        ]
        try:
            async with asyncio.TaskGroup() as group:
                for reflector in self._reflectors:
                    group.create_task(reflector.run())
        finally:
            if self._client is None:
                await client.close()
