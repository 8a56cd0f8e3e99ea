"""Manifests the cluster refuses, each with what the API server and `pallas validate` say.

One list for both: tests/integration/operator/test_crd_validation.py sends every case to a real
API server (schema, CEL, strict field validation) and tests/integration/runtime/test_validate_command.py runs
`pallas validate` on it, so a rule added to the CRDs without its offline counterpart (or the
reverse) fails one of them. The texts are what each must print: the API server's words and
field paths differ from pydantic's (`spec.x[0]` against `spec.x.0`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.operator import Manifest, agent, at, deployment, spec, trigger, unchecked, without

LONG_NAME = "d" + "x" * 55
PASSWORD = "hunter2-in-a-url"
USER_INFO = f"admin:{PASSWORD}"
"""Credentials in a URL: refused everywhere, and never repeated by a refusal."""
PG_DSN = {"secretKeyRef": {"name": "pg", "key": "dsn"}}


@dataclass(frozen=True)
class Case:
    """One invalid manifest (agents belong to `deployment()`'s `ouranos`, which is valid)."""

    id: str
    manifest: Manifest
    refused_with: list[str]
    """Texts the API server's refusal contains."""
    reported_as: list[str]
    """Texts one line of `pallas validate` about this object contains."""


INVALID = [
    Case(
        "negative-replicas",
        agent("a1", spec(replicas=-1)),
        refused_with=["spec.replicas", "greater than or equal to 0"],
        reported_as=["spec.replicas: ", "greater than or equal to 0"],
    ),
    Case(
        "replicas-wrong-type",
        agent("a1", spec(replicas="two")),
        refused_with=["spec.replicas", "must be of type integer"],
        reported_as=["spec.replicas: ", "valid integer"],
    ),
    Case(
        "name-starts-with-digit",
        agent("1research"),
        refused_with=["metadata.name must be", "starting with a letter"],
        reported_as=["metadata.name: must be at most 63", "starting with a letter"],
    ),
    Case(
        "name-with-dot",
        agent("re.search"),
        refused_with=["metadata.name must be", "names the agent's Service"],
        reported_as=["metadata.name: must be at most 63", "names the agent's Service"],
    ),
    Case(
        "model-without-provider",
        agent("a1", spec(model="gpt4")),
        refused_with=["spec.model must be '<provider>.<model>'"],
        reported_as=["spec.model: ", "should match pattern"],
    ),
    Case(
        "model-with-space",
        agent("a1", spec(model="vllm.qwen 3")),
        refused_with=["spec.model must be '<provider>.<model>'"],
        reported_as=["spec.model: ", "should match pattern"],
    ),
    Case(
        "description-over-100",
        agent("a1", spec(description="x" * 101)),
        refused_with=["spec.description", "100"],
        reported_as=["spec.description: ", "at most 100 characters"],
    ),
    Case(
        "unknown-spec-field",
        agent("a1", spec(modle="vllm.x"), unchecked),
        refused_with=['unknown field "spec.modle"'],
        reported_as=["spec.modle: Extra inputs are not permitted"],
    ),
    Case(
        "unknown-nested-field",
        agent("a1", at("spec.service.portt", 1), unchecked),
        refused_with=['unknown field "spec.service.portt"'],
        reported_as=["spec.service.portt: Extra inputs are not permitted"],
    ),
    Case(
        "self-in-agents",
        agent("a1", spec(agents=["a1"])),
        refused_with=["spec.agents must not name the agent itself"],
        reported_as=["spec.agents: must not name the agent itself"],
    ),
    Case(
        "self-in-depends-on",
        agent("a1", spec(dependsOn=["a1"])),
        refused_with=["spec.dependsOn must not name the agent"],
        reported_as=["spec.dependsOn: must not name the agent itself"],
    ),
    Case(
        "self-in-workflow",
        agent("a1", spec(workflow={"chain": {"steps": ["b", "a1"]}})),
        refused_with=["spec.workflow must not name the agent itself"],
        reported_as=["spec.workflow: must not name the agent itself"],
    ),
    Case(
        "two-workflow-shapes",
        agent("a1", spec(workflow={"chain": {"steps": ["b"]}, "router": {"routes": ["b"]}})),
        refused_with=["a workflow needs exactly one of chain, parallel, router, evaluator, planner"],
        reported_as=["spec.workflow", "a workflow needs exactly one of chain, parallel, router"],
    ),
    Case(
        "evaluator-rates-itself",
        agent("a1", spec(workflow={"evaluator": {"generator": "b", "evaluator": "b"}})),
        refused_with=["the evaluator must be another agent than the generator"],
        reported_as=["spec.workflow.evaluator", "the evaluator must be another agent than the generator"],
    ),
    Case(
        "fan-in-in-fan-out",
        agent("a1", spec(workflow={"parallel": {"fanOut": ["b", "c"], "fanIn": "c"}})),
        refused_with=["a parallel workflow's fanIn must not be in its fanOut"],
        reported_as=["spec.workflow.parallel", "fanIn 'c' is also in fanOut"],
    ),
    Case(
        "duplicate-servers",
        agent("a1", spec(servers=["argos", "argos"])),
        refused_with=["spec.servers[1]", "Duplicate value"],
        reported_as=["spec.servers: ", "duplicate value 'argos'"],
    ),
    Case(
        "duplicate-agents",
        agent("a1", spec(agents=["b", "b"])),
        refused_with=["spec.agents[1]", "Duplicate value"],
        reported_as=["spec.agents: ", "duplicate value 'b'"],
    ),
    Case(
        "missing-deployment",
        agent("a1", without("spec.deployment")),
        refused_with=["spec.deployment", "Required value"],
        reported_as=["spec.deployment: Field required"],
    ),
    Case(
        "bad-session-affinity",
        agent("a1", at("spec.service.sessionAffinity", "Sticky")),
        refused_with=['Unsupported value: "Sticky"', '"ClientIP", "None"'],
        reported_as=["spec.service.sessionAffinity: ", "'ClientIP' or 'None'"],
    ),
    Case(
        "port-out-of-range",
        agent("a1", at("spec.service.port", 70000)),
        refused_with=["spec.service.port", "65535"],
        reported_as=["spec.service.port: ", "65535"],
    ),
    Case(
        "temperature-too-high",
        agent("a1", at("spec.requestParams.temperature", 3)),
        refused_with=["spec.requestParams.temperature", "less than or equal to 2"],
        reported_as=["spec.requestParams.temperature: ", "less than or equal to 2"],
    ),
    Case(
        "bad-capability-tag",
        agent("a1", spec(capabilities=["Web Search"])),
        refused_with=["spec.capabilities[0]", "should match"],
        reported_as=["spec.capabilities.0: ", "should match"],
    ),
    Case(
        "icon-src-other-scheme",
        agent("a1", spec(icons=[{"src": "javascript:alert(1)"}])),
        refused_with=["spec.icons[0].src", "should match"],
        reported_as=["spec.icons.0.src: ", "should match"],
    ),
    Case(
        "icon-sizes-a-string",
        agent("a1", spec(icons=[{"src": "/icons/a.svg", "sizes": "any"}])),
        refused_with=["spec.icons[0].sizes", "must be of type array"],
        reported_as=["spec.icons.0.sizes: ", "valid list"],
    ),
    Case(
        "bad-dependency-name",
        agent("a1", spec(dependsOn=["Not_A_Name"])),
        refused_with=["spec.dependsOn[0]", "should match"],
        reported_as=["spec.dependsOn.0: ", "should match"],
    ),
    Case(
        "json-schema-format-without-schema",
        agent("a1", spec(requestParams={"responseFormat": {"type": "json_schema"}})),
        refused_with=["responseFormat needs jsonSchema exactly when its type is json_schema"],
        reported_as=["spec.requestParams.responseFormat: ", "needs jsonSchema exactly when"],
    ),
    Case(
        "deployment-name-too-long",
        deployment(LONG_NAME),
        refused_with=["metadata.name must be at most 54", "-registry"],
        reported_as=["metadata.name: must be at most 54", "-registry"],
    ),
    Case(
        "default-model-unknown-provider",
        deployment("d1", at("spec.model.default", "openai.gpt-4o")),
        refused_with=["spec.model.default must start with a key of spec.providers"],
        reported_as=["spec: ", "names provider 'openai', which is not in providers"],
    ),
    Case(
        "model-capabilities-key-not-a-model",
        deployment("d1", at("spec.model.models", {"qwen3": {"vision": True}})),
        refused_with=["spec.model.models keys must be '<provider>.<model>'"],
        reported_as=["spec.model: ", "model.models key 'qwen3' must be '<provider>.<model>'"],
    ),
    Case(
        "model-capabilities-of-the-default",
        deployment("d1", at("spec.model.models", {"vllm.qwen3-8b": {"vision": True}})),
        refused_with=["spec.model.models must not name the default model"],
        reported_as=["spec.model: ", "model.models names the default model 'vllm.qwen3-8b'"],
    ),
    Case(
        "model-capabilities-unknown-provider",
        deployment("d1", at("spec.model.models", {"anthropic.claude-sonnet-4-5": {"vision": True}})),
        refused_with=["spec.model.models keys must start with a key of spec.providers"],
        reported_as=["spec: ", "model.models 'anthropic.claude-sonnet-4-5' names provider 'anthropic'"],
    ),
    Case(
        "postgres-without-dsn",
        deployment("d1", at("spec.conversations", {"store": "postgres"})),
        refused_with=["spec.conversations.postgres", "needs spec.conversations.postgres.dsn"],
        reported_as=["spec.conversations: ", "needs conversations.postgres.dsn"],
    ),
    Case(
        "postgres-max-connections-zero",
        deployment("d1", at("spec.conversations.postgres", {"dsn": PG_DSN, "maxConnections": 0})),
        refused_with=["spec.conversations.postgres.maxConnections", "greater than or equal to 1"],
        reported_as=["spec.conversations.postgres.maxConnections: ", "greater than or equal to 1"],
    ),
    Case(
        "postgres-max-connections-too-many",
        deployment("d1", at("spec.conversations.postgres", {"dsn": PG_DSN, "maxConnections": 101})),
        refused_with=["spec.conversations.postgres.maxConnections", "less than or equal to 100"],
        reported_as=["spec.conversations.postgres.maxConnections: ", "less than or equal to 100"],
    ),
    Case(
        "unknown-store",
        deployment("d1", at("spec.conversations", {"store": "redis"})),
        refused_with=["spec.conversations.store", 'Unsupported value: "redis"'],
        reported_as=["spec.conversations.store: ", "'memory', 'sqlite' or 'postgres'"],
    ),
    Case(
        "provider-bad-type",
        deployment("d1", at("spec.providers.vllm.type", "cohere")),
        refused_with=["spec.providers.vllm.type", 'Unsupported value: "cohere"'],
        reported_as=["spec.providers.vllm.type: ", "'openai', 'anthropic', 'gemini' or 'bedrock'"],
    ),
    Case(
        "registry-public-url-not-http",
        deployment("d1", at("spec.registry.publicURL", "ftp://agents.example.com/")),
        refused_with=["spec.registry.publicURL", "should match"],
        reported_as=["spec.registry.publicURL: ", "should match"],
    ),
    Case(
        "provider-bad-key",
        deployment("d1", at("spec.providers.My_Provider", {"type": "openai"})),
        refused_with=["spec.providers keys must be DNS labels"],
        reported_as=["spec: ", "provider name 'My_Provider' must be a DNS label"],
    ),
    Case(
        "header-value-and-secret",
        deployment(
            "d1",
            at(
                "spec.mcpServers.argos.headers",
                [{"name": "X-Key", "value": "v", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
            ),
        ),
        refused_with=["a header needs exactly one of value or valueFrom"],
        reported_as=["spec.mcpServers.argos.headers.0: ", "exactly one of value or valueFrom"],
    ),
    Case(
        "server-url-and-stdio",
        deployment("d1", at("spec.mcpServers.argos.stdio", {"command": "npx"})),
        refused_with=["an MCP server needs exactly one of url (an HTTP server) or stdio (a command)"],
        reported_as=["spec.mcpServers.argos: ", "exactly one of url (an HTTP server) or stdio"],
    ),
    Case(
        "server-neither-url-nor-stdio",
        deployment("d1", at("spec.mcpServers.argos", {"timeoutSeconds": 5})),
        refused_with=["an MCP server needs exactly one of url (an HTTP server) or stdio (a command)"],
        reported_as=["spec.mcpServers.argos: ", "exactly one of url (an HTTP server) or stdio"],
    ),
    Case(
        "stdio-server-with-headers",
        deployment(
            "d1",
            at(
                "spec.mcpServers.shell",
                {"stdio": {"command": "npx"}, "headers": [{"name": "X-Key", "value": "v"}]},
            ),
        ),
        refused_with=["a stdio server takes no headers, forwardInboundAuth or transport"],
        reported_as=["spec.mcpServers.shell: ", "a stdio server takes no headers"],
    ),
    Case(
        "stdio-env-without-value",
        deployment(
            "d1", at("spec.mcpServers.shell", {"stdio": {"command": "npx", "env": [{"name": "TOKEN"}]}})
        ),
        refused_with=["a stdio env variable needs exactly one of value or valueFrom"],
        reported_as=["spec.mcpServers.shell.stdio.env.0: ", "exactly one of value or valueFrom"],
    ),
    Case(
        "server-url-not-http",
        deployment("d1", at("spec.mcpServers.argos.url", "ftp://argos")),
        refused_with=["spec.mcpServers.argos.url", "should match"],
        reported_as=["spec.mcpServers.argos.url: ", "should match"],
    ),
    Case(
        "health-interval-too-short",
        deployment("d1", at("spec.healthCheck.intervalSeconds", 1)),
        refused_with=["spec.healthCheck.intervalSeconds", "greater than or equal to 5"],
        reported_as=["spec.healthCheck.intervalSeconds: ", "greater than or equal to 5"],
    ),
    Case(
        "missing-providers",
        deployment("d1", without("spec.providers")),
        refused_with=["spec.providers", "Required value"],
        reported_as=["spec.providers: Field required"],
    ),
    Case(
        "inline-api-key",
        deployment("d1", at("spec.providers.vllm.apiKey", "sk-live")),
        refused_with=["spec.providers.vllm.apiKey", "must be of type object"],
        reported_as=["spec.providers.vllm.apiKey: ", "valid dictionary"],
    ),
    Case(
        "oidc-mode-without-settings",
        deployment("d1", at("spec.auth", {"mode": "oidc"})),
        refused_with=["spec.auth.mode oidc needs spec.auth.oidc with at least issuer and audience"],
        reported_as=["spec.auth: ", "auth.mode oidc needs auth.oidc"],
    ),
    Case(
        "oidc-settings-without-the-mode",
        deployment(
            "d1",
            at(
                "spec.auth", {"mode": "kubernetes", "oidc": {"issuer": "https://id.example", "audience": "a"}}
            ),
        ),
        refused_with=["spec.auth.oidc is only used with spec.auth.mode oidc"],
        reported_as=["spec.auth: ", "auth.oidc is only used with auth.mode oidc"],
    ),
    Case(
        "unknown-auth-mode",
        deployment("d1", at("spec.auth.mode", "basic")),
        refused_with=['Unsupported value: "basic"', '"none", "kubernetes", "oidc"'],
        reported_as=["spec.auth.mode: ", "'none', 'kubernetes' or 'oidc'"],
    ),
    Case(
        "oidc-alg-none",
        deployment(
            "d1",
            at(
                "spec.auth",
                {
                    "mode": "oidc",
                    "oidc": {"issuer": "https://id.example", "audience": "a", "algorithms": ["none"]},
                },
            ),
        ),
        refused_with=["spec.auth.oidc.algorithms[0]", 'Unsupported value: "none"'],
        reported_as=["spec.auth.oidc.algorithms.0: ", "'RS256'"],
    ),
    Case(
        "oidc-hmac",
        deployment(
            "d1",
            at(
                "spec.auth",
                {
                    "mode": "oidc",
                    "oidc": {"issuer": "https://id.example", "audience": "a", "algorithms": ["HS256"]},
                },
            ),
        ),
        refused_with=['Unsupported value: "HS256"'],
        reported_as=["spec.auth.oidc.algorithms.0: ", "'RS256'"],
    ),
    Case(
        "oidc-issuer-not-a-url",
        deployment(
            "d1", at("spec.auth", {"mode": "oidc", "oidc": {"issuer": "id.example", "audience": "a"}})
        ),
        refused_with=["spec.auth.oidc.issuer", "should match"],
        reported_as=["spec.auth.oidc.issuer: ", "should match"],
    ),
    Case(
        "decision-cache-too-long",
        deployment("d1", at("spec.auth.kubernetes.cacheSeconds", 3600)),
        refused_with=["spec.auth.kubernetes.cacheSeconds", "less than or equal to 300"],
        reported_as=["spec.auth.kubernetes.cacheSeconds: ", "less than or equal to 300"],
    ),
    Case(
        "allow-from-empty-entry",
        deployment("d1", at("spec.network", {"policy": True, "allowFrom": [{}]})),
        refused_with=["an allowFrom entry needs namespaceSelector, podSelector or both"],
        reported_as=["spec.network.allowFrom.0: ", "needs namespaceSelector, podSelector or both"],
    ),
    *(
        Case(
            f"credentials-in-{name}",
            manifest,
            refused_with=["must not carry credentials (user:password@host)", instead],
            reported_as=[f"{field}: must not carry credentials (user:password@host)", instead],
        )
        for name, manifest, field, instead in [
            (
                "server-url",
                deployment("d1", at("spec.mcpServers.argos.url", f"https://{USER_INFO}@argos.example/mcp")),
                "spec.mcpServers.argos.url",
                "put them in a header from a Secret instead",
            ),
            (
                "provider-base-url",
                deployment(
                    "d1", at("spec.providers.vllm.baseURL", f"http://{USER_INFO}@vllm.llm.svc:8000/v1")
                ),
                "spec.providers.vllm.baseURL",
                "put the key in apiKey",
            ),
            (
                "public-url-template",
                deployment(
                    "d1",
                    at(
                        "spec.registry.publicURLTemplate", f"https://{USER_INFO}@agents.example/{{agent}}/mcp"
                    ),
                ),
                "spec.registry.publicURLTemplate",
                "published to every client",
            ),
            (
                "registry-public-url",
                deployment("d1", at("spec.registry.publicURL", f"https://{USER_INFO}@agents.example/")),
                "spec.registry.publicURL",
                "published to every client",
            ),
            (
                "oidc-issuer",
                deployment(
                    "d1",
                    at(
                        "spec.auth",
                        {
                            "mode": "oidc",
                            "oidc": {"issuer": f"https://{USER_INFO}@id.example", "audience": "a"},
                        },
                    ),
                ),
                "spec.auth.oidc.issuer",
                "signing keys are public",
            ),
            (
                "oidc-jwks-url",
                deployment(
                    "d1",
                    at(
                        "spec.auth",
                        {
                            "mode": "oidc",
                            "oidc": {
                                "issuer": "https://id.example",
                                "audience": "a",
                                "jwksURL": f"https://{USER_INFO}@id.example/keys",
                            },
                        },
                    ),
                ),
                "spec.auth.oidc.jwksURL",
                "signing keys are public",
            ),
            (
                "icon-src",
                agent("a1", spec(icons=[{"src": f"//{USER_INFO}@icons.example/a.svg"}])),
                "spec.icons.0.src",
                "published to every client",
            ),
        ]
    ),
    Case(
        "access-duplicate-subject",
        agent("a1", at("spec.access.subjects", ["alice", "alice"])),
        refused_with=["spec.access.subjects[1]", "Duplicate value"],
        reported_as=["spec.access.subjects: ", "duplicate value 'alice'"],
    ),
    Case(
        "trigger-two-sources",
        trigger("t1", spec(webhook={"signature": "github", "secretRef": {"name": "gh", "key": "secret"}})),
        refused_with=["a trigger needs exactly one of schedule, webhook, event"],
        reported_as=["spec: ", "a trigger needs exactly one of schedule, webhook, event"],
    ),
    Case(
        "trigger-conversation-id-without-continue",
        trigger("t1", spec(conversation={"mode": "new", "id": "ops"})),
        refused_with=["spec.conversation.id", "conversation.id is only used with mode continue"],
        reported_as=["spec.conversation: ", "conversation.id is only used with mode continue"],
    ),
    Case(
        "trigger-unknown-concurrency-policy",
        trigger("t1", spec(concurrencyPolicy="Sometimes")),
        refused_with=["spec.concurrencyPolicy", 'Unsupported value: "Sometimes"'],
        reported_as=["spec.concurrencyPolicy: ", "'Allow', 'Forbid' or 'Replace'"],
    ),
]
