"""Schedule triggers: reading schedules, and CronJob's rules for missed times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pallas_api.triggers.schedule import ScheduleError, parse_duration, parse_schedule, plan_runs

T0 = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("1m30s", 90), ("1h", 3600), ("250ms", 0.25), ("1.5s", 1.5)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("cron", "zone", "says"),
    [
        ("* * * *", None, "five fields"),
        ("0 7 * * 1-5 2030", None, "five fields"),
        ("61 * * * *", None, "not a cron expression"),
        ("@every", None, "@every <duration>"),
        ("@every 30x", None, "not a duration"),
        ("@every 500ms", None, "at least 1s"),
        ("0 7 * * *", "Mars/Olympus", "not an IANA time zone"),
        ("@fortnightly", None, "not a cron expression"),
    ],
)
def test_bad_schedules_say_what_is_wrong(cron: str, zone: str | None, says: str) -> None:
    with pytest.raises(ScheduleError, match=says):
        parse_schedule(cron, zone)


def test_every_counts_from_the_anchor() -> None:
    schedule = parse_schedule("@every 30s")
    plan = plan_runs(schedule, last=None, created=T0, now=at(10), deadline_seconds=None)
    assert (plan.due, plan.skipped, plan.next) == (None, 0, at(30))
    plan = plan_runs(schedule, last=None, created=T0, now=at(30), deadline_seconds=None)
    assert (plan.due, plan.skipped, plan.next, plan.handled) == (at(30), 0, at(60), at(30))
    plan = plan_runs(schedule, last=at(30), created=T0, now=at(45), deadline_seconds=None)
    assert (plan.due, plan.next) == (None, at(60))


def test_missed_times_run_the_newest_once_and_count_the_rest() -> None:
    """Last handled 12:00:30, now 12:05:10: nine times passed; the newest runs, eight are skipped."""
    schedule = parse_schedule("@every 30s")
    plan = plan_runs(schedule, last=at(30), created=T0, now=at(310), deadline_seconds=None)
    assert (plan.due, plan.skipped, plan.next, plan.handled) == (at(300), 8, at(330), at(300))


def test_a_missed_time_past_the_deadline_is_skipped_too() -> None:
    schedule = parse_schedule("@every 30s")
    within = plan_runs(schedule, last=at(30), created=T0, now=at(310), deadline_seconds=15)
    assert (within.due, within.skipped) == (at(300), 8)
    past = plan_runs(schedule, last=at(30), created=T0, now=at(310), deadline_seconds=5)
    assert (past.due, past.skipped, past.handled) == (None, 9, at(300))


def test_cron_in_a_time_zone() -> None:
    """07:00 on weekdays in Paris is 06:00 UTC in winter; Saturday and Sunday are passed over."""
    schedule = parse_schedule("0 7 * * 1-5", "Europe/Paris")
    friday_evening = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
    plan = plan_runs(schedule, last=None, created=friday_evening, now=friday_evening, deadline_seconds=None)
    assert plan.next == datetime(2026, 12, 7, 6, 0, tzinfo=UTC)


def test_cron_missed_across_a_restart() -> None:
    """Hourly; the operator was down 03:10 to 06:20: 04, 05 and 06 passed, 06:00 runs."""
    schedule = parse_schedule("@hourly")
    last = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
    now = datetime(2026, 12, 7, 6, 20, tzinfo=UTC)
    plan = plan_runs(schedule, last=last, created=last, now=now, deadline_seconds=None)
    assert (plan.due, plan.skipped, plan.next) == (
        datetime(2026, 12, 7, 6, 0, tzinfo=UTC),
        2,
        datetime(2026, 12, 7, 7, 0, tzinfo=UTC),
    )
    late = plan_runs(schedule, last=last, created=last, now=now, deadline_seconds=600)
    assert (late.due, late.skipped) == (None, 3)


def test_a_long_outage_is_counted_without_walking_every_time() -> None:
    schedule = parse_schedule("* * * * *")
    last = datetime(2026, 1, 1, tzinfo=UTC)
    now = datetime(2026, 12, 7, 12, 0, 30, tzinfo=UTC)
    plan = plan_runs(schedule, last=last, created=last, now=now, deadline_seconds=None)
    assert plan.due == datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    assert plan.next == datetime(2026, 12, 7, 12, 1, tzinfo=UTC)
    assert plan.skipped >= 999  # counted up to MAX_COUNTED, then found without walking
