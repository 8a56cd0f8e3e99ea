"""The get_health report: one model for the agent that writes it and the readers that parse it."""

from __future__ import annotations

import json

import pytest

from pallas_api.health import MAX_MESSAGE, HealthReport, HealthReportError


def test_a_report_round_trips_and_leaves_out_an_absent_message() -> None:
    ok = HealthReport.now("ok")
    assert set(json.loads(ok.to_json())) == {"status", "timestamp"}
    assert HealthReport.parse(ok.to_json()) == ok
    assert ok.checked_at is not None
    degraded = HealthReport.now("degraded", "Unreachable: argos (HTTP 503)")
    assert HealthReport.parse(degraded.to_json()).message == "Unreachable: argos (HTTP 503)"


def test_load_is_reported_only_with_a_threshold_and_never_changes_the_status() -> None:
    assert "busy" not in HealthReport.now("ok", in_flight=3).to_json()
    busy = HealthReport.now("ok", in_flight=3, busy_at=3)
    assert json.loads(busy.to_json())["busy"] is True
    assert json.loads(busy.to_json())["inFlight"] == 3
    assert busy.status == "ok"
    assert HealthReport.parse(busy.to_json()) == busy
    assert HealthReport.now("degraded", "x", in_flight=2, busy_at=3).busy is False


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("not json", "the answer"),
        ("[]", "the answer"),
        ('{"status": "fine", "timestamp": "t"}', "status"),
        ('{"timestamp": "t"}', "status"),
        ('{"status": "ok"}', "timestamp"),
        ('{"status": "degraded", "timestamp": "t"}', "message"),
    ],
)
def test_anything_else_is_refused_naming_what_is_wrong(text: str, names: str) -> None:
    with pytest.raises(HealthReportError, match="get_health did not return a health report") as caught:
        HealthReport.parse(text)
    assert names in str(caught.value)


def test_a_reader_keeps_a_bounded_message_and_an_unreadable_time_is_none() -> None:
    text = json.dumps({"status": "error", "timestamp": "soon", "message": "x" * 10_000})
    report = HealthReport.parse(text)
    assert len(report.message or "") == MAX_MESSAGE
    assert report.checked_at is None
