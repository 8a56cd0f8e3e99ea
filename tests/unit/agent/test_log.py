"""JSON logs with the seed's level knobs; bearers and secret values never reach a line."""

from __future__ import annotations

import io
import json
import logging

import pytest

from pallas_api.logs import setup_logging


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_with_levels_and_extras(restore_logging: None) -> None:
    stream = io.StringIO()
    setup_logging({"PALLAS_LOG_LEVEL": "DEBUG"}, stream=stream)
    logging.getLogger("pallas.test").debug("hello %s", "world", extra={"agent": "a1"})
    logging.getLogger("somelib").debug("not shown: root stays at INFO")
    logging.getLogger("httpx2").info("not shown: quiet library")
    [entry] = lines(stream)
    assert entry["message"] == "hello world"
    assert (entry["level"], entry["logger"], entry["agent"]) == ("DEBUG", "pallas.test", "a1")


def test_secrets_and_bearers_are_redacted(restore_logging: None) -> None:
    stream = io.StringIO()
    setup_logging({"MY_KEY": "sk-very-secret-value"}, secret_env=["MY_KEY"], stream=stream)
    log = logging.getLogger("pallas.test")
    log.warning("calling with Authorization: Bearer eyJhbGciOi.payload.sig and key sk-very-secret-value")
    try:
        raise RuntimeError("upstream said: bad key sk-very-secret-value")
    except RuntimeError:
        log.exception("failed")
    text = stream.getvalue()
    assert "eyJhbGciOi" not in text
    assert "sk-very-secret-value" not in text
    assert "Bearer [redacted]" in text
    assert "RuntimeError: upstream said: bad key [redacted]" in lines(stream)[1]["message"]


def test_a_bad_level_is_a_clear_error(restore_logging: None) -> None:
    with pytest.raises(ValueError, match="log level 'loud' is not one of"):
        setup_logging({"PALLAS_LOG_LEVEL": "loud"})
