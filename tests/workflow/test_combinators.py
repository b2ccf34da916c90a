"""``ctx.all`` and ``ctx.race`` in the pure driver: seqs, settling in delivery order, cancelling
the losers, error propagation, nesting, and replay reaching exactly the same place."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from wf_script import Script

from weft_actors.errors import ActivityError, InvalidRequest, NonDeterminismError
from weft_actors.workflow import activity, workflow


@activity
def fetch(x: int) -> int:
    return x * 10


@activity
def explode(message: str) -> None:
    raise ValueError(message)


@workflow
async def racer(ctx) -> Any:
    index, value = await ctx.race([ctx.wait_signal("a"), ctx.wait_signal("b"), ctx.sleep(60)])
    after = await ctx.wait_signal("a", timeout=5) if index == 1 else None
    return [index, value, after]


@workflow
async def gatherer(ctx) -> Any:
    return await ctx.all([ctx.run(fetch, 1), ctx.sleep(5), ctx.run(fetch, 3)])


@workflow
async def nested(ctx) -> Any:
    return await ctx.all([ctx.race([ctx.wait_signal("x"), ctx.sleep(9)]), ctx.all([ctx.run(fetch, 2), ctx.now()])])


def test_leaves_get_seqs_in_list_order_and_all_returns_results_in_list_order() -> None:
    script = Script(gatherer)
    assert script.ops() == [(0, "activity", "fetch"), (1, "sleep", ""), (2, "activity", "fetch")]
    script.finish(2, 30)
    script.finish(1)
    assert script.final is None  # one leaf still pending
    script.finish(0, 10)
    assert script.result() == [10, None, 30]
    assert [script.log[s]["t"] for s in (2, 1, 0)] == [1, 2, 3]  # delivery order is the log's
    assert script.replay().final == script.final


def test_race_returns_the_first_delivered_and_cancels_the_losers() -> None:
    script = Script(racer)
    assert [op[1:] for op in script.ops()] == [("signal", "a"), ("signal", "b"), ("sleep", "")]
    assert script.signal("b", "B")
    assert script.cancelled == [0, 2]  # the losing wait_signal and the timer
    assert script.log[0]["err"]["kind"] == "cancelled" and script.log[2]["err"]["kind"] == "cancelled"
    assert script.ops() == [(3, "signal", "a")]  # the code after the race
    script.signal("a", "A")
    assert script.result() == [1, "B", "A"]


def test_race_is_deterministic_under_replay_whichever_branch_won() -> None:
    for winner, signal_name in ((0, "a"), (1, "b")):
        live = Script(racer)
        live.signal(signal_name, signal_name.upper())
        if winner == 1:
            live.signal("a", "late")
        replay = live.replay()
        assert replay.final == live.final and replay.final is not None
        assert replay.commands == [live.final]  # nothing re-executed, nothing cancelled again
    timer = Script(racer)
    timer.finish(2)
    assert timer.result() == [2, None, None]
    assert timer.replay().final == timer.final


def test_a_losing_wait_signal_consumes_nothing() -> None:
    script = Script(racer)
    script.finish(2)  # the timer wins
    assert script.run.wanted_signal("a") is None and script.run.wanted_signal("b") is None
    assert not script.signal("a", "stays buffered")  # no op wants it any more


def test_a_signal_two_branches_wait_for_goes_to_exactly_one_the_lowest_seq() -> None:
    @workflow
    async def twice(ctx) -> Any:
        first = await ctx.race([ctx.wait_signal("a"), ctx.wait_signal("a")])
        second = await ctx.wait_signal("a")
        return [first, second]

    script = Script(twice)
    assert script.run.wanted_signal("a") == 0
    assert script.run.wanted_signal("b") is None
    script.signal("a", "one")
    assert script.cancelled == [1]  # the other branch consumed nothing
    assert script.run.wanted_signal("a") == 2
    script.signal("a", "two")
    assert script.result() == [(0, "one"), "two"]


def test_replay_stopped_mid_race_resumes_with_the_same_pending_branches() -> None:
    live = Script(racer)
    prefix = live.replay()  # nothing recorded yet
    assert prefix.ops() == live.ops()
    live.finish(2)  # timer wins, losers cancelled and recorded
    log_without_cancels = {seq: rec for seq, rec in live.log.items() if seq == 2}
    resumed = Script(racer, history=log_without_cancels)  # crashed before the cancel commit
    assert resumed.final == live.final
    assert resumed.cancelled == [0, 1]  # the engine is told again to cancel what was not recorded


def test_an_error_propagates_from_all_and_cancels_the_rest() -> None:
    @workflow
    async def careful(ctx) -> Any:
        try:
            await ctx.all([ctx.run(fetch, 1), ctx.run(explode, "boom"), ctx.sleep(10)])
        except ActivityError as exc:
            return ["caught", exc.cause_message]
        return "no error"

    script = Script(careful)
    error = {"kind": "activity", "type": "ValueError", "message": "boom", "activity": "explode", "attempts": 1}
    script.finish(1, error=error)
    assert script.cancelled == [0, 2]
    assert script.result() == ["caught", "boom"]
    assert script.replay().final == script.final


def test_race_error_of_the_first_finisher_propagates() -> None:
    @workflow
    async def fragile(ctx) -> Any:
        return await ctx.race([ctx.run(explode, "first"), ctx.sleep(10)])

    script = Script(fragile)
    script.finish(0, error={"kind": "activity", "type": "ValueError", "message": "first", "activity": "explode"})
    assert script.final.kind == "fail" and script.final.error["type"].endswith("ActivityError")
    assert script.cancelled == [1]


def test_nested_combinators_settle_bottom_up() -> None:
    script = Script(nested)
    assert [op[1:] for op in script.ops()] == [("signal", "x"), ("sleep", ""), ("activity", "fetch"), ("now", "")]
    script.finish(1)  # the inner race is won by its timer
    assert script.cancelled == [0]
    script.finish(3, "now")
    assert script.final is None  # the inner all still waits for its activity
    script.finish(2, 20)
    assert script.result() == [(1, None), [20, "now"]]  # the race gives (index, value)
    assert script.replay().final == script.final


def test_empty_all_is_an_empty_list_at_once_and_race_needs_an_op() -> None:
    @workflow
    async def empty(ctx) -> Any:
        first = await ctx.all([])
        second = await ctx.all([ctx.all([]), ctx.run(fetch, 4)])
        return [first, second]

    script = Script(empty)
    assert script.ops() == [(0, "activity", "fetch")]
    script.finish(0, 40)
    assert script.result() == [[], [[], 40]]

    @workflow
    async def no_race(ctx) -> Any:
        return await ctx.race([])

    assert Script(no_race).final.error["code"] == "invalid_request"


def test_combinators_take_only_unawaited_ctx_operations() -> None:
    async def not_an_op() -> int:
        return 1

    @workflow
    async def confused(ctx) -> Any:
        try:
            await ctx.all([not_an_op()])
        except InvalidRequest as exc:
            return str(exc)

    assert "unawaited ctx operations" in Script(confused).result()

    @workflow
    async def patch_inside(ctx) -> Any:
        await ctx.all([ctx.patched("x")])

    assert Script(patch_inside).final.error["code"] == "invalid_request"


def test_replay_with_different_combinator_leaves_is_non_determinism() -> None:
    live = Script(gatherer)
    live.finish(0, 10)

    @workflow(name="gatherer")
    async def changed(ctx) -> Any:
        return await ctx.all([ctx.run(fetch, 1), ctx.wait_signal("s"), ctx.run(fetch, 3)])

    # The sleep at #1 had started (its timer is recorded): the changed code issues a signal there.
    history = {**live.log, 1: {"kind": "sleep", "name": "", "fire_at": 5.0}}
    replay = Script(changed, history=history)
    assert replay.final is not None and replay.final.kind == "stuck"
    assert replay.final.error["code"] == NonDeterminismError.code
    assert "signal 's' under all at #1" in replay.final.error["message"]


def test_cancel_request_reaches_every_leaf_and_the_workflow_may_clean_up() -> None:
    @workflow
    async def tidy(ctx) -> Any:
        try:
            await ctx.all([ctx.run(fetch, 1), ctx.wait_signal("go")])
        except asyncio.CancelledError:
            cleaned = await ctx.run(fetch, 9)
            return ["cleaned", cleaned]
        return "done"

    script = Script(tidy)
    script.cancel()
    assert script.ops() == [(2, "activity", "fetch")]
    assert script.run.cancel_requested
    script.finish(2, 90)
    assert script.result() == ["cleaned", 90]
    replay = script.replay()
    assert replay.final == script.final and replay.run.cancel_requested


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_all_over_signals_takes_them_in_any_order(order: tuple[int, int]) -> None:
    @workflow
    async def pair(ctx) -> Any:
        return await ctx.all([ctx.wait_signal("left"), ctx.wait_signal("right")])

    script = Script(pair)
    names = ["left", "right"]
    for index in order:
        script.signal(names[index], index)
    assert script.result() == [0, 1]
    assert script.replay().final == script.final


def test_replaying_the_same_leaves_under_another_combinator_is_non_determinism() -> None:
    live = Script(racer)
    live.signal("b", "bee")  # race settles on "b"; the changed code would wait for all three
    assert live.run.history[1]["in"] == "race"

    @workflow(name="racer")
    async def as_all(ctx) -> Any:
        return await ctx.all([ctx.wait_signal("a"), ctx.wait_signal("b"), ctx.sleep(60)])

    replay = Script(as_all, history=live.log)
    assert replay.final is not None and replay.final.kind == "stuck"
    assert replay.final.error["code"] == NonDeterminismError.code
    assert "under all at #0 but the history has signal 'a' under race" in replay.final.error["message"]


def test_a_leaf_replayed_as_a_plain_await_or_in_a_nested_group_is_non_determinism() -> None:
    live = Script(nested)
    live.signal("x", 1)
    assert live.run.history[0]["in"] == "all/race"

    @workflow(name="nested")
    async def flattened(ctx) -> Any:
        return await ctx.wait_signal("x")

    @workflow(name="nested")
    async def regrouped(ctx) -> Any:
        return await ctx.all([ctx.all([ctx.wait_signal("x"), ctx.sleep(9)]), ctx.all([ctx.run(fetch, 2), ctx.now()])])

    for changed in (flattened, regrouped):
        replay = Script(changed, history=live.log)
        assert replay.final is not None and replay.final.kind == "stuck", changed
        assert "under all/race" in replay.final.error["message"]
