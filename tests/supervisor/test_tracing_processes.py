"""OpenTelemetry across processes: a ``Client`` (the SDK's in-memory exporter here) starts a
workflow on a real supervisor whose shards export their spans to files (``tracing_app``);
the client's span is the trace's root, and a takeover goes on in the same trace; an
``AsyncClient``'s start, signal and update are spans of the caller's trace."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from _otel import spans, untraced_afterwards  # noqa: E402,F401
from _processes import RunningSupervisor, wait_until  # noqa: E402
from _support import run  # noqa: E402
from weft_actors import AsyncClient, Client  # noqa: E402
from weft_actors.bus import _calls  # noqa: E402
from weft_actors.errors import InvalidRequest, WorkflowNotFound  # noqa: E402

APP = "tracing_app"
FAST = ("--heartbeat", "0.2", "--ttl", "0.6")

pytestmark = pytest.mark.usefixtures("untraced_afterwards")  # the tests after run untraced


def _shard_spans(trace_dir: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted(trace_dir.glob("spans-*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                span = json.loads(line)
                span["pid"] = int(path.stem.split("-")[1])
                found.append(span)
    return found


def _named(found: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [span for span in found if span["name"].startswith(prefix)]


def _hex(value: int, width: int) -> str:
    return f"0x{value:0{width}x}"


def _supervisor(tmp_path: Path) -> tuple[RunningSupervisor, Path]:
    trace_dir = tmp_path / "spans"
    trace_dir.mkdir()
    sup = RunningSupervisor(tmp_path / "data", app=APP, args=FAST, env={"WEFT_TEST_TRACE_DIR": str(trace_dir)})
    return sup, trace_dir


@pytest.mark.timeout(90)
def test_a_client_start_is_the_root_of_one_trace_with_a_span_per_attempt(tmp_path):
    exporter = spans()
    gate = tmp_path / "gate"
    gate.write_text("open")
    sup, trace_dir = _supervisor(tmp_path)
    with sup, Client(sup.endpoint) as client:
        bad = _calls.start_call("traced", ("k0", str(gate)), id="bad-trace")
        bad.fields["traceparent"] = "00-not-a-trace-01"  # as a foreign client might send it
        with pytest.raises(InvalidRequest, match="traceparent"):
            client._request(bad)
        with pytest.raises(WorkflowNotFound):
            client.get_handle("bad-trace").describe()  # refused whole: nothing written
        handle = client.start("traced", "k1", str(gate), id="trace-1")
        assert handle.result(timeout=30) == ["prepared k1", "flaky ok k1", "held"]
        found = wait_until(lambda: (f := _shard_spans(trace_dir)) and _named(f, "weft run") and f, timeout=10)
    (root,) = [span for span in exporter.get_finished_spans() if span.name == "weft start traced"]
    assert root.parent is None and root.kind is SpanKind.CLIENT
    trace_id = _hex(root.context.trace_id, 32)
    assert {span["context"]["trace_id"] for span in found} == {trace_id}
    (start,) = _named(found, "weft start")
    assert start["parent_id"] == _hex(root.context.span_id, 16)
    (run_span,) = _named(found, "weft run")
    assert run_span["parent_id"] == start["context"]["span_id"]
    attempts = _named(found, "weft activity")
    assert [(a["name"], a["attributes"]["weft.activity.attempt"], a["attributes"]["weft.activity.outcome"]) for a in attempts] == [
        ("weft activity prepare", 1, "completed"),
        ("weft activity flaky", 1, "retrying"),
        ("weft activity flaky", 2, "completed"),
        ("weft activity hold", 1, "completed"),
    ]
    assert all(a["parent_id"] == run_span["context"]["span_id"] for a in attempts)
    failed = attempts[1]
    assert failed["status"]["status_code"] == StatusCode.ERROR.name
    assert failed["events"][0]["name"] == "exception"
    assert "downstream said no for k1" in failed["events"][0]["attributes"]["exception.message"]


@pytest.mark.timeout(90)
def test_a_takeover_goes_on_in_the_same_trace(tmp_path):
    exporter = spans()
    gate = tmp_path / "gate"
    sup, trace_dir = _supervisor(tmp_path)
    with sup, Client(sup.endpoint) as client:
        handle = client.start("traced", "k2", str(gate), id="trace-2")
        started = Path(str(gate) + ".started")
        wait_until(started.exists, timeout=20)
        victim = int(wait_until(lambda: started.read_text().strip(), timeout=5))
        os.kill(victim, signal.SIGKILL)  # in the middle of the third activity
        wait_until(lambda: int(started.read_text().strip() or 0) != victim, timeout=20)  # a new owner runs it again
        gate.write_text("open")
        assert handle.result(timeout=30) == ["prepared k2", "flaky ok k2", "held"]
        found = wait_until(lambda: (f := _shard_spans(trace_dir)) and _named(f, "weft run") and f, timeout=10)
    (root,) = [span for span in exporter.get_finished_spans() if span.name == "weft start traced"]
    assert {span["context"]["trace_id"] for span in found} == {_hex(root.context.trace_id, 32)}
    (start,) = _named(found, "weft start")
    (run_span,) = _named(found, "weft run")  # the killed owner's run span never ended
    assert run_span["pid"] != victim and run_span["parent_id"] == start["context"]["span_id"]
    held = [a for a in _named(found, "weft activity hold") if a["pid"] != victim]
    assert [(a["attributes"]["weft.activity.outcome"], a["parent_id"]) for a in held] == [("completed", run_span["context"]["span_id"])]
    before = [a for a in _named(found, "weft activity") if a["pid"] == victim]
    assert [a["name"] for a in before] == ["weft activity prepare", "weft activity flaky", "weft activity flaky"]


@pytest.mark.timeout(90)
def test_async_client_start_signal_and_update_are_spans_of_the_callers_trace(tmp_path):
    exporter = spans()
    sup, trace_dir = _supervisor(tmp_path)
    tracer = trace.get_tracer("test")

    async def main() -> None:
        async with AsyncClient(sup.endpoint) as client:
            with tracer.start_as_current_span("checkout"):
                handle = await client.start("counter", id="count-1")
                assert await handle.update("add", 2) == 2
                await handle.signal("done")
            assert await handle.result(timeout=20) == 2
            alone = await client.start("counter", id="count-2")  # no span around: the start is the root
            assert await alone.update("add", 5) == 5
            await alone.signal("done")
            assert await alone.result(timeout=20) == 5

    with sup:
        run(main())
        found = wait_until(lambda: (f := _shard_spans(trace_dir)) and _named(f, "weft run") and f, timeout=10)
    finished = exporter.get_finished_spans()
    mine = {span.name: span for span in finished[:4]}
    parent = mine["checkout"]
    root, update, signal_span = finished[4:]
    assert root.name == "weft start counter" and root.parent is None
    assert [(s.name, s.parent.span_id, s.context.trace_id) for s in (update, signal_span)] == [
        ("weft update add", root.context.span_id, root.context.trace_id),
        ("weft signal done", root.context.span_id, root.context.trace_id),
    ]
    assert [mine[name].parent.span_id for name in ("weft start counter", "weft update add", "weft signal done")] == [parent.context.span_id] * 3
    assert all(mine[name].kind is SpanKind.CLIENT for name in ("weft start counter", "weft update add", "weft signal done"))
    assert {span["context"]["trace_id"] for span in found} == {_hex(parent.context.trace_id, 32), _hex(root.context.trace_id, 32)}
    assert sorted(start["parent_id"] for start in _named(found, "weft start counter")) == sorted(
        _hex(span.context.span_id, 16) for span in (mine["weft start counter"], root)
    )
