"""When the adapters that speak HTTP themselves (Gemini, Bedrock's Converse) try a request again.

The SDK-backed adapters leave this to their SDK's own retries; these two have no SDK, so they
share one rule instead of each writing its own loop arithmetic.
"""

from __future__ import annotations

from pallas_io.backoff import backoff

RETRIED = frozenset({408, 429, 500, 502, 503, 504})
"""Statuses worth another attempt: throttling and the server's own failures."""
FIRST_PAUSE = 0.5
"""Seconds before the first retry."""
LONGEST_PAUSE = 8.0
"""The pause stops doubling here: a provider that is down for longer is reported, not waited on."""


def retry_pause(attempt: int, retry_after: float | None = None) -> float:
    """Seconds before retry number `attempt` (0 for the first); the `retry-after` sent, if any."""
    if retry_after is not None:
        return retry_after
    return backoff(attempt, first=FIRST_PAUSE, cap=LONGEST_PAUSE)
