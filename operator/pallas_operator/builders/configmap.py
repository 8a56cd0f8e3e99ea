"""The agent's ConfigMap: the runtime config `pallas agent --config` reads. No secret values."""

from __future__ import annotations

from pallas_api import names
from pallas_operator.builders.meta import Manifest, Owner, agent_labels, metadata


def agent_config_map(owner: Owner, deployment: str, config_yaml: str) -> Manifest:
    """The ConfigMap `<agent>-config` holding `agent.yaml` (`pallas_api.config.render_config`)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(names.config_map_name(owner.name), owner, agent_labels(owner.name, deployment)),
        "data": {names.CONFIG_FILE: config_yaml},
    }
