"""When a schedule trigger runs: cron or `@every`, in a time zone, with CronJob's missed-run rules.

A schedule is `cron` (five fields or a `@hourly`-style macro, read by croniter) or
`@every <duration>` (`30s`, `1m30s`; counted from the trigger's anchor: its last scheduled time,
else its creation). `plan_runs` applies CronJob's rules: of the times missed since the last one
run, only the newest starts, and only within `startingDeadlineSeconds` of it; the others are
skipped and counted, never queued.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, croniter

EVERY = "@every "
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
MIN_INTERVAL = timedelta(seconds=1)
"""The shortest `@every`: a faster schedule is a loop, not a trigger."""
MAX_COUNTED = 1_000
"""Missed cron times counted one by one at most; a longer outage reports this many."""


class ScheduleError(ValueError):
    """A schedule that cannot be read; the message says what is wrong with it."""


def parse_duration(text: str) -> timedelta:
    """`1h30m`, `30s`, `250ms` as a timedelta.

    Raises:
        ScheduleError: not a sequence of <number><ms|s|m|h>.
    """
    if not text or _PART.sub("", text):
        raise ScheduleError(f"{text!r} is not a duration such as 30s, 5m or 1h30m")
    return timedelta(seconds=sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(text)))


@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed schedule: an interval (`@every`) or a cron expression, in a time zone."""

    cron: str
    zone: ZoneInfo
    interval: timedelta | None = None
    """Set for `@every`; then `cron` is the text as written."""


def parse_schedule(cron: str, time_zone: str | None = None) -> Schedule:
    """Read `cron` (five fields, a macro such as `@daily`, or `@every 30s`) in `time_zone`.

    Raises:
        ScheduleError: the expression or the zone is not valid; the message names which.
    """
    try:
        zone = ZoneInfo(time_zone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"timeZone {time_zone!r} is not an IANA time zone such as Europe/Paris") from None
    text = cron.strip()
    if text.startswith(EVERY):
        interval = parse_duration(text.removeprefix(EVERY).strip())
        if interval < MIN_INTERVAL:
            raise ScheduleError(f"{cron!r}: the interval must be at least 1s")
        return Schedule(text, zone, interval)
    if text.startswith("@every"):
        raise ScheduleError(f"{cron!r}: write @every <duration>, e.g. @every 30s")
    # Five fields only: croniter also takes seconds and years, which Kubernetes' CronJob does not.
    if not text.startswith("@") and len(text.split()) != 5:
        raise ScheduleError(f"{cron!r}: a cron expression has five fields (minute hour day month weekday)")
    try:
        _step(croniter(text, datetime(2000, 1, 1, tzinfo=zone)))
    except (CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, KeyError, ValueError) as exc:
        raise ScheduleError(f"{cron!r} is not a cron expression: {exc}") from None
    return Schedule(text, zone)


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What a schedule asks for at one moment."""

    due: datetime | None
    """The scheduled time to run now, if any (the newest missed one within the deadline)."""
    skipped: int
    """Scheduled times passed that will never run (older than the newest, or past its deadline)."""
    next: datetime
    """The first scheduled time after now."""
    handled: datetime | None = None
    """The newest scheduled time passed (run or skipped): the `last` of the next plan."""


def plan_runs(
    schedule: Schedule,
    *,
    last: datetime | None,
    created: datetime,
    now: datetime,
    deadline_seconds: int | None,
) -> RunPlan:
    """CronJob's rule: of the times in (last or created, now], run the newest, skip the rest.

    The newest runs only when `deadline_seconds` is unset or it is at most that old; else it is
    skipped too. `last` is the last scheduled time already handled (run or skipped).
    """
    anchor = last or created
    passed, newest, upcoming = _passed(schedule, anchor, now)
    if newest is None:
        return RunPlan(None, 0, upcoming)
    late = (now - newest).total_seconds()
    if deadline_seconds is not None and late > deadline_seconds:
        return RunPlan(None, passed, upcoming, newest)
    return RunPlan(newest, passed - 1, upcoming, newest)


def _passed(schedule: Schedule, anchor: datetime, now: datetime) -> tuple[int, datetime | None, datetime]:
    """How many times fell in (anchor, now], the newest of them, and the first after now."""
    if (interval := schedule.interval) is not None:
        count = max(0, int((now - anchor) / interval))
        while anchor + (count + 1) * interval <= now:  # float rounding of the division
            count += 1
        return count, (anchor + count * interval if count else None), anchor + (count + 1) * interval
    cron = croniter(schedule.cron, anchor.astimezone(schedule.zone))
    passed, newest, upcoming = 0, None, _step(cron)
    while upcoming <= now:
        passed, newest = passed + 1, upcoming
        if passed >= MAX_COUNTED:
            # A long outage: find the newest from just before now rather than walking to it.
            return passed, *_around(schedule, anchor, now)
        upcoming = _step(cron)
    return passed, newest, upcoming


def _around(schedule: Schedule, anchor: datetime, now: datetime) -> tuple[datetime, datetime]:
    """The newest time at or before `now` and the first after it (cron only)."""
    cron = croniter(schedule.cron, now.astimezone(schedule.zone))
    newest = _step(cron, back=True)
    if (upcoming := _step(cron)) <= now:  # `now` itself is a time
        newest, upcoming = upcoming, _step(cron)
    return max(newest, anchor), upcoming


def _step(cron: croniter, *, back: bool = False) -> datetime:
    """The next (or previous) time of a croniter, in UTC (its methods carry no type hints)."""
    moved = cron.get_prev(datetime) if back else cron.get_next(datetime)  # type: ignore[no-untyped-call]
    assert isinstance(moved, datetime)
    return moved.astimezone(UTC)
