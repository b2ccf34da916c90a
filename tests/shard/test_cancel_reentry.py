"""A cancel that frees an activity slot must not let a queued attempt's outcome be recorded
in the middle of the cancel: with ``max_inflight_activities`` full, cancelling a running
member of a race starts the queued member, which may finish inline. Its outcome used to be
committed right then, and the cancel then wrote ``cancelled`` over the same op, so the op had
two outcomes, the run went stuck and never ran its ``except CancelledError`` cleanup."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, activity, workflow
from weft_actors.errors import WorkflowCancelled

pytestmark = pytest.mark.timeout(20)

EVENTS: list[str] = []


@activity
async def slow(tag: str) -> str:
    EVENTS.append(f"start {tag}")
    await asyncio.sleep(30)
    return tag


@activity
async def instant(tag: str) -> str:
    EVENTS.append(f"start {tag}")
    return tag


@workflow
async def racing(ctx) -> Any:
    try:
        return await ctx.race([ctx.run(slow, "a"), ctx.run(slow, "b"), ctx.run(instant, "c")])
    except asyncio.CancelledError:
        await ctx.run(instant, "cleanup")
        raise


def test_a_cancel_that_starts_a_queued_member_records_one_outcome_per_op(tmp_path):
    EVENTS.clear()

    async def main() -> None:
        async with Engine(str(tmp_path), app=[racing], max_inflight_activities=2) as engine:
            handle = await engine.start(racing, id="r")
            await eventually(lambda: EVENTS == ["start a", "start b"])  # "c" waits for a slot
            await handle.cancel()
            with pytest.raises(WorkflowCancelled):
                await handle.result(timeout=5)
            assert EVENTS[-1] == "start cleanup"
            record = engine.store.get_workflow("r")
            ops = engine.store.load_ops("r", record["run_id"])
            assert [seq for seq, op in sorted(ops.items()) if "ok" in op and "err" in op] == []
            assert [ops[seq].get("err", {}).get("kind") for seq in (0, 1, 2)] == ["cancelled"] * 3

    run(main())
