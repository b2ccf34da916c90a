"""The tracing tests' in-memory span exporter, behind this process's global tracer provider."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["spans", "untraced_afterwards"]

_EXPORTER = InMemorySpanExporter()


def spans() -> InMemorySpanExporter:
    """The in-memory exporter behind this process's global tracer provider (set once: the API
    refuses a second one), emptied."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not getattr(provider, "_weft_test_exporter", False):
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        provider._weft_test_exporter = True  # type: ignore[attr-defined]
    _EXPORTER.clear()
    return _EXPORTER


@pytest.fixture
def untraced_afterwards():
    """Unset the global tracer provider after the test (as the API's own tests do): the tests
    a worker runs next must run untraced, as they would alone."""
    yield
    from opentelemetry.util._once import Once

    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    from weft_actors import _tracing

    _tracing.tracer()  # off again at once, not at the next engine's open
