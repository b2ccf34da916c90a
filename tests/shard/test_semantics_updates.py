"""Updates and ``wait_condition`` on the embedded engine: answers, validators, idempotent retries,
updates racing the workflow's end, and conditions woken by handlers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, workflow
from weft_actors.errors import UpdateFailed, UpdateRejected, WorkflowClosed, WorkflowNotFound
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(20)

APPLIED: list[Any] = []


@workflow
async def account(ctx, opening: int) -> Any:
    state = {"balance": opening, "closed": False}

    def deposit(amount: int) -> int:
        APPLIED.append(amount)
        if amount == 13:
            raise ValueError("unlucky amount")
        state["balance"] += amount
        return state["balance"]

    def positive(amount: Any) -> None:
        if not isinstance(amount, int) or amount <= 0:
            raise ValueError(f"a deposit must be a positive int, not {amount!r}")

    ctx.on_update("deposit", deposit, validator=positive)
    ctx.on_update("close", lambda: state.update(closed=True))
    ctx.on_query("balance", lambda: state["balance"])
    await ctx.wait_condition(lambda: state["closed"])
    return state["balance"]


@workflow
async def quick_exit(ctx) -> str:
    ctx.on_update("noop", lambda: "never")
    return await ctx.wait_signal("stop")


@pytest.fixture(autouse=True)
def _clear() -> None:
    APPLIED.clear()


def test_update_returns_the_handler_result_and_wakes_a_condition(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[account]) as engine:
            handle = await engine.start(account, 100, id="acct")
            assert await handle.update("deposit", 5) == 105
            assert await handle.update("deposit", 7) == 112
            assert await handle.query("balance") == 112
            assert await handle.update("close") is None
            assert await handle.result(timeout=5) == 112
            kinds = [(op["kind"], op["name"]) for op in (await handle.describe())["history"]]
            assert kinds == [("condition", ""), ("update", "deposit"), ("update", "deposit"), ("update", "close")]

    run(main())


def test_a_retried_request_id_returns_the_same_result_and_applies_once(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[account]) as engine:
            handle = await engine.start(account, 0, id="acct")
            first = await handle.update("deposit", 10, request_id="req-1")
            again = await handle.update("deposit", 10, request_id="req-1")
            both = await asyncio.gather(handle.update("deposit", 1, request_id="req-2"), handle.update("deposit", 1, request_id="req-2"))
            assert (first, again, both) == (10, 10, [11, 11])
            assert APPLIED == [10, 1]
            await handle.update("close")
            assert await handle.result(timeout=5) == 11
            # Even after the workflow finished, a retry gets its recorded answer.
            assert await handle.update("deposit", 10, request_id="req-1") == 10
            assert APPLIED == [10, 1]

    run(main())


def test_a_rejected_update_records_nothing_and_its_retry_is_rejected_the_same(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[account]) as engine:
            handle = await engine.start(account, 0, id="acct")
            with pytest.raises(UpdateRejected, match="positive int, not -3"):
                await handle.update("deposit", -3, request_id="bad")
            with pytest.raises(UpdateRejected, match="positive int, not -3"):
                await handle.update("deposit", -3, request_id="bad")
            with pytest.raises(UpdateRejected, match="no update handler 'withdraw'"):
                await handle.update("withdraw", 1)
            described = await handle.describe()
            assert described["history"] == []  # not even the condition: it has nothing to record yet
            assert described["inbox"] == [] and APPLIED == []

    run(main())


def test_a_failing_handler_answers_update_failed_and_the_workflow_goes_on(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[account]) as engine:
            handle = await engine.start(account, 1, id="acct")
            with pytest.raises(UpdateFailed, match="unlucky amount") as info:
                await handle.update("deposit", 13)
            assert info.value.type == "ValueError"
            assert await handle.update("deposit", 2) == 3
            await handle.update("close")
            assert await handle.result(timeout=5) == 3

    run(main())


def test_an_update_to_a_finished_workflow_is_a_clear_error(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[account, quick_exit]) as engine:
            handle = await engine.start(quick_exit, id="q")
            await handle.signal("stop", "bye")
            assert await handle.result(timeout=5) == "bye"
            with pytest.raises(WorkflowClosed, match="has finished"):
                await handle.update("noop")
            with pytest.raises(WorkflowNotFound):
                await engine.get_handle("nobody").update("noop")

    run(main())


def test_an_update_still_queued_when_the_workflow_ends_fails_with_workflow_closed(tmp_path):
    async def main():
        clock = FakeClock()
        async with Engine(str(tmp_path), app=[quick_exit], clock=clock, heartbeat=0.05, ttl=0.15, background=False) as engine:
            await engine.start(quick_exit, id="q")
            # Queue a signal and an update in one batch: the signal ends the run first.
            signal = asyncio.ensure_future(engine.signal("q", "stop", "first"))
            update = asyncio.ensure_future(engine.update("q", "noop"))
            await signal
            with pytest.raises(WorkflowClosed, match="before update 'noop' was applied"):
                await asyncio.wait_for(update, 5)

    run(main())


def test_queries_after_a_restart_see_the_state_updates_built(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[account]) as engine:
            handle = await engine.start(account, 1, id="acct")
            await handle.update("deposit", 4)
        async with Engine(str(tmp_path), app=[account]) as engine:
            handle = engine.get_handle("acct")
            await eventually(lambda: "acct" in engine.actors)
            assert await handle.query("balance") == 5
            assert await handle.update("deposit", 1) == 6
            await handle.update("close")
            assert await handle.result(timeout=5) == 6
        assert APPLIED == [4, 4, 1]  # the replay re-applied 4 to rebuild the state, answering nobody

    run(main())


@workflow
async def waits_for_signals(ctx) -> Any:
    seen: list[Any] = []
    ctx.on_signal("item", seen.append)
    try:
        await ctx.wait_condition(lambda: len(seen) >= 2, timeout=0.3)
    except TimeoutError:
        return ["timed out", seen]
    return ["enough", seen]


def test_wait_condition_is_woken_by_signal_handlers_or_times_out(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[waits_for_signals]) as engine:
            fast = await engine.start(waits_for_signals, id="fast")
            slow = await engine.start(waits_for_signals, id="slow")
            await fast.signal("item", 1)
            await fast.signal("item", 2)
            await slow.signal("item", 1)
            assert await fast.result(timeout=5) == ["enough", [1, 2]]
            assert await slow.result(timeout=5) == ["timed out", [1]]
            assert engine.store.count("timers") == 0

    run(main())
