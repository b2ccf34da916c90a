"""``Engine.execute``: start and result in one call, as ``AsyncClient.execute``."""

from __future__ import annotations

import asyncio

import pytest

from steps_app import add_one, three_steps
from _support import run
from weft_actors import Engine, workflow
from weft_actors.errors import UnknownWorkflowType, WorkflowAlreadyExists, WorkflowFailed


@workflow
async def fails(ctx) -> None:
    await ctx.run(add_one, 1)
    raise ValueError("no good")


@workflow
async def waits(ctx) -> str:
    return await ctx.wait_signal("go")


APP = [three_steps, fails, waits]


def test_execute_returns_the_result_and_leaves_no_waiter(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            results = await asyncio.gather(*(engine.execute(three_steps, i) for i in range(50)))
            assert results == [i + 3 for i in range(50)]
            assert engine.waiters.by_wid == {}
            listed = await engine.list(status="completed")
            assert len(listed["items"]) == 50

    run(main())


def test_execute_raises_what_start_and_result_raise(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            with pytest.raises(WorkflowFailed) as failed:
                await engine.execute(fails)
            assert failed.value.type == "ValueError"
            with pytest.raises(UnknownWorkflowType):
                await engine.execute("nobody")
            await engine.execute(three_steps, 1, id="once")
            with pytest.raises(WorkflowAlreadyExists):
                await engine.execute(three_steps, 1, id="once")
            # if_exists="return": the existing run's result, though it did not run now.
            assert await engine.execute(three_steps, 7, id="once", if_exists="return") == 4
            assert engine.waiters.by_wid == {}

    run(main())


def test_execute_times_out_and_follows_a_delayed_start(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP, heartbeat=0.1, ttl=0.3) as engine:
            with pytest.raises(TimeoutError):
                await engine.execute(waits, id="parked", timeout=0.2)
            assert engine.waiters.by_wid == {}
            # A delayed start runs nowhere yet: execute waits for it like result does.
            assert await asyncio.wait_for(engine.execute(three_steps, 1, start_delay=0.2), 10) == 4
            await engine.get_handle("parked").signal("go", "went")
            assert await engine.get_handle("parked").result(timeout=10) == "went"

    run(main())
