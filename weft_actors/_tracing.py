"""OpenTelemetry spans, when the application configured a tracer provider (the ``otel`` extra).

One trace per workflow: the client's ``start`` span is its root (``signal``/``update`` spans
go in the caller's current trace, else in that of the start that made the handle); the
engine's start span is its child; each owner of the run opens a ``run`` span under the trace
context recorded with the workflow at its start (W3C ``traceparent``, in the workflow
record), so a takeover, a wake from eviction or continue-as-new goes on in the same trace;
each activity attempt is a span under its run's, a child workflow's run under its parent's.

Tracing costs nothing when it is off. ``opentelemetry`` is never imported here: ``tracer()``
looks for the module in ``sys.modules`` (an application that set a provider imported it) and
caches the tracer in ``ACTIVE``; the engine's hot paths test that one global and call in only
when it is set. ``tracer()`` runs at each client call and at the engine's open and each
maintenance pass, so a provider set after an engine opened is picked up within a heartbeat.
The spans of the runs and attempts in flight are kept here, by actor (so the engines of one
process never mix), and only while tracing is on: like the provider, they are per process.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any, Awaitable, Callable, Coroutine, Final

from .errors import InvalidRequest

__all__ = ["ACTIVE", "tracer", "check_traceparent", "client_call", "client_acall", "traced_start", "child_trace", "run_opened", "run_ended", "run_left", "run_attempt", "attempt_ended"]

log = logging.getLogger("weft_actors.tracing")

ACTIVE: Any = None
"""The tracer of the configured provider, or None: tracing is off (the hot paths' one check)."""

_modules: Final = sys.modules
_provider: Any = None
_UNKNOWN: Final = object()
_TRACEPARENT: Final = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_START_OPS: Final = frozenset({"start", "execute", "signal_with_start"})

_runs: dict[Any, tuple[Any, dict[int, Any]]] = {}
"""actor -> its open run span (this owner's) and the spans of its attempts in flight, by op seq."""


def tracer(configure: bool = False) -> Any:
    """The ``weft_actors`` tracer of the global tracer provider, or None when no provider is
    set (or ``opentelemetry`` was never imported); refreshes ``ACTIVE``. Per call it reads the
    provider ``set_tracer_provider`` stored: ``get_tracer_provider()`` looks in the environment
    each time none is set (a microsecond), so only ``configure`` (an engine's open and
    maintenance pass) asks it, which also loads one named by ``OTEL_PYTHON_TRACER_PROVIDER``."""
    global ACTIVE, _provider
    otel = _modules.get("opentelemetry.trace")
    if otel is None:
        ACTIVE = None
        return None
    provider: Any = getattr(otel, "_TRACER_PROVIDER", _UNKNOWN)
    if configure or provider is _UNKNOWN:
        provider = otel.get_tracer_provider()
    elif provider is None:
        ACTIVE = None
        return None
    if provider is not _provider:
        _provider = provider
        off = isinstance(provider, (otel.ProxyTracerProvider, otel.NoOpTracerProvider))
        ACTIVE = None if off else provider.get_tracer("weft_actors")
    return ACTIVE


def check_traceparent(value: Any) -> str:
    """``value`` if it is a W3C ``traceparent`` (version 00 form), else ``InvalidRequest``."""
    if (
        not isinstance(value, str)
        or _TRACEPARENT.fullmatch(value) is None
        or value.startswith("ff")
        or value[3:35] == "0" * 32
        or value[36:52] == "0" * 16
    ):
        shown = repr(value) if len(repr(value)) <= 80 else f"{repr(value)[:60]}... ({len(repr(value))} characters)"
        raise InvalidRequest(f"traceparent must be a W3C traceparent such as '00-<32 hex>-<16 hex>-01', not {shown}")
    return value


def _context(traceparent: str | None) -> Any:
    """The OpenTelemetry context whose (remote) parent ``traceparent`` names; None: a root."""
    if traceparent is None:
        return None
    from opentelemetry import trace

    _, trace_id, span_id, flags = traceparent.split("-")
    parent = trace.SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=trace.TraceFlags(int(flags, 16)))
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))


def _traceparent(span: Any) -> str:
    found = span.get_span_context()
    return f"00-{found.trace_id:032x}-{found.span_id:016x}-{int(found.trace_flags):02x}"


def _workflow_name(workflow: Any) -> str:
    definition = getattr(workflow, "__weft_workflow__", None)
    return workflow if isinstance(workflow, str) else getattr(definition, "name", repr(workflow))


def _client_span(call: Any) -> tuple[str, dict[str, Any]]:
    fields = call.fields
    attributes = {"weft.workflow.id": fields["wid"]} if fields.get("wid") is not None else {}
    if call.op in _START_OPS:
        attributes["weft.workflow.type"] = fields["workflow"]
        return f"weft {call.op} {fields['workflow']}", attributes
    return f"weft {call.op} {fields['name']}", attributes


def _parent(started: str | None) -> Any:
    """The context of a handle's call: the caller's current span, else the trace of the start
    that made the handle (``started``), else none (a root)."""
    from opentelemetry import trace

    if started is None or trace.get_current_span().get_span_context().is_valid:
        return None
    return _context(started)


def client_call(request: Callable[[Any], Any], call: Any, started: str | None = None) -> Any:
    """``request(call)`` inside a client span (ERROR with the exception if it raises); a start
    carries the span's context as ``traceparent``. ``started``: see ``_parent``."""
    from opentelemetry.trace import SpanKind

    name, attributes = _client_span(call)
    with ACTIVE.start_as_current_span(name, context=_parent(started), kind=SpanKind.CLIENT, attributes=attributes) as span:
        if call.op in _START_OPS:
            call.fields["traceparent"] = _traceparent(span)
        return request(call)


async def client_acall(request: Callable[[Any], Awaitable[Any]], call: Any, started: str | None = None) -> Any:
    """``client_call`` for ``AsyncClient``."""
    from opentelemetry.trace import SpanKind

    name, attributes = _client_span(call)
    with ACTIVE.start_as_current_span(name, context=_parent(started), kind=SpanKind.CLIENT, attributes=attributes) as span:
        if call.op in _START_OPS:
            call.fields["traceparent"] = _traceparent(span)
        return await request(call)


async def traced_start(workflow: Any, options: dict[str, Any], call: Coroutine[Any, Any, Any]) -> Any:
    """Await an engine's start ``call`` (not begun yet: it reads ``options`` when it runs)
    inside a span under the request's ``traceparent``; the span's own context is what the
    start records for the run."""
    from opentelemetry.trace import SpanKind

    parent = options.get("traceparent")
    if parent is not None:
        try:
            check_traceparent(parent)
        except InvalidRequest:
            call.close()  # refused before it began: nothing was submitted
            raise
    kind = SpanKind.INTERNAL if parent is None else SpanKind.SERVER
    attributes = {"weft.workflow.type": _workflow_name(workflow)}
    if options.get("id") is not None:
        attributes["weft.workflow.id"] = options["id"]
    with ACTIVE.start_as_current_span(f"weft start {attributes['weft.workflow.type']}", context=_context(parent), kind=kind, attributes=attributes) as span:
        options["traceparent"] = _traceparent(span)
        return await call


def run_opened(actor: Any) -> None:
    """``actor`` (a run this engine now owns) opens its run span, under the trace context its
    workflow recorded at its start (a root span if it recorded none)."""
    try:
        record = actor.engine.store.get_workflow(actor.wid)
        recorded = None if record is None else record.get("trace")
        span = ACTIVE.start_span(
            f"weft run {actor.run.workflow_type}",
            context=_context(recorded),
            attributes={"weft.workflow.id": actor.wid, "weft.workflow.run_id": actor.run_id, "weft.engine.id": actor.engine.engine_id},
        )
    except Exception:
        log.exception("workflow %s: could not open its run span", actor.wid)
        return
    _runs[actor] = (span, {})


def child_trace(actor: Any) -> str | None:
    """The trace context a child started by ``actor``'s run records: its run span's."""
    found = _runs.get(actor)
    return None if found is None else _traceparent(found[0])


def run_ended(actor: Any) -> None:
    """``actor``'s run ended (its ending committed): its run span ends with the outcome."""
    found = _runs.pop(actor, None)
    if found is None:
        return
    from opentelemetry.trace import Status, StatusCode

    span = found[0]
    finish = actor.finish
    outcome = "continued" if actor.next_run is not None else (finish.status if finish is not None else "completed")
    span.set_attribute("weft.outcome", outcome)
    if outcome in ("failed", "timed_out"):
        error = (finish.error or {}) if finish is not None else {}
        span.set_status(Status(StatusCode.ERROR, str(error.get("message", outcome))))
    _end_attempts(found[1])
    span.end()


def run_left(actor: Any) -> None:
    """``actor`` left this engine without ending (evicted, deposed, stopping): its run span
    ends here, and the next owner (or wake) opens another in the same trace."""
    found = _runs.pop(actor, None)
    if found is not None:
        found[0].set_attribute("weft.outcome", "left")
        _end_attempts(found[1])
        found[0].end()


def _end_attempts(attempts: dict[int, Any]) -> None:
    for span in attempts.values():
        span.set_attribute("weft.activity.outcome", "abandoned")
        span.end()


def run_attempt(actor: Any, info: Any, run: Callable[..., Any], *args: Any) -> Any:
    """``run(*args)``, which starts attempt ``info`` of an activity, with the attempt's span
    (under its run's) current: the activity's own spans, in its task or thread (each copies
    the context it starts in), are its children."""
    found = _runs.get(actor)
    if found is None:
        return run(*args)
    from opentelemetry import context, trace

    span = found[1][info.seq] = ACTIVE.start_span(
        f"weft activity {info.activity}",
        context=trace.set_span_in_context(found[0]),
        attributes={"weft.workflow.id": actor.wid, "weft.activity.name": info.activity, "weft.activity.seq": info.seq, "weft.activity.attempt": info.attempt},
    )
    token = context.attach(trace.set_span_in_context(span))
    try:
        return run(*args)
    finally:
        context.detach(token)


def attempt_ended(actor: Any, seq: int, error: BaseException | None, outcome: str) -> None:
    """The attempt of op ``seq`` came to ``outcome`` (``completed``, ``retrying``, ``failed``):
    a failed one's span has status ERROR and the exception as an event."""
    found = _runs.get(actor)
    span = None if found is None else found[1].pop(seq, None)
    if span is None:
        return
    span.set_attribute("weft.activity.outcome", outcome)
    if error is not None:
        from opentelemetry.trace import Status, StatusCode

        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    span.end()
