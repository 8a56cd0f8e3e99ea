"""The soak's figures (tests/support/soak/report.py): sends, losses and leaks land in the window of
the event that hit them, and each kind of event is held to its own target."""

from __future__ import annotations

from tests.support.soak.clients import Loss, Send
from tests.support.soak.report import Window, percentiles, rows, table
from tests.support.soak.script import Verdict

OK = Verdict(turn=1, missing=(), leaks=(), research="ok")


def send(
    started: float, ended: float, code: str | None = None, verdict: Verdict | None = OK, resumed: bool = False
) -> Send:
    detail = "why" if code else ""
    return Send("c00", "conv", 1, True, started, ended, code, None if code else verdict, detail, resumed)


WINDOWS = [
    Window("baseline", "baseline", 0, 100, 0),
    Window("rollout", "graceful", 100, 200, 130),
    Window("kubelet", "crash", 200, 300, 210),
]


def test_sends_land_in_the_window_they_ended_in_and_failures_count_by_code() -> None:
    sends = [
        send(80, 90),  # baseline, 10 s: "before" of the rollout
        send(95, 105, "SERVER_UNAVAILABLE"),  # started before the rollout, hit by it
        send(110, 112, "SESSION_LOST"),
        send(120, 124, resumed=True),  # its session was gone: sent again on a new one
        send(150, 151),  # after the rollout settled: not "during"
        send(205, 240, "LLM_ERROR"),
        send(250, 252, verdict=Verdict(turn=1, missing=(2,), leaks=(), research="ok")),
    ]
    baseline, rollout, kubelet, total = rows(WINDOWS, sends, [], [], settle=20)
    assert (baseline.sends, baseline.failed) == (1, 0)
    assert (rollout.sends, rollout.failed) == (4, 2)
    assert dict(rollout.codes) == {"SERVER_UNAVAILABLE": 1, "SESSION_LOST": 1}
    assert rollout.non_retryable == 0
    assert rollout.resumed == 1
    assert rollout.recovery == 12  # the last failure ended at 112
    assert rollout.before == (10, 10)
    assert rollout.during == (4, 4)
    assert rollout.settled_in == 30
    assert not rollout.meets_target  # graceful: any failure misses
    assert kubelet.non_retryable == 1
    assert kubelet.context_lost == 1
    assert not kubelet.meets_target
    assert (total.sends, total.failed, total.context_lost) == (7, 3, 1)


def test_a_crash_may_fail_retryably_but_never_lose_or_take_longer_than_30s() -> None:
    retryable = [send(201, 202, "CONNECT_FAILED"), send(215, 220, "HTTP_503"), send(222, 225)]
    (_, _, kubelet, _) = rows(WINDOWS, retryable, [], [], settle=20)
    assert kubelet.meets_target
    (_, _, slow, _) = rows(WINDOWS, [*retryable, send(228, 231, "CLIENT_TIMEOUT")], [], [], settle=20)
    assert slow.recovery == 31
    assert not slow.meets_target
    lost = [Loss("c00", "conv", 3, acked_at=204)]
    (_, _, losing, _) = rows(WINDOWS, retryable, lost, [], settle=20)
    assert losing.lost == 1
    assert not losing.meets_target


def test_leaks_count_from_answers_and_from_histories_read_back() -> None:
    leaky = Verdict(turn=1, missing=(), leaks=("c05",), research="ok")
    (_, rollout, kubelet, total) = rows(
        WINDOWS, [send(101, 103, verdict=leaky)], [], [("c00", "c07", 250.0)], settle=20
    )
    assert (rollout.leaks, kubelet.leaks, total.leaks) == (1, 1, 2)


def test_an_event_that_never_settled_misses_its_target_and_says_why() -> None:
    windows = [
        Window("baseline", "baseline", 0, 100, 0),
        Window("upgrade", "graceful", 100, 400, None, "timed out"),
    ]
    (_, upgrade, _) = rows(windows, [], [], [], settle=20)
    assert upgrade.settled_in is None
    assert not upgrade.meets_target
    rendered = table(rows(windows, [send(10, 12), send(150, 155, "SESSION_LOST")], [], [], settle=20))
    lines = rendered.splitlines()
    assert lines[0].startswith("| event ")
    assert "| upgrade " in lines[3]
    assert "MISSED" in lines[3]
    assert "SESSION_LOST x1" in lines[3]
    assert "- upgrade: timed out" in rendered
    assert "- upgrade SESSION_LOST: why" in rendered


def test_percentiles_are_nearest_rank() -> None:
    assert percentiles([]) is None
    assert percentiles([3.0]) == (3.0, 3.0)
    values = [float(n) for n in range(1, 101)]
    assert percentiles(values) == (50.0, 99.0)
