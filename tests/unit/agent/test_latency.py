"""Recent latencies and the slowness they make `get_health` report (agent/latency.py)."""

from __future__ import annotations

import pytest

from pallas_runtime.agent import latency
from pallas_runtime.agent.latency import LLM, Latencies


def test_too_few_calls_judge_nothing_and_a_slow_part_is_named_with_its_figure() -> None:
    times = Latencies()
    times.record(LLM, 40.0)
    times.record(LLM, 40.0)
    assert times.slow(30, 10) == []  # two calls: not enough to judge
    times.record(LLM, 13.0)
    times.record("neo4j", 12.0)
    (slow,) = times.slow(30, 10)
    assert slow.describe() == "LLM avg 31.0s over 3 calls (over 30s)"
    for _ in range(3):
        times.record("neo4j", 12.0)
    assert [s.describe() for s in times.slow(30, 10)] == [
        "LLM avg 31.0s over 3 calls (over 30s)",
        "neo4j avg 12.0s over 4 calls (over 10s)",
    ]


def test_faster_calls_bring_the_mean_down_and_only_the_last_calls_count() -> None:
    times = Latencies()
    for _ in range(5):
        times.record(LLM, 20.0)
    assert times.slow(10, 10)
    for _ in range(latency.WINDOW_CALLS):
        times.record(LLM, 1.0)
    assert times.slow(10, 10) == []
    assert times.mean(LLM) == (1.0, latency.WINDOW_CALLS)


def test_slow_calls_age_out(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(latency.time, "monotonic", lambda: now[0])
    times = Latencies()
    for _ in range(5):
        times.record("db", 30.0)
    assert times.slow(60, 10)
    now[0] += latency.WINDOW_SECONDS + 1
    assert times.slow(60, 10) == []
