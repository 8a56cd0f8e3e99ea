"""Configuration contracts: the resource specs users write and the agent config pods run.

- `resources`: the PallasDeployment / PallasAgent spec models (the single schema source; the
  operator generates the CRDs from them and `pallas run` reads manifests with them).
- `agent`: one agent's runtime config, rendered into the agent's ConfigMap.
- `render`: the pure mapping from specs to an agent config, shared by the operator and
  `pallas run` so both run a manifest the same way.
"""

from pallas_runtime.config.agent import (
    AgentConfig,
    ConfigError,
    DownstreamServer,
    HeaderConfig,
    HealthSettings,
    HistoryLimits,
    InputLimits,
    ModelCapabilities,
    PeerAgent,
    ProviderConfig,
    RequestParams,
    ToolPolicy,
    load_config,
    parse_config,
    render_config,
)

__all__ = [
    "AgentConfig",
    "ConfigError",
    "DownstreamServer",
    "HeaderConfig",
    "HealthSettings",
    "HistoryLimits",
    "InputLimits",
    "ModelCapabilities",
    "PeerAgent",
    "ProviderConfig",
    "RequestParams",
    "ToolPolicy",
    "load_config",
    "parse_config",
    "render_config",
]
