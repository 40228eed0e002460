"""OpenTelemetry setup and trace-context propagation through AMQP headers, and a rate window
for calls-per-second gauges.

One trace spans api → scheduler → node-agent: the publisher injects the W3C context into
the message headers and the consumer starts its span as a child of it.
"""

import time
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

_provider: TracerProvider | None = None


def setup_tracing(service_name: str, otlp_endpoint: str = "", extra_processor: SpanProcessor | None = None) -> TracerProvider:
    """Install a tracer provider once per process; later calls only add processors."""
    global _provider
    if _provider is None:
        _provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        trace.set_tracer_provider(_provider)
        if otlp_endpoint:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint)))
    if extra_processor is not None:
        _provider.add_span_processor(extra_processor)
    return _provider


def instrument_app(app: Any) -> None:
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(app, excluded_urls="healthz,metrics")


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)


def inject_headers(headers: dict[str, Any] | None = None) -> dict[str, Any]:
    carrier: dict[str, Any] = dict(headers or {})
    propagate.inject(carrier)
    return carrier


@contextmanager
def consume_span(name: str, headers: Mapping[str, Any] | None, **attributes: Any) -> Iterator[trace.Span]:
    """A consumer span whose parent is the context carried by the message headers."""
    carrier = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in (headers or {}).items()}
    parent = propagate.extract(carrier)
    token = context.attach(parent)
    try:
        with trace.get_tracer("corral.amqp").start_as_current_span(
            name, kind=trace.SpanKind.CONSUMER, attributes={k: str(v) for k, v in attributes.items()}
        ) as span:
            yield span
    finally:
        context.detach(token)


class RateWindow:
    """Events per second over a sliding window (for the calls/s gauges)."""

    def __init__(self, window_s: float = 10.0):
        self.window_s = window_s
        self._times: deque[float] = deque()

    def add(self, now: float | None = None) -> None:
        self._times.append(now if now is not None else time.monotonic())

    def rate(self, now: float | None = None) -> float:
        now = now if now is not None else time.monotonic()
        while self._times and self._times[0] < now - self.window_s:
            self._times.popleft()
        return len(self._times) / self.window_s
