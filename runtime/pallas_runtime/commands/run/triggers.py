"""The PallasTriggers of a local run: which agent each calls and the secrets they need.

`pallas run` runs schedule and webhook triggers (docs/triggers.md); event triggers need a
cluster's watch and are left out with a warning. A trigger whose agent is not run (`--agent`
picked another) is left out too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pallas_io.triggers.runs import TriggerTarget
from pallas_runtime.commands.run.manifests import ManifestError, Manifests, PlannedAgent, secret_value
from pallas_runtime.triggers.host import TriggerHost
from pallas_runtime.triggers.webhook import WebhookTrigger

log = logging.getLogger("pallas.run")


def _no_value(where: str, field: str, name: str, key: str) -> str:
    return f"{where}: {field} {name}/{key} has no value (no such Secret manifest key and ${key} is unset)"


def plan_triggers(
    manifests: Manifests,
    agents: Sequence[PlannedAgent],
    environ: Mapping[str, str],
    headers: Mapping[str, str],
) -> tuple[list[TriggerTarget], list[WebhookTrigger]]:
    """The schedule triggers and the webhook triggers to run, each aimed at its agent's URL.

    Raises:
        ManifestError: a trigger names an agent the files do not define, or a webhook's secret
            has no value (a webhook without its secret would accept anything).
    """
    urls = {(a.manifest.namespace, a.manifest.name): a.url for a in agents}
    defined = {(a.namespace, a.name) for a in manifests.agents}
    schedules: list[TriggerTarget] = []
    webhooks: list[WebhookTrigger] = []
    for trigger in manifests.triggers:
        where = f"{trigger.source}: {trigger.kind}/{trigger.name}"
        key = (trigger.namespace, trigger.spec.agent)
        if key not in defined:
            raise ManifestError(
                f"{where}: spec.agent: no PallasAgent {trigger.spec.agent!r} in namespace "
                f"{trigger.namespace!r} of the files"
            )
        if trigger.spec.event is not None:
            log.warning("%s: event triggers need a cluster; not run here", where)
            continue
        if key not in urls:
            log.info("%s: its agent %s is not run here (--agent); not run", where, trigger.spec.agent)
            continue
        deliver = trigger.spec.deliver.webhook if trigger.spec.deliver else None
        deliver_secret = None
        if deliver is not None and deliver.secret_ref is not None:
            ref = deliver.secret_ref
            value = secret_value(manifests, trigger.namespace, ref.name, ref.key, environ)
            if value is None:
                raise ManifestError(_no_value(where, "spec.deliver.webhook.secretRef", ref.name, ref.key))
            deliver_secret = value.encode()
        target = TriggerTarget(
            trigger.namespace,
            trigger.name,
            trigger.spec,
            urls[key],
            headers=headers,
            deliver_secret=deliver_secret,
        )
        if (webhook := trigger.spec.webhook) is None:
            schedules.append(target)
            continue
        ref = webhook.secret_ref
        secret = secret_value(manifests, trigger.namespace, ref.name, ref.key, environ)
        if not secret:
            raise ManifestError(_no_value(where, "spec.webhook.secretRef", ref.name, ref.key))
        webhooks.append(WebhookTrigger(target, secret.encode()))
    return schedules, webhooks


@dataclass(frozen=True)
class TriggerReload:
    """What `pallas run --reload` needs to move the triggers to edited manifests."""

    host: TriggerHost
    environ: Mapping[str, str]
    """The environment the run was planned from (`Reload.environ`)."""
    headers: Mapping[str, str]
    """What the runs' calls carry (the run's bearer)."""

    def plan(
        self, manifests: Manifests, agents: Sequence[PlannedAgent]
    ) -> tuple[list[TriggerTarget], list[WebhookTrigger]]:
        """`plan_triggers` of the edited manifests (ManifestError refuses the edit)."""
        return plan_triggers(manifests, agents, self.environ, self.headers)
