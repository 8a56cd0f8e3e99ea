"""Checks of every LLM provider of a deployment, run by its registry (seed 000, "Startup Preflight").

The original validated all providers with a key before the agents started, warn-only:

| provider  | active (an agent uses it)                   | key set, not active             |
|-----------|---------------------------------------------|---------------------------------|
| openai    | `GET {base}/models` lists each model in use | `GET {base}/models` answers      |
| anthropic | `GET /v1/models/{model}` for each model     | `GET /v1/models?limit=1` answers |

(The original asked a fixed `claude-sonnet-4-5` for an inactive Anthropic key; listing one model
proves the key the same way without betting on a model name.) Each agent already checks its own
provider; a provider no agent uses has no process holding its key but this one: the registry
runs once per deployment and its pod gets every provider key (`optional` Secret references), so
the operator never holds a key. Results are published on `/healthz`, in
`pallas_registry_provider_up`, and from there in the deployment's `status.providers`.

A check never raises and never calls a model: a failure is a result, with the provider's own
words and no key in them. A provider is checked again when what is checked changes (its
endpoint, key or models in use), else every `recheck_ok` seconds (300, the agents' TTL), or
`recheck_failed` (60) after a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx2

from pallas_api.render import secret_source
from pallas_api.spec import ProviderSpec
from pallas_runtime.registry.state import utcnow

log = logging.getLogger("pallas.registry")

PUBLIC_APIS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
ANTHROPIC_VERSION = "2023-06-01"
CHECK_TIMEOUT = 5.0
"""Seconds per provider, as the original."""
MAX_MESSAGE = 300


@dataclass(frozen=True, slots=True)
class ProviderTarget:
    """One provider to check, and everything the check depends on (a change means a recheck)."""

    deployment: str
    name: str
    type: str
    base_url: str | None = None
    models: tuple[str, ...] = ()
    """Models the deployment's agents (and its default) use on it; empty: key set, not active."""
    key_source: str | None = None
    """Where the key comes from in the user's words; None: the provider has no `apiKey`."""
    key: str | None = field(default=None, repr=False)
    """The key's value (None: not configured, or its Secret key is not set)."""

    @property
    def label(self) -> str:
        """How messages name it: `openai provider 'vllm'`."""
        return f"{self.type} provider '{self.name}'"

    @property
    def base(self) -> str:
        """The endpoint: `baseURL`, else the vendor's public API."""
        return (self.base_url or PUBLIC_APIS.get(self.type, PUBLIC_APIS["openai"])).rstrip("/")


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
                deployment=deployment,
                name=name,
                type=spec.type,
                base_url=base_url,
                models=tuple(sorted(used.get(name, ()))),
                key_source=secret_source(ref, local=local) if ref is not None else None,
                key=key(name, spec) if ref is not None else None,
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
            "name": self.target.name,
            "type": self.target.type,
            "status": "ok" if self.ok else "error",
            "message": self.message,
            "checkedAt": self.checked_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "models": list(self.target.models),
        }


def _detail(response: httpx2.Response) -> str:
    """The provider's own error message: `{"error": {"message"}}` or `{"message"}`, else the status."""
    with contextlib.suppress(ValueError):
        body = response.json()
        inner = body.get("error", body) if isinstance(body, dict) else None
        message = inner.get("message") if isinstance(inner, dict) else inner
        if isinstance(message, str) and message:
            return message
    return response.reason_phrase or "error"


async def _get(client: httpx2.AsyncClient, target: ProviderTarget, path: str) -> httpx2.Response:
    headers = {}
    if target.type == "anthropic":
        headers["anthropic-version"] = ANTHROPIC_VERSION
        if target.key:
            headers["x-api-key"] = target.key
    elif target.key:
        headers["Authorization"] = f"Bearer {target.key}"
    return await client.get(target.base + path, headers=headers)


async def _openai(client: httpx2.AsyncClient, target: ProviderTarget) -> tuple[bool, str]:
    url = f"{target.base}/models"
    response = await _get(client, target, "/models")
    if response.status_code != 200:
        return False, f"GET {url}: HTTP {response.status_code}: {_detail(response)}"
    try:
        listed = {str(m.get("id")) for m in response.json().get("data", []) if isinstance(m, dict)}
    except (ValueError, AttributeError):
        return False, f"GET {url}: the answer is not a model list"
    missing = [m for m in target.models if m not in listed]
    if missing:
        return False, f"model {', '.join(repr(m) for m in missing)} not found at {url}"
    if target.models:
        return True, f"model {', '.join(repr(m) for m in target.models)} available"
    return True, f"not used by any agent; {url} lists {len(listed)} models"


async def _anthropic(client: httpx2.AsyncClient, target: ProviderTarget) -> tuple[bool, str]:
    if not target.models:
        response = await _get(client, target, "/v1/models?limit=1")
        if response.status_code != 200:
            return False, f"GET {target.base}/v1/models: HTTP {response.status_code}: {_detail(response)}"
        return True, f"not used by any agent; {target.base}/v1/models answers"
    for model in target.models:
        url = f"{target.base}/v1/models/{model}"
        response = await _get(client, target, f"/v1/models/{model}")
        if response.status_code == 404:
            return False, f"model '{model}' not found at {url}"
        if response.status_code != 200:
            return False, f"GET {url}: HTTP {response.status_code}: {_detail(response)}"
    return True, f"model {', '.join(repr(m) for m in target.models)} available"


async def check_provider(
    target: ProviderTarget, client: httpx2.AsyncClient, budget: float = CHECK_TIMEOUT
) -> tuple[bool, str]:
    """(ok, message) for one provider within `budget` seconds; never raises, never sends a completion."""
    if target.key_source is not None and target.key is None:
        return False, f"{target.label}: no API key: {target.key_source} is not set"
    try:
        async with asyncio.timeout(budget):
            ok, text = await (_anthropic if target.type == "anthropic" else _openai)(client, target)
    except TimeoutError:
        ok, text = False, f"no answer from {target.base} within {budget:g}s"
    except httpx2.HTTPError as exc:
        ok, text = False, f"cannot reach {target.base}: {type(exc).__name__}: {exc}"
    message = f"{target.label}: {text}"
    if target.key:
        message = message.replace(target.key, "[redacted]")
    return ok, message[:MAX_MESSAGE]


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

    def _due(self, target: ProviderTarget, now: float) -> bool:
        last = self._results.get((target.deployment, target.name))
        if last is None or last.target != target:
            return True
        return now - last.at >= (self._recheck_ok if last.ok else self._recheck_failed)

    async def check_due(self, client: httpx2.AsyncClient) -> None:
        """Check every target that is new, changed or due; forget those that are gone."""
        targets = {(t.deployment, t.name): t for t in self._targets()}
        for key in set(self._results) - set(targets):
            del self._results[key]
        now = time.monotonic()
        due = [t for t in targets.values() if self._due(t, now)]
        found = await asyncio.gather(*(check_provider(t, client, self._timeout) for t in due))
        for target, (ok, message) in zip(due, found, strict=True):
            key = (target.deployment, target.name)
            before = self._results.get(key)
            if not ok and (before is None or before.message != message):
                # Warn-only, as the original preflight: agents serve whatever a check says.
                log.warning("LLM provider check failed: %s", message, extra={"deployment": target.deployment})
            self._results[key] = ProviderResult(target, ok, message, utcnow(), time.monotonic())

    async def run(self) -> None:
        """Check what is due every `tick` seconds until cancelled."""
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(self._timeout)) as client:
            while True:
                try:
                    await self.check_due(client)
                except Exception:  # a bug here must not stop the catalogue; try again next tick
                    log.exception("registry: checking LLM providers failed")
                await asyncio.sleep(self._tick)
