"""What belongs to one run of a workflow id, and what a run's own commits do to its actor:
continue-as-new in the same group commit as a relative's step, ``if_exists="start_new"``
after a finished run, and the update requests a chain of runs leaves behind."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, workflow
from weft_actors.errors import WorkflowClosed

pytestmark = pytest.mark.timeout(20)


@workflow
async def quick_kid(ctx) -> str:
    return await ctx.wait_signal("finish")


@workflow
async def racing_parent(ctx, n: int) -> Any:
    if n == 0:
        await ctx.race([ctx.child(quick_kid, id="quick-kid"), ctx.wait_signal("go")])
        return ctx.continue_as_new(n + 1)
    return f"run {n}"


def test_continue_as_new_survives_a_child_ending_in_the_same_group_commit(tmp_path):
    """The child's ending appends ``child-done`` to the parent and wakes it in the same resume
    pass as the parent's continue-as-new, which rotated the parent's epoch: that rotation is
    the parent's own, not a deposition, and the next run is driven."""

    async def main():
        async with Engine(str(tmp_path), app=[quick_kid, racing_parent]) as engine:
            handle = await engine.start(racing_parent, 0, id="parent")
            await eventually(lambda: "quick-kid" in engine.actors and engine.actors["quick-kid"].run.waiting_signal() == "finish")
            await eventually(lambda: engine.actors["parent"].run.waiting_signal() == "go")
            # Both signals commit in one batch; the child's ending and the parent's
            # continue-as-new then commit together in the next.
            await asyncio.gather(engine.signal("quick-kid", "finish", "done"), engine.signal("parent", "go"))
            assert await handle.result(timeout=5) == "run 1"
            assert engine.stats()["claims_deposed"] == 0

    run(main())


# -- if_exists="start_new": messages and request ids belong to one run --------------------------


@workflow
async def mailbox(ctx, tag: str) -> Any:
    applied: list[Any] = []

    def note(x: Any) -> str:
        applied.append(x)
        return f"{tag}:{x}"

    ctx.on_update("note", note)
    ctx.on_query("applied", lambda: list(applied))
    await ctx.wait_signal("stop")
    return applied


MAILBOX = [mailbox]


async def _parked(engine: Engine, wid: str) -> None:
    await eventually(lambda: wid in engine.actors and engine.actors[wid].run.waiting_signal() == "stop")


def test_start_new_does_not_inherit_a_stale_cancel(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=MAILBOX) as engine:
            handle = await engine.start(mailbox, "one", id="m")
            await _parked(engine, "m")
            # Both in one batch: the cancel request is appended, then the run is terminated
            # with it still in the inbox.
            await asyncio.gather(handle.cancel(), handle.terminate())
            assert (await handle.describe())["status"] == "terminated"
            fresh = await engine.start(mailbox, "two", id="m", if_exists="start_new")
            await _parked(engine, "m")
            await fresh.signal("stop")
            assert await fresh.result(timeout=5) == []

    run(main())


def test_start_new_does_not_apply_an_update_refused_as_closed(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=MAILBOX) as engine:
            handle = await engine.start(mailbox, "one", id="m")
            await _parked(engine, "m")
            outcomes = await asyncio.gather(engine.update("m", "note", "late", request_id="r-late"), handle.terminate(), return_exceptions=True)
            assert isinstance(outcomes[0], WorkflowClosed)  # its caller was told it never applied
            fresh = await engine.start(mailbox, "two", id="m", if_exists="start_new")
            await _parked(engine, "m")
            assert await fresh.query("applied") == []
            await fresh.signal("stop")
            assert await fresh.result(timeout=5) == []

    run(main())


def test_start_new_answers_a_reused_request_id_afresh(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=MAILBOX) as engine:
            handle = await engine.start(mailbox, "one", id="m")
            await _parked(engine, "m")
            assert await engine.update("m", "note", "x", request_id="r1") == "one:x"
            assert await engine.update("m", "note", "x", request_id="r1") == "one:x"  # a retry
            await handle.signal("stop")
            assert await handle.result(timeout=5) == ["x"]
            fresh = await engine.start(mailbox, "two", id="m", if_exists="start_new")
            await _parked(engine, "m")
            assert await engine.update("m", "note", "x", request_id="r1") == "two:x"
            await fresh.signal("stop")
            assert await fresh.result(timeout=5) == ["x"]

    run(main())
