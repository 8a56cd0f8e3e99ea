"""Traces: when they are on, what off costs, what spec.telemetry renders, what a span may carry."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import ValidationError

from pallas_api.config import ProviderConfig
from pallas_api.render import telemetry_environment
from pallas_api.spec import TelemetrySpec
from pallas_io import tracing
from pallas_io.logs import SecretValues
from pallas_runtime import tracing as agent_tracing
from pallas_runtime.messages import Completion, TextPart, Usage, UserMessage

ENDPOINT = "http://collector.observability:4318"


@pytest.fixture
def recorded() -> Iterator[InMemorySpanExporter]:
    """Pallas spans recorded in memory (not the global provider: nothing else is affected)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_provider(None)


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT + "/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, False),
    ],
)
def test_traces_are_on_only_with_an_otlp_endpoint(environ: dict[str, str], wanted: bool) -> None:
    assert tracing.tracing_wanted(environ) is wanted


def test_without_an_endpoint_setup_installs_nothing() -> None:
    assert tracing.setup_tracing("agent", {}) is False
    assert not tracing.enabled()


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL='grpc'"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
        ("OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER='zipkin'"),
    ],
)
def test_settings_it_cannot_honour_are_named(variable: str, value: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        tracing.setup_tracing("agent", {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, variable: value})
    assert not tracing.enabled()


def test_off_every_span_is_one_shared_no_op_and_nothing_is_built() -> None:
    assert not tracing.enabled()
    first = tracing.span("a", attributes={"k": "v"})
    assert first is tracing.span("b")
    assert agent_tracing.llm_span(
        "a", "openai", "m", "c", system="s", messages=[], secrets=None
    ) is tracing.span("c")
    assert agent_tracing.tool_span("a", "s", "t", peer=False, arguments={}, secrets=None) is first
    with first as span:
        assert span is None
    assert tracing.exemplar() is None
    app = object()
    assert tracing.continue_inbound(app) is app
    assert tracing.http_server_spans(app) is app


def test_an_llm_span_carries_the_genai_attributes_and_no_content_by_default(
    recorded: InMemorySpanExporter,
) -> None:
    user = UserMessage((TextPart("the password is hunter2"),))
    with agent_tracing.llm_span(
        "harper", "anthropic", "claude-x", "conv-1", system="sys", messages=[user], secrets=None
    ) as span:
        agent_tracing.completed(
            span, Completion("hi", usage=Usage(input=11, output=3), stop_reason="stop"), None
        )
    [finished] = recorded.get_finished_spans()
    assert finished.name == "chat claude-x"
    assert dict(finished.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-x",
        "gen_ai.agent.name": "harper",
        "gen_ai.conversation.id": "conv-1",
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.response.finish_reasons": ("stop",),
    }


def test_captured_content_is_scrubbed_of_the_agents_secrets(recorded: InMemorySpanExporter) -> None:
    provider = TracerProvider()  # the fixture's exporter, content captured this time
    provider.add_span_processor(SimpleSpanProcessor(recorded))
    tracing.use_provider(provider, capture=True)
    secrets = SecretValues(["sk-live-0123456789"])
    user = UserMessage((TextPart("use key sk-live-0123456789 please"),))
    with agent_tracing.llm_span(
        "harper", "openai", "m", None, system="You hold sk-live-0123456789", messages=[user], secrets=secrets
    ) as span:
        agent_tracing.completed(span, Completion("done with sk-live-0123456789"), secrets)
    with agent_tracing.tool_span(
        "harper", "search", "find", peer=False, arguments={"q": "sk-live-0123456789"}, secrets=secrets
    ) as span:
        agent_tracing.tool_finished(span, "ERROR", "TOOL_ERROR")
    chat, tool = recorded.get_finished_spans()
    text = str(dict(chat.attributes or {})) + str(dict(tool.attributes or {}))
    assert "sk-live-0123456789" not in text
    assert "use key" in str((chat.attributes or {})["gen_ai.input.messages"])
    assert "gen_ai.conversation.id" not in (chat.attributes or {})  # a turn that keeps none
    assert (tool.attributes or {})["gen_ai.tool.call.arguments"]
    assert (tool.attributes or {})["error.type"] == "TOOL_ERROR"
    assert not tool.status.is_ok


def test_log_records_under_a_span_carry_its_ids(recorded: InMemorySpanExporter) -> None:
    record = logging.makeLogRecord({"msg": "x"})
    tracing.TraceIds().filter(record)
    assert not hasattr(record, "trace_id")
    with tracing.span("work") as span:
        assert span is not None
        tracing.TraceIds().filter(record)
        assert tracing.exemplar() == {"trace_id": f"{span.get_span_context().trace_id:032x}"}
    assert record.trace_id == f"{span.get_span_context().trace_id:032x}"
    assert record.span_id == f"{span.get_span_context().span_id:016x}"


def test_spec_telemetry_renders_the_standard_variables() -> None:
    assert telemetry_environment(TelemetrySpec(), service="a", namespace="ns", deployment="d") == {}
    spec = TelemetrySpec.model_validate(
        {
            "endpoint": ENDPOINT,
            "sampleRatio": 0.25,
            "captureContent": True,
            "resourceAttributes": {"deployment.environment.name": "prod"},
        }
    )
    assert telemetry_environment(spec, service="researcher", namespace="ns", deployment="d") == {
        "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "researcher",
        "OTEL_RESOURCE_ATTRIBUTES": (
            "k8s.namespace.name=ns,pallas.deployment=d,deployment.environment.name=prod"
        ),
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
    }


@pytest.mark.parametrize(
    ("telemetry", "named"),
    [
        ({"endpoint": "http://user:pw@collector:4318"}, "credentials"),
        ({"endpoint": "collector:4318"}, "endpoint"),
        ({"endpoint": ENDPOINT, "sampleRatio": 1.5}, "sampleRatio"),
        ({"endpoint": ENDPOINT, "resourceAttributes": {"a b": "x"}}, "key 'a b'"),
        ({"endpoint": ENDPOINT, "resourceAttributes": {"team": "a,b=c"}}, r"resourceAttributes\[team\]"),
    ],
)
def test_bad_telemetry_settings_are_refused_by_name(telemetry: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        TelemetrySpec.model_validate(telemetry)


async def _call(app, headers: list[tuple[bytes, bytes]], status: int = 200) -> list[dict[str, object]]:
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/v0/servers", "headers": headers}
    await app(scope, receive, send)
    return sent


async def test_registry_requests_are_server_spans_continuing_the_callers_trace(
    recorded: InMemorySpanExporter,
) -> None:
    seen: list[str] = []

    async def app(scope, receive, send) -> None:
        seen.append(f"{tracing.exemplar()}")
        await send({"type": "http.response.start", "status": 503, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    traced = tracing.http_server_spans(app)
    await _call(traced, [(b"traceparent", f"00-{trace_id}-{parent}-01".encode())])
    [span] = recorded.get_finished_spans()
    assert span.name == "GET"
    assert f"{span.context.trace_id:032x}" == trace_id
    assert span.parent is not None
    assert f"{span.parent.span_id:016x}" == parent
    assert dict(span.attributes or {}) == {
        "http.request.method": "GET",
        "url.path": "/v0/servers",
        "http.response.status_code": 503,
    }
    assert not span.status.is_ok
    assert seen == [str({"trace_id": trace_id})]


async def test_an_agents_http_traceparent_becomes_the_parent_of_its_spans(
    recorded: InMemorySpanExporter,
) -> None:
    async def app(scope, receive, send) -> None:
        with tracing.span("tools/call send_message"):
            pass

    trace_id, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    await _call(tracing.continue_inbound(app), [(b"traceparent", f"00-{trace_id}-{parent}-01".encode())])
    await _call(tracing.continue_inbound(app), [])
    continued, fresh = recorded.get_finished_spans()
    assert f"{continued.context.trace_id:032x}" == trace_id
    assert continued.parent is not None
    assert f"{continued.parent.span_id:016x}" == parent
    assert fresh.parent is None
    assert f"{fresh.context.trace_id:032x}" != trace_id


def test_outgoing_headers_carry_the_current_span_only_inside_one(recorded: InMemorySpanExporter) -> None:
    outside: dict[str, str] = {}
    tracing.inject_headers(outside)
    assert outside == {}
    inside: dict[str, str] = {}
    with tracing.span("chat m") as span:
        assert span is not None
        tracing.inject_headers(inside)
    context = span.get_span_context()
    version, trace_id, parent, flags = inside["traceparent"].split("-")
    assert (version, trace_id, parent) == ("00", f"{context.trace_id:032x}", f"{context.span_id:016x}")
    assert int(flags, 16) & 1  # sampled


def test_off_no_header_is_added() -> None:
    headers: dict[str, str] = {}
    tracing.inject_headers(headers)
    assert headers == {}


@pytest.mark.parametrize(
    ("provider", "named"),
    [
        ({"type": "openai"}, "openai"),
        ({"type": "anthropic"}, "anthropic"),
        ({"type": "anthropic", "platform": "bedrock", "region": "us-east-1"}, "aws.bedrock"),
        (
            {"type": "anthropic", "platform": "vertex", "region": "us-east5", "projectId": "my-project"},
            "gcp.vertex_ai",
        ),
    ],
)
def test_the_provider_is_named_as_the_genai_conventions_name_it(provider: dict[str, str], named: str) -> None:
    config = ProviderConfig.model_validate({"name": "p", **provider})
    assert agent_tracing.provider_name(config) == named
