"""The one exponential backoff: the same pauses as the doubling loops it replaced."""

from __future__ import annotations

import pytest

from pallas_io.backoff import backoff


def test_doubles_from_first_up_to_the_cap() -> None:
    assert [backoff(n, first=1.0, cap=60.0) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]


def test_equals_a_doubling_loop_exactly() -> None:
    # Callers used `delay = min(delay * 2, cap)`; doubling a float is exact, so no pause drifts.
    delay, expected = 0.01, []
    for _ in range(12):
        expected.append(delay)
        delay = min(delay * 2, 0.5)
    assert [backoff(n, first=0.01, cap=0.5) for n in range(12)] == expected


def test_another_factor() -> None:
    assert [backoff(n, first=1.0, cap=100.0, factor=3.0) for n in range(5)] == [1, 3, 9, 27, 81]


def test_endless_failures_stay_at_the_cap() -> None:
    # Past ~1,000 attempts the power has no float; the cap holds instead of an OverflowError.
    assert backoff(5000, first=0.5, cap=60.0) == 60.0


def test_a_negative_attempt_is_a_mistake() -> None:
    with pytest.raises(ValueError, match="attempt"):
        backoff(-1, first=1.0, cap=2.0)
