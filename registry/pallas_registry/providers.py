"""Checks of every LLM provider of a deployment, run by its registry (docs/api.md §4).

The original validated all providers with a key before the agents started, warn-only. The check
itself is the product's one provider check (`pallas_io.llm_check`, which the agents' preflight
uses too): an active provider must list each model its agents use, a provider no agent uses must
answer its models endpoint with its key. Each agent already checks its own provider; a provider
no agent uses has no process holding its key but this one: the registry runs once per deployment
and its pod gets every provider key (`optional` Secret references), so the operator never holds
a key. Results are published on `/healthz`, in `pallas_registry_provider_up`, and from there in
the deployment's `status.providers`.

This module decides what is checked and when: a provider is checked again when what is checked
changes (its endpoint, key or models in use), else every `recheck_ok` seconds (300, the agents'
TTL), or `recheck_failed` (60) after a failure.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx2

from pallas_api.render import secret_source
from pallas_api.spec import ProviderSpec
from pallas_io.llm_check import CHECK_TIMEOUT, ProviderEndpoint, check_provider
from pallas_registry.state import utcnow

log = logging.getLogger("pallas.registry")


@dataclass(frozen=True, slots=True)
class ProviderTarget:
    """One provider of one deployment to check (a change of either means a recheck)."""

    deployment: str
    endpoint: ProviderEndpoint
    """The provider, the models the deployment's agents (and its default) use on it, its key."""

    @property
    def ident(self) -> tuple[str, str]:
        """(deployment, provider): one result per target."""
        return (self.deployment, self.endpoint.name)


def deployment_targets(
    deployment: str,
    providers: Mapping[str, ProviderSpec],
    models_in_use: Iterable[str],
    key: Callable[[str, ProviderSpec], str | None],
    *,
    local: bool = False,
    openai_base_url: str | None = None,
) -> list[ProviderTarget]:
    """A target for every provider of one deployment.

    Args:
        deployment: The deployment's name.
        providers: Its `spec.providers`.
        models_in_use: `<provider>.<model>` references of its agents and its default model.
        key: The key of a provider (by name and spec), None when unset.
        local: For `pallas run` (messages name the variable to export, not the Secret).
        openai_base_url: `pallas run`'s `$OPENAI_BASE_URL`, for openai providers without one.
    """
    used: dict[str, set[str]] = {}
    for model_ref in models_in_use:
        provider, _, model = model_ref.partition(".")
        if model:
            used.setdefault(provider, set()).add(model)
    targets = []
    for name, spec in sorted(providers.items()):
        base_url = spec.base_url
        if base_url is None and spec.type == "openai" and openai_base_url:
            base_url = openai_base_url
        ref = spec.api_key.secret_key_ref if spec.api_key is not None else None
        targets.append(
            ProviderTarget(
                deployment,
                ProviderEndpoint(
                    name=name,
                    type=spec.type,
                    base_url=base_url,
                    models=tuple(sorted(used.get(name, ()))),
                    key_source=secret_source(ref, local=local) if ref is not None else None,
                    key=key(name, spec) if ref is not None else None,
                    region=spec.region if spec.platform != "direct" or spec.type == "bedrock" else None,
                ),
            )
        )
    return targets


@dataclass(frozen=True, slots=True)
class ProviderResult:
    """What the last check of one target found."""

    target: ProviderTarget
    ok: bool
    message: str
    checked_at: datetime
    at: float
    """time.monotonic() of the check, for rechecks."""

    def report(self) -> dict[str, Any]:
        """The `/healthz` entry (a `pallas_api.status.ProviderStatus`, plus its deployment)."""
        return {
            "deployment": self.target.deployment,
            "name": self.target.endpoint.name,
            "type": self.target.endpoint.type,
            "status": "ok" if self.ok else "error",
            "message": self.message,
            "checkedAt": self.checked_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "models": list(self.target.endpoint.models),
        }


Targets = Callable[[], Sequence[ProviderTarget]]


class ProviderChecks:
    """Keeps a check result for each current target; `run()` checks what is due, every second."""

    def __init__(
        self,
        targets: Targets,
        *,
        recheck_ok: float = 300.0,
        recheck_failed: float = 60.0,
        timeout: float = CHECK_TIMEOUT,
        tick: float = 1.0,
    ) -> None:
        """Configure; nothing is checked before `run()` (or `check_due()`).

        Args:
            targets: What to check now (read every `tick` seconds, so a change is seen at once).
            recheck_ok: Seconds before a passed check is repeated.
            recheck_failed: Seconds before a failed check is repeated.
            timeout: Budget of one provider's check.
            tick: Seconds between looks at the targets.
        """
        self._targets = targets
        self._recheck_ok = recheck_ok
        self._recheck_failed = recheck_failed
        self._timeout = timeout
        self._tick = tick
        self._results: dict[tuple[str, str], ProviderResult] = {}

    @property
    def results(self) -> list[ProviderResult]:
        """The last result of every current target, by deployment and name."""
        return [self._results[key] for key in sorted(self._results)]

    def health(self) -> dict[str, Any]:
        """`/healthz`'s body: `degraded` when a check failed, with every provider's last result."""
        results = self.results
        status = "ok" if all(r.ok for r in results) else "degraded"
        return {"status": status, "providers": [r.report() for r in results]}

    def _due(self, target: ProviderTarget, now: float) -> bool:
        last = self._results.get(target.ident)
        if last is None or last.target != target:
            return True
        return now - last.at >= (self._recheck_ok if last.ok else self._recheck_failed)

    async def check_due(self, client: httpx2.AsyncClient) -> None:
        """Check every target that is new, changed or due; forget those that are gone."""
        targets = {t.ident: t for t in self._targets()}
        for key in set(self._results) - set(targets):
            del self._results[key]
        now = time.monotonic()
        due = [t for t in targets.values() if self._due(t, now)]
        found = await asyncio.gather(
            *(check_provider(t.endpoint, time_limit=self._timeout, client=client) for t in due)
        )
        for target, (ok, message) in zip(due, found, strict=True):
            before = self._results.get(target.ident)
            if not ok and (before is None or before.message != message):
                # Warn-only, as the original preflight: agents serve whatever a check says.
                log.warning("LLM provider check failed: %s", message, extra={"deployment": target.deployment})
            self._results[target.ident] = ProviderResult(target, ok, message, utcnow(), time.monotonic())

    async def run(self) -> None:
        """Check what is due every `tick` seconds until cancelled."""
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(self._timeout)) as client:
            while True:
                try:
                    await self.check_due(client)
                except Exception:  # a bug here must not stop the catalogue; try again next tick
                    log.exception("registry: checking LLM providers failed")
                await asyncio.sleep(self._tick)
