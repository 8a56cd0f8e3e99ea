"""Concurrency policies, the per-minute bound and the pruning of run history."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pallas_api.triggers.policy import RateWindow, admit, prune


@pytest.mark.parametrize(
    ("policy", "running", "decision"),
    [
        ("Allow", 0, "start"),
        ("Allow", 2, "start"),
        ("Forbid", 0, "start"),
        ("Forbid", 1, "skip"),
        ("Replace", 0, "start"),
        ("Replace", 1, "replace"),
    ],
)
def test_concurrency(policy: str, running: int, decision: str) -> None:
    assert admit(policy, running) == decision  # type: ignore[arg-type]


def test_rate_window_slides_and_counts_drops() -> None:
    window = RateWindow(3)
    assert [window.take(t) for t in (0.0, 1.0, 2.0, 3.0, 59.9)] == [True, True, True, False, False]
    assert window.dropped == 2
    assert window.take(60.0)  # the start at 0.0 left the window
    assert not window.take(60.5)


@dataclass
class Run:
    id: str
    outcome: str


def test_prune_keeps_running_and_the_newest_of_each_kind() -> None:
    runs = [
        Run("r9", "Running"),
        Run("f8", "Failed"),
        Run("s7", "Succeeded"),
        Run("s6", "Succeeded"),
        Run("f5", "Failed"),
        Run("s4", "Succeeded"),
        Run("f3", "Failed"),
    ]
    kept = prune(runs, succeeded=2, failed=1)
    assert [r.id for r in kept] == ["r9", "f8", "s7", "s6"]
    assert [r.id for r in prune(runs, succeeded=0, failed=0)] == ["r9"]
