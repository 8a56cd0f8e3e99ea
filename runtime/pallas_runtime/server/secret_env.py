"""Which of an agent's environment variables hold secrets, and their values."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pallas_api.config import AgentConfig
from pallas_io.logs import SecretValues


def secret_env_names(config: AgentConfig) -> list[str]:
    """Environment variables of `config` that hold secrets (redacted from logs)."""
    names = [config.provider.api_key_env] if config.provider.api_key_env else []
    names += [h.value_from_env for s in config.servers for h in s.headers if h.value_from_env]
    return names


def secret_values(config: AgentConfig, environ: Mapping[str, str] | None = None) -> SecretValues:
    """The values of `secret_env_names(config)`: what tool results are scrubbed of."""
    env = os.environ if environ is None else environ
    return SecretValues(value for name in secret_env_names(config) if (value := env.get(name)))
