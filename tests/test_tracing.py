"""OpenTelemetry spans of the embedded engine (the SDK's in-memory exporter, a real LMDB store
and a real PostgreSQL one), and that tracing costs no import when no provider is set."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from _otel import spans, untraced_afterwards  # noqa: E402,F401
from _support import run  # noqa: E402
from tracing_app import parent, traced  # noqa: E402
from weft_actors import Engine, activity, workflow  # noqa: E402
from weft_actors.errors import InvalidRequest  # noqa: E402

def _by_name(found: Any, prefix: str) -> list[Any]:
    return [span for span in found if span.name.startswith(prefix)]

pytestmark = pytest.mark.usefixtures("untraced_afterwards")  # the tests after run untraced


async def _run_traced(store: str, gate: Path) -> tuple[Any, dict[str, Any]]:
    gate.write_text("open")
    async with Engine(store, app=[traced], heartbeat=0.2, ttl=0.6) as engine:
        handle = await engine.start(traced, "k1", str(gate), id="trace-1")
        assert await handle.result(timeout=20) == ["prepared k1", "flaky ok k1", "held"]
        record = engine._host.store.get_workflow("trace-1")
    return record, {}


@pytest.mark.timeout(60)
def test_a_workflow_is_one_trace_with_a_span_per_attempt(tmp_path):
    exporter = spans()
    record, _ = run(_run_traced(str(tmp_path / "data"), tmp_path / "gate"))
    found = exporter.get_finished_spans()
    (start,) = _by_name(found, "weft start traced")
    (run_span,) = _by_name(found, "weft run traced")
    attempts = _by_name(found, "weft activity")
    assert start.parent is None  # the embedded engine's start is the root
    assert {span.context.trace_id for span in found} == {start.context.trace_id}
    assert run_span.parent.span_id == start.context.span_id
    assert record["trace"][:-3] == f"00-{start.context.trace_id:032x}-{start.context.span_id:016x}"
    assert [(s.name, s.attributes["weft.activity.attempt"], s.attributes["weft.activity.outcome"]) for s in attempts] == [
        ("weft activity prepare", 1, "completed"),
        ("weft activity flaky", 1, "retrying"),
        ("weft activity flaky", 2, "completed"),
        ("weft activity hold", 1, "completed"),
    ]
    assert all(span.parent.span_id == run_span.context.span_id for span in attempts)
    failed = attempts[1]
    assert failed.status.status_code is StatusCode.ERROR
    assert "downstream said no for k1" in failed.status.description
    (event,) = failed.events
    assert event.name == "exception" and event.attributes["exception.type"] == "RuntimeError"
    assert all(span.status.status_code is not StatusCode.ERROR for span in attempts if span is not failed)
    assert run_span.attributes["weft.outcome"] == "completed"


@pytest.mark.timeout(60)
def test_the_trace_context_is_recorded_in_postgres_too(tmp_path, schema_url):
    exporter = spans()
    record, _ = run(_run_traced(schema_url, tmp_path / "gate"))
    (start,) = _by_name(exporter.get_finished_spans(), "weft start traced")
    assert record["trace"][:-3] == f"00-{start.context.trace_id:032x}-{start.context.span_id:016x}"
    assert len(_by_name(exporter.get_finished_spans(), "weft activity")) == 4


@pytest.mark.timeout(60)
def test_a_given_traceparent_is_the_parent_and_a_malformed_one_is_refused(tmp_path):
    exporter = spans()
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    (tmp_path / "gate").write_text("open")

    async def main() -> None:
        async with Engine(str(tmp_path / "data"), app=[traced]) as engine:
            for bad in ("bogus", "00-" + "0" * 32 + "-b7ad6b7169203331-01", parent.upper(), 7):
                with pytest.raises(InvalidRequest, match="traceparent"):
                    await engine.start(traced, "k", str(tmp_path / "gate"), id="bad", traceparent=bad)
            assert engine._host.store.get_workflow("bad") is None  # a refused start writes nothing
            with pytest.raises(InvalidRequest) as huge:  # a huge one is not echoed whole
                await engine.start(traced, "k", str(tmp_path / "gate"), id="bad", traceparent="x" * 1_000_000)
            assert len(str(huge.value)) < 300 and "1000002 characters" in str(huge.value)
            handle = await engine.start(traced, "k", str(tmp_path / "gate"), id="given", traceparent=parent)
            await handle.result(timeout=20)

    run(main())
    (start,) = _by_name(exporter.get_finished_spans(), "weft start traced")
    assert f"{start.context.trace_id:032x}" == parent[3:35]
    assert f"{start.parent.span_id:016x}" == parent[36:52]


_NO_PROVIDER = textwrap.dedent(
    """
    import asyncio, sys, tempfile
    from pathlib import Path

    class Hidden:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ImportError("hidden: " + name)
            return None

    if sys.argv[1] == "hidden":
        sys.meta_path.insert(0, Hidden())
    else:
        import opentelemetry.trace  # installed and imported, but no provider set

    from tracing_app import traced
    from weft_actors import Engine, _tracing

    async def main():
        with tempfile.TemporaryDirectory() as data:
            gate = Path(data) / "gate"
            gate.write_text("open")
            async with Engine(data + "/store", app=[traced]) as engine:
                handle = await engine.start(traced, "k", str(gate), id="quiet")
                assert await handle.result(timeout=20) == ["prepared k", "flaky ok k", "held"]
                assert "trace" not in engine._host.store.get_workflow("quiet")
        assert _tracing.ACTIVE is None and not _tracing._runs
        print("imported" if "opentelemetry" in sys.modules else "not imported")

    asyncio.run(main())
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode, expected", [("hidden", "not imported"), ("installed", "imported")])
def test_without_a_provider_nothing_is_traced_and_nothing_imported(mode, expected):
    tests = str(Path(__file__).parent)
    env_path = ":".join(p for p in (tests, *sys.path) if p)
    done = subprocess.run(
        [sys.executable, "-c", _NO_PROVIDER, mode], capture_output=True, text=True, timeout=50,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


@pytest.mark.timeout(60)
def test_a_child_and_a_continued_run_stay_in_the_trace(tmp_path):
    exporter = spans()
    gate = tmp_path / "gate"
    gate.write_text("open")

    async def main() -> None:
        async with Engine(str(tmp_path / "data"), app=[parent, traced]) as engine:
            handle = await engine.start(parent, "p", str(gate), id="fam")
            assert await handle.result(timeout=20) == ["prepared p+"]

    run(main())
    found = exporter.get_finished_spans()
    (start,) = _by_name(found, "weft start parent")
    assert {span.context.trace_id for span in found} == {start.context.trace_id}
    first, second = _by_name(found, "weft run parent")
    assert first.attributes["weft.outcome"] == "continued" and second.attributes["weft.outcome"] == "completed"
    assert first.parent.span_id == second.parent.span_id == start.context.span_id
    (child,) = _by_name(found, "weft run traced")
    assert child.parent.span_id == first.context.span_id
    assert len(_by_name(found, "weft activity")) == 5


@activity
async def looked_up(key: str) -> str:
    await asyncio.sleep(0.01)  # suspends: the rest runs in a task of its own
    with trace.get_tracer("app").start_as_current_span("app lookup"):
        return key


@activity
def written(key: str) -> str:  # a plain def: runs in a thread
    with trace.get_tracer("app").start_as_current_span("app write"):
        return key


@workflow
async def nested(ctx, key: str) -> list:
    return [await ctx.run(looked_up, key), await ctx.run(written, key)]


@pytest.mark.timeout(60)
def test_an_activitys_own_spans_are_children_of_its_attempt(tmp_path):
    exporter = spans()

    async def main() -> None:
        async with Engine(str(tmp_path / "data"), app=[nested]) as engine:
            handle = await engine.start(nested, "n", id="nest")
            assert await handle.result(timeout=20) == ["n", "n"]

    run(main())
    found = {span.name: span for span in exporter.get_finished_spans()}
    assert found["app lookup"].parent.span_id == found["weft activity looked_up"].context.span_id
    assert found["app write"].parent.span_id == found["weft activity written"].context.span_id
