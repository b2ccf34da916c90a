"""The app of the tracing tests: three activities, the second failing its first attempt, the
third held until a gate file exists (a shard can be killed in the middle of it).

In a shard process with ``WEFT_TEST_TRACE_DIR`` set, importing it sets the global tracer
provider, exporting each span as it ends to ``spans-<pid>.jsonl`` in that directory (the
SDK's console exporter, one JSON document a line): a shard killed later keeps what it wrote.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import time
from pathlib import Path

from weft_actors import RetryPolicy, activity, workflow

_TRACE_DIR = os.environ.get("WEFT_TEST_TRACE_DIR")
if _TRACE_DIR and multiprocessing.current_process().name.startswith("shard"):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    _out = open(Path(_TRACE_DIR) / f"spans-{os.getpid()}.jsonl", "a", buffering=1)
    _provider = TracerProvider()
    _provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=_out, formatter=lambda span: json.dumps(json.loads(span.to_json())) + "\n")))
    trace.set_tracer_provider(_provider)


@activity
async def prepare(key: str) -> str:
    return f"prepared {key}"


@activity(retry=RetryPolicy(max_attempts=3, initial_interval=0.01))
async def flaky(key: str) -> str:
    if activity.info().attempt == 1:
        raise RuntimeError(f"downstream said no for {key}")
    return f"flaky ok {key}"


@activity
async def hold(gate: str) -> str:
    """Notes its process, then waits (30 s at most) for the gate file."""
    Path(gate + ".started").write_text(str(os.getpid()))
    deadline = time.monotonic() + 30
    while not os.path.exists(gate) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return "held"


@workflow
async def traced(ctx, key: str, gate: str) -> list:
    return [await ctx.run(prepare, key), await ctx.run(flaky, key), await ctx.run(hold, gate)]


@workflow
async def counter(ctx) -> int:
    """Counts ``add`` updates until the ``done`` signal."""
    total = {"n": 0}

    def add(n: int) -> int:
        total["n"] += n
        return total["n"]

    ctx.on_update("add", add)
    await ctx.wait_signal("done")
    return total["n"]


@workflow
async def parent(ctx, key: str, gate: str) -> list:
    """A child, then continue-as-new once: every run and the child in the start's trace."""
    if key.endswith("+"):
        return [await ctx.run(prepare, key)]
    await ctx.child(traced, key, gate, id=f"{ctx.workflow_id}-child")
    return ctx.continue_as_new(key + "+", gate)
