"""The scaling policy (issue 53): idle goes to minReplicas (0 sleeps), load adds pods at once,
scale-in one pod at a time and only after the last change has settled."""

from __future__ import annotations

import pytest

from pallas_api.spec.common import ScalingSpec
from pallas_operator.status.scaling import SCALE_IN_STABLE_SECONDS, Activity, Decision, decide

NOW = 1_000_000.0
SCALING = ScalingSpec(min_replicas=0, max_replicas=5, idle_seconds=900, target_in_flight=4)


def test_an_idle_agent_goes_to_sleep_after_its_idle_seconds() -> None:
    quiet = Activity(last_turn_at=NOW - 901, in_flight=(0,))
    assert decide(SCALING, quiet, replicas=1, changed_at=None, now=NOW) == Decision(
        0, True, "no turn for 900s (idleSeconds); one pod fewer (it drains its turns first)"
    )


def test_an_agent_used_within_its_idle_seconds_stays_up() -> None:
    recent = Activity(last_turn_at=NOW - 899, in_flight=(0,))
    assert decide(SCALING, recent, replicas=1, changed_at=None, now=NOW).replicas == 1


def test_a_turn_in_flight_keeps_an_agent_awake_however_old_its_start() -> None:
    long_turn = Activity(last_turn_at=NOW - 5000, in_flight=(1,))
    assert decide(SCALING, long_turn, replicas=1, changed_at=None, now=NOW).replicas == 1


def test_a_sleeping_agent_stays_asleep_until_the_activator_reports_a_wake() -> None:
    assert decide(SCALING, Activity(last_turn_at=NOW - 5000), 0, None, NOW) == Decision(
        0, True, "asleep; the activator wakes it at the next request"
    )
    woken = decide(SCALING, Activity(last_turn_at=NOW - 1), 0, changed_at=NOW - 1, now=NOW)
    assert (woken.replicas, woken.sleeping) == (1, False)


def test_load_adds_the_pods_it_needs_at_once_up_to_max() -> None:
    busy = Activity(last_turn_at=NOW, in_flight=(9, 8))  # 17 turns, 4 a pod: 5
    assert decide(SCALING, busy, replicas=2, changed_at=NOW, now=NOW).replicas == 5
    flood = Activity(last_turn_at=NOW, in_flight=(40, 40))
    assert decide(SCALING, flood, replicas=2, changed_at=NOW, now=NOW).replicas == 5


def test_scale_in_waits_for_the_last_change_to_settle_then_removes_one_pod() -> None:
    calm = Activity(last_turn_at=NOW, in_flight=(1, 0, 0, 0))
    held = decide(SCALING, calm, replicas=4, changed_at=NOW - SCALE_IN_STABLE_SECONDS + 1, now=NOW)
    assert held.replicas == 4
    assert decide(SCALING, calm, replicas=4, changed_at=NOW - SCALE_IN_STABLE_SECONDS, now=NOW).replicas == 3


def test_min_replicas_are_kept_when_idle_and_while_awake() -> None:
    kept = ScalingSpec(min_replicas=2, max_replicas=5)
    assert decide(kept, Activity(last_turn_at=None), replicas=2, changed_at=None, now=NOW) == Decision(
        2, False, "no turn for 900s (idleSeconds)"
    )
    assert decide(kept, Activity(last_turn_at=NOW, in_flight=(1, 0)), 2, None, NOW).replicas == 2


def test_min_above_max_is_refused_naming_both() -> None:
    with pytest.raises(ValueError, match=r"scaling.minReplicas \(3\) is more than scaling.maxReplicas \(2\)"):
        ScalingSpec(min_replicas=3, max_replicas=2)
