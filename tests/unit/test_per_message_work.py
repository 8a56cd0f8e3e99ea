"""Per-message work the agent skips once it is set up (the agent bench's CPU per message).

A loaded provider's model call is the adapter's own coroutine, and a metric series made before
is returned without prometheus_client's checks and lock; both answer as before.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any, cast

import pytest

from pallas_api.config import AgentConfig
from pallas_runtime.llm.deferred import DeferredProvider
from pallas_runtime.llm.provider import LLMProvider
from pallas_runtime.metrics import RuntimeMetrics


class _Adapter:
    """Stands in for a built provider adapter: answers `complete` with what it was asked."""

    async def complete(self, **call: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        return call


def _deferred() -> DeferredProvider:
    config = cast(AgentConfig, SimpleNamespace(provider=SimpleNamespace(name="p"), model="m"))
    return DeferredProvider(config, "json", lambda: cast(LLMProvider, _Adapter()))


async def test_a_model_call_before_the_load_waits_for_it_and_answers() -> None:
    provider = _deferred()
    assert cast(object, await provider.complete(system="s")) == {"system": "s"}


async def test_a_loaded_providers_model_call_is_the_adapters_own_coroutine() -> None:
    provider = _deferred()
    await provider.load()
    call = provider.complete(system="s")
    try:
        assert getattr(call, "cr_code", None) is _Adapter.complete.__code__  # no wrapper frame
    finally:
        assert cast(object, await call) == {"system": "s"}


class _NoLock:
    """A lock that fails when taken: the series was looked up without it."""

    def __enter__(self) -> None:
        raise AssertionError("labels took the lock for a series made before")

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_series_made_before_is_returned_without_the_lock() -> None:
    metrics = RuntimeMetrics(process_collectors=False)
    family = metrics.llm_turns_total
    made = family.labels("agent", "model")
    cast(Any, family)._lock = _NoLock()
    assert family.labels("agent", "model") is made
    cast(Any, family)._lock = threading.Lock()


def test_labels_answers_as_prometheus_client_does() -> None:
    metrics = RuntimeMetrics(process_collectors=False)
    family = metrics.llm_request_duration
    made = family.labels("a", "m", "ok")
    assert family.labels("a", "m", "ok") is made
    assert family.labels(agent="a", model="m", outcome="ok") is made
    counter = metrics.llm_turns_total
    assert counter.labels("a", 5) is counter.labels("a", "5")  # values are strings, as before
    with pytest.raises(ValueError, match="Incorrect label count"):
        family.labels("a", "m")
    with pytest.raises(ValueError, match="can not chain"):
        made.labels("a", "m", "ok")
    with pytest.raises(ValueError, match="No label names"):
        metrics.up.labels("x")
    family.remove("a", "m", "ok")
    assert family.labels("a", "m", "ok") is not made  # a removed series is made anew
