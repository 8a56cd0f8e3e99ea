"""The registry's checks of a deployment's LLM providers, read while the registry is available."""

from __future__ import annotations

from pallas_api import names
from pallas_api.spec import PallasDeploymentSpec
from pallas_operator.engine.context import DEPLOYMENT, Operator
from pallas_operator.engine.provider_reports import ReportSource
from pallas_operator.engine.world import OwnerRecord
from pallas_operator.status import ProviderReport, Workload


def provider_report(
    op: Operator, record: OwnerRecord, spec: PallasDeploymentSpec, registry: Workload | None
) -> ProviderReport | None:
    """Read the registry's provider checks while it is available; the last report read."""
    key = (DEPLOYMENT, record.namespace, record.name)
    source = None
    if spec.registry.enabled and registry is not None and registry.available:
        base = names.registry_base_url(record.name, record.namespace, spec.registry.port)
        source = ReportSource(
            url=base + "healthz",
            deployment=record.name,
            interval=spec.health_check.interval_seconds,
            time_limit=spec.health_check.timeout_seconds + 5,
            expected=len(spec.providers),
        )
    op.provider_reports.track(key, source)
    return op.provider_reports.report(key)
