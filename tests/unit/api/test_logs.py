"""One logging setup: the seed's knobs, JSON or console lines, fields, and no secret on any line."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from pallas_io.logs import (
    PALLAS_LOGGERS,
    QUIET_LOGGERS,
    UVICORN_LOGGERS,
    LogSettings,
    Redactor,
    fields_context,
    log_fields,
    log_format,
    setup_logging,
)


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as stderr on a pty does."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    names = [*PALLAS_LOGGERS, *QUIET_LOGGERS, *UVICORN_LOGGERS, "fastmcp"]
    saved = (list(root.handlers), root.level, {n: logging.getLogger(n).level for n in names})
    yield
    for handler in root.handlers:
        if handler not in saved[0]:
            handler.close()
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    for name, level in saved[2].items():
        logging.getLogger(name).setLevel(level)


def lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def emit_samples() -> None:
    logging.getLogger("pallas.test").debug("pallas debug")
    logging.getLogger("pallas.test").info("pallas info")
    logging.getLogger("somelib").debug("lib debug")
    logging.getLogger("somelib").info("lib info")
    logging.getLogger("httpx2").info("quiet lib info")
    logging.getLogger("uvicorn.error").info("Started server process [1]")
    logging.getLogger("uvicorn.access").info('127.0.0.1:5 - "POST /mcp HTTP/1.1" 200')


def shown(environ: dict[str, str]) -> list[str]:
    stream = io.StringIO()
    setup_logging(environ, stream=stream)
    emit_samples()
    return [str(entry["message"]) for entry in lines(stream.getvalue())]


def test_json_lines_with_levels_and_extras() -> None:
    stream = io.StringIO()
    setup_logging({"PALLAS_LOG_LEVEL": "DEBUG"}, stream=stream)
    logging.getLogger("pallas.test").debug("hello %s", "world", extra={"server": "s1"})
    [entry] = lines(stream.getvalue())
    assert entry["message"] == "hello world"
    assert (entry["level"], entry["logger"], entry["server"]) == ("DEBUG", "pallas.test", "s1")
    assert str(entry["time"]).endswith("+00:00")


def test_default_levels_info_for_pallas_and_the_rest_quiet_libraries_and_uvicorn_at_warning() -> None:
    assert shown({}) == ["pallas info", "lib info"]


def test_pallas_log_level_moves_pallas_loggers_and_root_stays_at_least_info() -> None:
    assert shown({"PALLAS_LOG_LEVEL": "debug"}) == ["pallas debug", "pallas info", "lib info"]
    # The root level defaults to the higher of PALLAS_LOG_LEVEL and INFO.
    assert shown({"PALLAS_LOG_LEVEL": "WARNING"}) == []


def test_root_log_level_reaches_other_libraries_and_uvicorn_but_not_the_quiet_ones() -> None:
    assert shown({"PALLAS_ROOT_LOG_LEVEL": "DEBUG"}) == [
        "pallas info",
        "lib debug",
        "lib info",
        "Started server process [1]",
        '127.0.0.1:5 - "POST /mcp HTTP/1.1" 200',
    ]
    assert shown({"PALLAS_ROOT_LOG_LEVEL": "ERROR"}) == ["pallas info"]


def test_log_file_gets_the_same_json_lines_as_stderr(tmp_path: Path) -> None:
    stream, path = io.StringIO(), tmp_path / "logs" / "pallas.log"
    setup_logging({"PALLAS_LOG_FILE": str(path)}, stream=stream)
    logging.getLogger("pallas.test").info("to both")
    assert [e["message"] for e in lines(path.read_text())] == ["to both"]
    assert [e["message"] for e in lines(stream.getvalue())] == ["to both"]


def test_log_file_is_json_even_when_stderr_is_a_terminal(tmp_path: Path) -> None:
    path = tmp_path / "pallas.log"
    setup_logging({"PALLAS_LOG_FILE": str(path)}, stream=Terminal())
    logging.getLogger("pallas.test").info("filed")
    assert [e["message"] for e in lines(path.read_text())] == ["filed"]


@pytest.mark.parametrize("off", ["0", "false", "OFF", "no"])
def test_stderr_off_writes_only_the_file(tmp_path: Path, off: str) -> None:
    stream, path = io.StringIO(), tmp_path / "pallas.log"
    setup_logging({"PALLAS_LOG_STDERR": off, "PALLAS_LOG_FILE": str(path)}, stream=stream)
    logging.getLogger("pallas.test").warning("only in the file")
    assert stream.getvalue() == ""
    assert [e["message"] for e in lines(path.read_text())] == ["only in the file"]


def test_stderr_off_without_a_file_writes_the_originals_state_file(tmp_path: Path) -> None:
    stream = io.StringIO()
    setup_logging({"PALLAS_LOG_STDERR": "0", "XDG_STATE_HOME": str(tmp_path)}, stream=stream)
    logging.getLogger("pallas.test").info("kept")
    assert stream.getvalue() == ""
    assert [e["message"] for e in lines((tmp_path / "pallas" / "pallas.log").read_text())] == ["kept"]


def test_the_state_file_is_on_by_default_where_asked_and_off_when_told(tmp_path: Path) -> None:
    """`pallas run` (file_by_default) writes the original's rotating file beside stderr."""
    stream, state = io.StringIO(), {"XDG_STATE_HOME": str(tmp_path)}
    setup_logging(state, stream=stream, file_by_default=True)
    logging.getLogger("pallas.test").info("both")
    assert [e["message"] for e in lines((tmp_path / "pallas" / "pallas.log").read_text())] == ["both"]
    assert [e["message"] for e in lines(stream.getvalue())] == ["both"]
    assert LogSettings.from_env({**state, "PALLAS_LOG_FILE": "off"}, file_by_default=True).file is None
    assert LogSettings.from_env(state).file is None  # a pod: stderr only


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"PALLAS_LOG_LEVEL": "loud"}, "PALLAS_LOG_LEVEL 'loud' is not one of DEBUG, INFO, WARNING"),
        ({"PALLAS_ROOT_LOG_LEVEL": "all"}, "PALLAS_ROOT_LOG_LEVEL 'all' is not one of DEBUG"),
        ({"PALLAS_LOG_STDERR": "maybe"}, "PALLAS_LOG_STDERR 'maybe' is not one of 1, true"),
        ({"PALLAS_LOG_FORMAT": "xml"}, "PALLAS_LOG_FORMAT 'xml' is not one of auto, json, console"),
    ],
)
def test_a_bad_knob_is_a_clear_error_naming_it(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        setup_logging(environ, stream=io.StringIO())


def test_an_unwritable_log_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="PALLAS_LOG_FILE: cannot write"):
        setup_logging({"PALLAS_LOG_FILE": str(tmp_path / "file" / "pallas.log")}, stream=io.StringIO())


@pytest.mark.parametrize(
    ("environ", "terminal", "expected"),
    [
        ({}, False, "json"),
        ({}, True, "console"),
        ({"PALLAS_LOG_FORMAT": "auto"}, True, "console"),
        ({"PALLAS_LOG_FORMAT": "json"}, True, "json"),
        ({"PALLAS_LOG_FORMAT": "console"}, False, "console"),
        ({"PALLAS_LOG_FORMAT": "xml"}, True, "json"),
    ],
)
def test_format_follows_the_terminal_unless_forced(
    environ: dict[str, str], terminal: bool, expected: str
) -> None:
    assert log_format(environ, Terminal() if terminal else io.StringIO()) == expected


def test_console_lines_are_aligned_text_with_the_agent_and_no_json() -> None:
    stream = io.StringIO()  # not a terminal: rich leaves the colours out
    setup_logging({"PALLAS_LOG_FORMAT": "console"}, stream=stream)
    with log_fields(agent="researcher"):
        logging.getLogger("pallas.test").warning("provider down")
    logging.getLogger("pallas.test").info("[bold]not markup[/bold]")
    first, second = stream.getvalue().splitlines()[:2]
    assert "{" not in stream.getvalue()
    assert "WARNING" in first
    assert first.index("researcher provider down") == second.index("[bold]not markup[/bold]")


def test_secrets_and_bearers_are_redacted_in_both_formats() -> None:
    for environ in ({"PALLAS_LOG_FORMAT": "json"}, {"PALLAS_LOG_FORMAT": "console"}):
        stream = io.StringIO()
        setup_logging({**environ, "MY_KEY": "sk-very-secret-value"}, secret_env=["MY_KEY"], stream=stream)
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
        assert "RuntimeError: upstream said: bad key [redacted]" in text


def test_records_carry_the_process_fields_and_the_context_fields() -> None:
    stream = io.StringIO()
    environ = {"PALLAS_NAMESPACE": "agents", "PALLAS_DEPLOYMENT": "ouranos"}
    setup_logging(environ, stream=stream, fields={"agent": "research"})
    log = logging.getLogger("pallas.test")
    log.info("process")
    with log_fields(agent="other"):
        log.info("bound")
        log.info("explicit", extra={"agent": "given"})
    entries = lines(stream.getvalue())
    assert [(e["agent"], e["deployment"], e["namespace"]) for e in entries] == [
        ("research", "ouranos", "agents"),
        ("other", "ouranos", "agents"),
        ("given", "ouranos", "agents"),
    ]


async def test_tasks_started_in_a_fields_context_carry_its_fields() -> None:
    stream = io.StringIO()
    setup_logging({}, stream=stream)

    async def serve() -> None:
        async def request() -> None:
            logging.getLogger("pallas.test").info("inside")

        await asyncio.create_task(request())  # a task started by the served one inherits them

    await asyncio.create_task(serve(), context=fields_context(agent="worker"))
    logging.getLogger("pallas.test").info("outside")
    inside, outside = lines(stream.getvalue())
    assert inside["agent"] == "worker"
    assert "agent" not in outside


def test_kopf_object_references_become_fields() -> None:
    stream = io.StringIO()
    setup_logging({}, stream=stream)
    ref = {"apiVersion": "pallas.dev/v1alpha1", "kind": "PallasAgent", "name": "a1", "namespace": "ns"}
    logging.getLogger("pallas.objects").warning(  # kopf.objects has a poster of its own
        "handler failed", extra={"k8s_ref": ref, "k8s_skip": False, "settings": object()}
    )
    [entry] = lines(stream.getvalue())
    assert (entry["agent"], entry["namespace"]) == ("a1", "ns")
    assert not {"k8s_ref", "k8s_skip", "settings"} & set(entry)


def test_console_lines_of_a_one_agent_process_do_not_repeat_its_name() -> None:
    stream = io.StringIO()
    setup_logging({"PALLAS_LOG_FORMAT": "console"}, stream=stream, fields={"agent": "solo"})
    logging.getLogger("pallas.test").info("serving")
    with log_fields(agent="peer"):
        logging.getLogger("pallas.test").info("about another agent")
    first, second = stream.getvalue().splitlines()
    assert "solo" not in first
    assert "peer about another agent" in second


def test_credentials_are_redacted_in_any_position() -> None:
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"
    redact = Redactor().redact
    cases = [
        (f"POST /mcp?authorization=Bearer%20{jwt} HTTP/1.1", "POST /mcp?authorization=[redacted] HTTP/1.1"),
        (
            "GET /v0.1/servers?limit=30&cursor=MTpy&flag",
            "GET /v0.1/servers?limit=[redacted]&cursor=[redacted]&[redacted]",
        ),
        (f"POST /healthz/abc{jwt} HTTP/1.1", "POST /healthz/abc[redacted-jwt] HTTP/1.1"),
        (f"cut short: {jwt[:30]}", "cut short: [redacted-jwt]"),
        ("calling https://bob:s3cret@tools.example/mcp", "calling https://[redacted]@tools.example/mcp"),
        ("header Authorization=Bearer+opaque-value-123", "header Authorization=Bearer [redacted]"),
        ("is it ready? yes", "is it ready? yes"),
    ]
    for text, redacted in cases:
        assert redact(text) == redacted


def test_a_redactor_told_a_rotated_value_redacts_the_new_and_the_old() -> None:
    redactor = Redactor(["sk-first-value"])
    redactor.add(["sk-second-value", "sk-first-value"])
    assert redactor.redact("sk-first-value then sk-second-value") == "[redacted] then [redacted]"
