"""`pallas.forward.trace`: full tracebacks of downstream failures, at DEBUG only (seed 000 §5)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from pallas_io.logs import PALLAS_LOGGERS, setup_logging
from pallas_runtime.downstream.failures import trace_failure


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, {n: logging.getLogger(n).level for n in PALLAS_LOGGERS})
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    for name, level in saved[2].items():
        logging.getLogger(name).setLevel(level)


def traced(level: str) -> list[dict[str, object]]:
    stream = io.StringIO()
    setup_logging({"PALLAS_LOG_LEVEL": level, "PALLAS_LOG_FORMAT": "json"}, stream=stream)
    try:
        raise ConnectionResetError("peer reset the stream with Bearer eyJhbGciOi.abcdef.ghijk")
    except ConnectionResetError as exc:
        trace_failure("argos", "calling search", exc)
    trace_failure("argos", "calling search (timed out after 30s)")
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_failures_are_kept_with_their_traceback_at_debug() -> None:
    failed, timed_out = traced("DEBUG")
    assert (failed["logger"], failed["level"], failed["server"]) == ("pallas.forward.trace", "DEBUG", "argos")
    message = str(failed["message"])
    assert message.startswith("argos: calling search failed\nTraceback (most recent call last):")
    assert "ConnectionResetError: peer reset the stream with Bearer [redacted]" in message
    assert timed_out["message"] == "argos: calling search (timed out after 30s) failed"


def test_the_trace_is_silent_above_debug() -> None:
    assert traced("INFO") == []
