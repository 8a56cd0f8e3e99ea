"""Readiness of the operator: every object that existed at start-up is recorded (engine.startup)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable

import pytest

from pallas_operator.engine.indexes import ObjectKey
from pallas_operator.engine.startup import StartupTracker
from pallas_operator.metrics import OperatorMetrics
from tests.support.operator import total


class FakeTime:
    """A clock that moves only when the tracker sleeps; `meanwhile` runs at each wake-up."""

    def __init__(self) -> None:
        self.now = 0.0
        self.meanwhile: Callable[[], None] = lambda: None

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.meanwhile()


def tracker(
    stall_after: float = 30.0,
) -> tuple[StartupTracker, threading.Event, OperatorMetrics, FakeTime, list[str]]:
    metrics, ready, time_, started = OperatorMetrics(), threading.Event(), FakeTime(), []
    startup = StartupTracker(
        metrics, ready, stall_after, time_.clock, time_.sleep, on_ready=lambda: started.append("queue")
    )
    return startup, ready, metrics, time_, started


def secret(n: int) -> ObjectKey:
    return ("Secret", "ns", f"s{n}")


def listing_of(*keys: ObjectKey) -> Callable[[], Awaitable[set[ObjectKey]]]:
    async def listing() -> set[ObjectKey]:
        return set(keys)

    return listing


async def test_ready_only_once_every_listed_object_is_recorded_then_the_queue_starts() -> None:
    startup, ready, metrics, time_, started = tracker()
    existing = [secret(n) for n in range(40)]
    for key in existing[:10]:  # the watches may be faster than the listing
        startup.indexed(key)

    def recorded_later() -> None:
        for key in existing[10:39]:
            startup.indexed(key)
        assert not ready.is_set(), "ready with an object still to come"
        assert not started
        startup.indexed(existing[39])

    time_.meanwhile = recorded_later
    await startup.watch(listing_of(*existing))
    assert ready.is_set()
    assert started == ["queue"]
    assert total(metrics, "pallas_operator_ready") == 1
    assert total(metrics, "pallas_operator_watch_events_total") == 40
    startup.indexed(secret(41))  # later events change nothing
    assert started == ["queue"]


async def test_an_empty_world_is_ready_at_once() -> None:
    startup, ready, _, _, started = tracker()
    await startup.watch(listing_of())
    assert ready.is_set()
    assert started == ["queue"]


async def test_an_object_deleted_before_the_watch_saw_it_is_not_waited_for() -> None:
    startup, ready, _, _, _ = tracker()
    listings = iter([{secret(1), secret(2)}, {secret(1)}])  # s2 went before the watch listed it

    async def listing() -> set[ObjectKey]:
        return next(listings)

    startup.indexed(secret(1))
    await startup.watch(listing)
    assert ready.is_set()


async def test_a_slow_start_up_is_logged_every_stall_period(caplog: pytest.LogCaptureFixture) -> None:
    startup, ready, _, time_, _ = tracker(stall_after=10)
    existing = [("PallasAgent", "ns", f"a{n}") for n in range(34)]
    for key in existing[:33]:
        startup.indexed(key)

    def last_after_25s() -> None:
        if time_.now >= 25:
            startup.indexed(existing[33])

    time_.meanwhile = last_after_25s
    with caplog.at_level(logging.WARNING, logger="pallas_operator.engine.startup"):
        await startup.watch(listing_of(*existing))
    stalls = [r.getMessage() for r in caplog.records if "has not finished" in r.getMessage()]
    assert len(stalls) == 2, stalls
    assert "33 objects recorded, 1 still to come, e.g. PallasAgent/ns/a33" in stalls[0]
    assert ready.is_set()


async def test_an_unreachable_api_server_is_retried_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    startup, ready, _, _, _ = tracker()
    looks = 0

    async def flaky() -> set[ObjectKey]:
        nonlocal looks
        looks += 1
        if looks == 1:
            raise ConnectionError("connection refused")
        return set()

    with caplog.at_level(logging.WARNING):
        await startup.watch(flaky)
    assert ready.is_set()
    assert "connection refused" in caplog.text


async def test_the_start_up_steps_run_once_the_world_is_whole_and_before_the_queue_starts() -> None:
    startup, ready, _, _, started = tracker()
    seen_by_step: list[tuple[bool, list[str]]] = []

    async def sweep() -> None:
        seen_by_step.append((ready.is_set(), list(started)))

    startup.indexed(secret(1))
    startup.indexed(secret(2))
    await startup.watch(listing_of(secret(1), secret(2)), before_ready=sweep)
    assert seen_by_step == [(False, [])], "the step ran before ready and before the queue started"
    assert ready.is_set()
    assert started == ["queue"]


async def test_the_last_object_recorded_ends_the_wait_between_listings() -> None:
    listed = asyncio.Event()

    async def listing() -> set[ObjectKey]:
        listed.set()
        return {secret(1)}

    async def never(seconds: float) -> None:  # the next listing would be too late for this test
        await asyncio.Event().wait()

    ready = threading.Event()
    startup = StartupTracker(OperatorMetrics(), ready, sleep=never)
    watching = asyncio.create_task(startup.watch(listing))
    await listed.wait()
    assert not ready.is_set()
    startup.indexed(secret(1))
    await asyncio.wait_for(watching, 5)
    assert ready.is_set()


async def test_the_kinds_are_listed_again_only_when_no_object_came_since_the_last_listing() -> None:
    startup, ready, _, time_, _ = tracker()
    existing = [secret(n) for n in range(4)]
    listings: list[float] = []

    async def listing() -> set[ObjectKey]:
        listings.append(time_.now)
        return set(existing) - ({secret(3)} if len(listings) > 2 else set())  # s3 goes after two looks

    arrivals = iter([[secret(0)], [secret(1)], [], [secret(2)], [], []])

    def meanwhile() -> None:  # every pause: the watches deliver what comes next, or nothing
        for key in next(arrivals, []):
            startup.indexed(key)

    time_.meanwhile = meanwhile
    await startup.watch(listing)
    assert ready.is_set()
    # Listed at the start; not while s0 and s1 came; again after a pause with nothing new; not
    # while s2 came; again after the next empty pause, which no longer lists s3.
    assert listings == [0.0, 15.0, 25.0]
