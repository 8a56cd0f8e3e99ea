"""The one exponential backoff of every Pallas program: the pause before the next retry.

The operator's work queue, the stdio supervisor, the registry's reflector, the conversation
lease and `pallas chat`'s reconnects all wait `first`, then twice that, and so on up to a cap.
They keep their own attempt counter (and reset it when things are well again); this computes
the pause from it, so the arithmetic is written once. Pure: no clock, no sleep, no randomness.

Some retries keep a table instead (`downstream.remote.LEAST_RETRY_PAUSES`,
`engine.prober.RETRY_UNVERIFIED`): there the steps are a policy of their own, not a doubling.
"""

from __future__ import annotations

__all__ = ["backoff"]


def backoff(attempt: int, *, first: float, cap: float, factor: float = 2.0) -> float:
    """The pause before retry number `attempt`: `first · factor**attempt`, never above `cap`.

    Args:
        attempt: How many pauses came before this one since the last success (0 for the first).
        first: The first pause, in seconds.
        cap: The longest pause, in seconds.
        factor: How much longer each pause is than the one before.

    Returns:
        The pause in seconds. Doubling a float is exact, so the values equal those of a
        `delay = min(delay * 2, cap)` loop.

    Raises:
        ValueError: A negative `attempt`.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be 0 or more, not {attempt}")
    try:
        return min(cap, first * factor**attempt)
    except OverflowError:  # after ~1,000 failures the power has no float; the cap was long reached
        return cap
