"""The metric families of trigger runs: the same names in `pallas run` and in the operator."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter


@dataclass(frozen=True, slots=True)
class TriggerMetrics:
    """`pallas_trigger_runs_total{trigger,outcome}` and `pallas_trigger_dropped_total{trigger,reason}`."""

    runs_total: Counter
    dropped_total: Counter


def trigger_metrics(registry: CollectorRegistry) -> TriggerMetrics:
    """Register both families in `registry`."""
    return TriggerMetrics(
        Counter(
            "pallas_trigger_runs_total",
            "PallasTrigger runs ended, by trigger (<namespace>/<name>) and outcome (Succeeded, Failed).",
            ["trigger", "outcome"],
            registry=registry,
        ),
        Counter(
            "pallas_trigger_dropped_total",
            "PallasTrigger firings not run: dropped by maxRunsPerMinute (reason rate) or skipped by "
            "concurrencyPolicy Forbid or a missed schedule (reason skipped).",
            ["trigger", "reason"],
            registry=registry,
        ),
    )
