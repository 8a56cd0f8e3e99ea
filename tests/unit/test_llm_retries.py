"""The one retry rule of the adapters that speak HTTP themselves (Gemini, Bedrock's Converse)."""

from __future__ import annotations

from pallas_runtime.llm.retries import LONGEST_PAUSE, RETRIED, retry_pause


def test_pauses_double_from_half_a_second_up_to_the_longest() -> None:
    assert [retry_pause(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, LONGEST_PAUSE]


def test_the_servers_retry_after_wins() -> None:
    assert retry_pause(3, retry_after=1.5) == 1.5
    assert retry_pause(0, retry_after=0.0) == 0.0


def test_only_throttling_and_server_failures_are_retried() -> None:
    assert {429, 503} <= RETRIED
    assert not {400, 401, 403, 404} & RETRIED
