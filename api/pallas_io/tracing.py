"""Traces (OpenTelemetry) for every Pallas process, off unless the standard `OTEL_*` variables say.

On when an OTLP endpoint is set (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
`OTEL_EXPORTER_OTLP_ENDPOINT`), unless `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.
Then `setup_tracing` installs the SDK's TracerProvider (service name from `OTEL_SERVICE_NAME`,
else the process's; `OTEL_RESOURCE_ATTRIBUTES`; `OTEL_TRACES_SAMPLER`/`_ARG`, parent-based
always-on by default) with a batching OTLP/HTTP exporter, and every span of the process goes
there: ours (`span`), fastmcp's and the MCP SDK's (server spans per request, client spans per
call with the W3C `traceparent` in the request's `_meta`).

Off, nothing of the SDK is imported and `span` hands back one shared no-op context manager: no
span object, no allocation per call. Call sites test `enabled()` before building attributes.

Log records get `trace_id` and `span_id` while a span is current (`TraceIds`, on the handlers
only when tracing is on), so an audit or error line leads to its trace; `exemplar` gives the
trace id a latency histogram observation carries.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, StatusCode

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "SpanKind",
    "TraceIds",
    "capture_content",
    "continue_inbound",
    "continued",
    "enabled",
    "exemplar",
    "http_server_spans",
    "inject_headers",
    "setup_tracing",
    "shutdown",
    "span",
    "tracing_wanted",
    "use_provider",
]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI conventions' switch for prompts, answers and tool arguments on spans (off by default)."""
_TRUE = frozenset({"1", "true", "yes", "on"})
_SUPPORTED_PROTOCOLS = frozenset({"", "http/protobuf"})
_NOOP: AbstractContextManager[None] = contextlib.nullcontext()

_state: dict[str, Any] = {"enabled": False, "content": False, "tracer": None, "sdk": None}


def tracing_wanted(environ: Mapping[str, str]) -> bool:
    """Whether `environ` asks for traces: an OTLP endpoint, the SDK and the exporter not off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )


def setup_tracing(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Install the SDK when the environment asks for traces; whether tracing is now on.

    Once per process: a second call (another agent of `pallas run`) keeps the first provider.

    Raises:
        ValueError: an `OTEL_*` value this process cannot honour (another protocol than
            http/protobuf, another exporter than otlp), named.
    """
    env = os.environ if environ is None else environ
    if _state["enabled"]:
        return True
    if not tracing_wanted(env):
        return False
    exporter_name = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if exporter_name != "otlp":
        raise ValueError(f"OTEL_TRACES_EXPORTER={exporter_name!r} is not supported (otlp or none)")
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = env.get(variable, "").strip()
        if protocol not in _SUPPORTED_PROTOCOLS:
            raise ValueError(f"{variable}={protocol!r} is not supported: Pallas exports http/protobuf")
        if protocol:
            break
    # The SDK is imported only when used: off, a process loads none of it.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    named = "OTEL_SERVICE_NAME" in env or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _state["sdk"] = provider
    use_provider(provider, capture=env.get(CAPTURE_CONTENT_ENV, "").strip().lower() in _TRUE)
    for handler in logging.getLogger().handlers:
        handler.addFilter(TraceIds())
    logging.getLogger("pallas.tracing").info(
        "traces on: OTLP/HTTP to %s",
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"),
    )
    return True


def shutdown() -> None:
    """Export the spans still batched and stop the exporter (a process about to leave).

    The SDK does this at interpreter exit; a process that skips the teardown
    (`pallas_io.serving.leave`) calls it first. Without the SDK installed, nothing.
    """
    provider = _state["sdk"]
    if provider is not None:
        _state["sdk"] = None
        provider.shutdown()


def use_provider(provider: trace.TracerProvider | None, *, capture: bool = False) -> None:
    """Record Pallas's own spans with `provider` (None: off again), content only if `capture`.

    `setup_tracing` calls it with the SDK provider it installs globally; a program embedding
    the runtime with a provider of its own calls it directly (fastmcp's and the MCP SDK's spans
    follow the global provider only).
    """
    _state.update(
        enabled=provider is not None,
        content=capture and provider is not None,
        tracer=provider.get_tracer("pallas") if provider is not None else None,
    )


def enabled() -> bool:
    """Whether this process records spans (test it before building a span's attributes)."""
    return bool(_state["enabled"])


def capture_content() -> bool:
    """Whether prompts, answers and tool arguments go on spans (`CAPTURE_CONTENT_ENV`)."""
    return bool(_state["content"])


def span(
    name: str, kind: SpanKind = SpanKind.INTERNAL, attributes: Mapping[str, Any] | None = None
) -> AbstractContextManager[Span | None]:
    """A span around a block, current within it; the shared no-op when tracing is off.

    An exception leaving the block is recorded on the span and sets its status to error.
    """
    tracer = _state["tracer"]
    if tracer is None:
        return _NOOP
    cm: AbstractContextManager[Span] = tracer.start_as_current_span(name, kind=kind, attributes=attributes)
    return cm


@contextlib.contextmanager
def _attached(carrier: Mapping[str, str]) -> Iterator[None]:
    token = otel_context.attach(propagate.extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)


def continued(carrier: Mapping[str, str]) -> AbstractContextManager[None]:
    """Within the block, spans continue the W3C trace context `carrier` holds (`traceparent`).

    Off, or without a `traceparent`, it changes nothing.
    """
    if not _state["enabled"] or "traceparent" not in carrier:
        return _NOOP
    return _attached(carrier)


_HEADERS = {b"traceparent": "traceparent", b"tracestate": "tracestate"}


def continue_inbound(app: Any) -> Any:
    """The ASGI `app`, continuing the trace of an HTTP request's `traceparent` header.

    MCP requests carry theirs in `_meta` too (fastmcp continues that one); a header set by a
    proxy or a web client (Daedalus) is continued this way. Off, `app` itself.
    """
    if not _state["enabled"]:
        return app

    async def traced(scope: dict[str, Any], receive: Any, send: Any) -> None:
        carrier = {}
        if scope["type"] == "http":
            carrier = {_HEADERS[k]: v.decode("latin-1") for k, v in scope["headers"] if k in _HEADERS}
        with continued(carrier):
            await app(scope, receive, send)

    return traced


def http_server_spans(app: Any) -> Any:
    """The ASGI `app` with a SERVER span per HTTP request, continuing an inbound `traceparent`.

    Off, `app` itself. For the registry (the agents' MCP requests get theirs from fastmcp). The
    span is named by the method alone, as the HTTP conventions say without a route template;
    the path is its `url.path`.
    """
    if not _state["enabled"]:
        return app

    async def traced(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        carrier = {_HEADERS[k]: v.decode("latin-1") for k, v in scope["headers"] if k in _HEADERS}
        status: dict[str, int] = {}

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        method, path = scope["method"], scope["path"]
        attributes = {"http.request.method": method, "url.path": path}
        with continued(carrier), span(method, SpanKind.SERVER, attributes) as current:
            await app(scope, receive, sending)
            if current is not None and "code" in status:
                current.set_attribute("http.response.status_code", status["code"])
                if status["code"] >= 500:
                    current.set_status(StatusCode.ERROR)

    return traced


def inject_headers(headers: MutableMapping[str, str]) -> None:
    """Add the current span's `traceparent` (and `tracestate`) to outgoing HTTP `headers`.

    Only for a request sent from the task whose span it belongs to (an LLM call): a connection's
    background writer would carry whichever span opened it. Off, or outside a span, nothing.
    """
    if _state["enabled"] and trace.get_current_span().get_span_context().is_valid:
        propagate.inject(headers)


def _current_ids() -> tuple[str, str] | None:
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)


def exemplar() -> dict[str, str] | None:
    """The current trace as a histogram exemplar (`{"trace_id": …}`), None when there is none."""
    if not _state["enabled"]:
        return None
    ids = _current_ids()
    return None if ids is None else {"trace_id": ids[0]}


class TraceIds(logging.Filter):
    """Adds `trace_id` and `span_id` to every record logged while a span is current."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Set the ids when there is a current span; never drops the record."""
        ids = _current_ids()
        if ids is not None and not hasattr(record, "trace_id"):
            record.trace_id, record.span_id = ids
        return True
