"""What reconciles remember between runs: auth-delegator bindings, ServiceMonitor checks."""

from __future__ import annotations

from pallas_operator.engine.delegations import Delegations
from pallas_operator.engine.monitoring_checks import MonitoringChecks


def test_delegations_say_unknown_until_recorded_and_forget_returns_what_was_known() -> None:
    delegations = Delegations()
    assert delegations.known("ns", "ouranos") is None
    delegations.record("ns", "ouranos", exists=True)
    delegations.record("ns", "hermes", exists=False)
    assert (delegations.known("ns", "ouranos"), delegations.known("ns", "hermes")) == (True, False)
    assert delegations.forget("ns", "ouranos") is True
    assert delegations.forget("ns", "ouranos") is None
    assert delegations.known("ns", "ouranos") is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_monitoring_is_listed_once_per_generation_and_again_while_the_crd_is_missing() -> None:
    clock = Clock()
    checks = MonitoringChecks(recheck=60.0, clock=clock)
    assert checks.known("ns", "ouranos", 1) is None  # never listed
    checks.record("ns", "ouranos", 1, present=True)
    clock.now += 3600
    assert checks.known("ns", "ouranos", 1) is True  # a CRD found stays found for the generation
    assert checks.known("ns", "ouranos", 2) is None  # a new generation lists again

    checks.record("ns", "ouranos", 2, present=False)
    clock.now += 59
    assert checks.known("ns", "ouranos", 2) is False
    clock.now += 1
    assert checks.known("ns", "ouranos", 2) is None  # missing: looked for again after `recheck`

    checks.forget("ns", "ouranos")
    assert checks.known("ns", "ouranos", 2) is None
