"""Readiness of the operator: initial indexing finished and handlers run (handlers.startup)."""

from __future__ import annotations

import logging
import threading

import pytest

from pallas_operator.engine.startup import StartupTracker
from pallas_operator.metrics import OperatorMetrics
from tests.support.operator import total


class FakeTime:
    """A clock that moves only when the tracker sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def tracker(stall_after: float = 30.0) -> tuple[StartupTracker, threading.Event, OperatorMetrics, FakeTime]:
    metrics, ready, time_ = OperatorMetrics(), threading.Event(), FakeTime()
    return StartupTracker(metrics, ready, stall_after, time_.clock, time_.sleep), ready, metrics, time_


def test_indexing_alone_is_not_ready_and_the_first_handled_event_is() -> None:
    startup, ready, metrics, _ = tracker()
    for _ in range(40):
        startup.indexed("Secret")
    assert not ready.is_set()
    assert total(metrics, "pallas_operator_ready") == 0
    startup.handled("Secret")
    assert ready.is_set()
    assert total(metrics, "pallas_operator_ready") == 1
    assert total(metrics, "pallas_operator_watch_events_total") == 41


async def test_an_empty_world_is_ready_without_any_handler() -> None:
    startup, ready, _, _ = tracker()
    looks = 0

    async def empty() -> bool:
        nonlocal looks
        looks += 1
        return looks >= 2  # the first look fails to see the end of the listing race

    await startup.watch(empty)
    assert ready.is_set()
    assert looks == 2


async def test_a_world_with_objects_is_never_called_empty() -> None:
    startup, ready, _, time_ = tracker(stall_after=10)
    startup.indexed("PallasAgent")

    async def empty() -> bool:
        raise AssertionError("an indexed object exists: no emptiness check is due")

    async def handled_later(seconds: float) -> None:
        time_.now += seconds
        if time_.now >= 3:
            startup.handled("PallasAgent")

    startup._sleep = handled_later
    await startup.watch(empty)
    assert ready.is_set()


async def test_a_stalled_start_up_is_logged_every_stall_period(caplog: pytest.LogCaptureFixture) -> None:
    startup, ready, _, time_ = tracker(stall_after=10)
    for _ in range(33):
        startup.indexed("PallasAgent")

    async def stop_after_25s(seconds: float) -> None:
        time_.now += seconds
        if time_.now >= 25:
            startup.handled("PallasAgent")

    startup._sleep = stop_after_25s

    async def never_called() -> bool:
        raise AssertionError

    with caplog.at_level(logging.WARNING, logger="pallas_operator.engine.startup"):
        await startup.watch(never_called)
    stalls = [r.getMessage() for r in caplog.records if "has not finished" in r.getMessage()]
    assert len(stalls) == 2, stalls
    assert "PallasAgent 33" in stalls[0]
    assert ready.is_set()


async def test_an_unreachable_api_server_is_retried_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    startup, ready, _, _ = tracker()
    looks = 0

    async def flaky() -> bool:
        nonlocal looks
        looks += 1
        if looks == 1:
            raise ConnectionError("connection refused")
        return True

    with caplog.at_level(logging.WARNING):
        await startup.watch(flaky)
    assert ready.is_set()
    assert "connection refused" in caplog.text
