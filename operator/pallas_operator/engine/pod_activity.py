"""Reading a scaled agent's pods: the two gauges the scaling loop decides from, off each `/metrics`.

`pallas_send_message_in_flight` (turns running now) and `pallas_last_turn_timestamp_seconds` (when
the pod last started one; absent before its first) are what each agent process exports
(docs/operator.md "Scaling"). The pods are read one by one at their own IP, not through the
Service: the Service answers for one pod of many. `/metrics` is never behind the agent's auth.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx2
from prometheus_client.parser import text_string_to_metric_families

from pallas_operator.status.scaling import PodReading

IN_FLIGHT = "pallas_send_message_in_flight"
LAST_TURN = "pallas_last_turn_timestamp_seconds"
READ_TIME_LIMIT = 2.0
"""Seconds one pod's `/metrics` may take: a pod slower than that is unknown this round."""

ReadPod = Callable[[str, float], Awaitable[PodReading | None]]
"""(url, time limit) → the pod's reading, or None when it did not answer usably."""


def metrics_url(pod_ip: str, port: int) -> str:
    """The `/metrics` of the agent container at `pod_ip` (an IPv6 address in brackets)."""
    host = f"[{pod_ip}]" if ":" in pod_ip else pod_ip
    return f"http://{host}:{port}/metrics"


def parse_reading(text: str) -> PodReading:
    """The reading in a Prometheus text exposition.

    Raises:
        ValueError: The text is not an exposition, or it lacks the in-flight gauge (not an agent).
    """
    in_flight: float | None = None
    last: float | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == IN_FLIGHT:
                in_flight = (in_flight or 0.0) + sample.value
            elif sample.name == LAST_TURN and sample.value > 0:
                last = sample.value if last is None else max(last, sample.value)
    if in_flight is None:
        raise ValueError(f"no {IN_FLIGHT} in the exposition")
    return PodReading(int(in_flight), last)


async def read_pod(url: str, time_limit: float) -> PodReading | None:
    """GET one pod's `/metrics` and read it; None when it fails in any way (never raises)."""
    try:
        async with asyncio.timeout(time_limit), httpx2.AsyncClient(timeout=time_limit) as client:
            response = await client.get(url, headers={"accept": "text/plain"})
        if response.status_code != 200:
            return None
        return parse_reading(response.text)
    except (httpx2.HTTPError, TimeoutError, ValueError):
        return None
