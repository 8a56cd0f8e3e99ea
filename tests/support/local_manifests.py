"""The manifests `pallas run` tests start from: a Secret with the key and a deployment on a fake LLM."""

from __future__ import annotations

import base64
from typing import Any

from tests.support.fake_llm import FakeOpenAI


def fake_llm_deployment(llm: FakeOpenAI, name: str, key: str, **spec: Any) -> list[dict[str, Any]]:
    """The Secret `llm` holding `key`, and the PallasDeployment `name` whose one provider is `llm`.

    `spec` adds to the deployment's spec (mcpServers, telemetry, http…).
    """
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "llm"},
            "data": {"KEY": base64.b64encode(key.encode()).decode()},
        },
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasDeployment",
            "metadata": {"name": name},
            "spec": {
                "model": {"default": f"fake.{llm.models[0]}"},
                "providers": {
                    "fake": {
                        "type": "openai",
                        "baseURL": llm.base_url,
                        "apiKey": {"secretKeyRef": {"name": "llm", "key": "KEY"}},
                    }
                },
                **spec,
            },
        },
    ]
