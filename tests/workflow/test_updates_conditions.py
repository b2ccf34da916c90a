"""Updates, ``wait_condition``, ``patched``, ``continue_as_new`` and cancellation in the pure
driver: what is recorded, and that replay reaches the same point with the same state."""

from __future__ import annotations

import asyncio
from typing import Any

from wf_harness import FakeEngine
from wf_script import Script

from weft_actors.codec import decode, decode_args
from weft_actors.errors import UpdateRejected, WeftError
from weft_actors.workflow import UPDATE, ContinueAsNew, workflow


@workflow
async def cart(ctx) -> Any:
    state: dict[str, Any] = {"items": [], "open": True}

    def add(item: str) -> int:
        if item == "poison":
            raise ValueError("poisoned")
        state["items"].append(item)
        return len(state["items"])

    def must_be_text(item: Any) -> None:
        if not isinstance(item, str):
            raise TypeError("items are strings")

    ctx.on_update("add", add, validator=must_be_text)
    ctx.on_update("close", lambda: state.update(open=False))
    ctx.on_query("items", lambda: list(state["items"]))
    await ctx.wait_condition(lambda: len(state["items"]) >= 2)
    first_two = list(state["items"])
    await ctx.wait_condition(lambda: not state["open"])
    return {"first_two": first_two, "all": state["items"]}


def test_an_update_is_recorded_as_an_op_with_its_result_and_replays_at_the_same_point() -> None:
    script = Script(cart)
    assert script.ops() == [(0, "condition", "")]
    assert script.update("add", "apple") == ("ok", 1)
    record = script.log[1]
    assert record["kind"] == UPDATE and record["name"] == "add" and decode(record["ok"]) == 1
    assert decode_args(record["args"]) == ("apple",) and record["request_id"] == "r"
    assert script.update("add", "pear") == ("ok", 2)
    assert script.resolved == [0]  # the condition held right after the handler: recorded
    assert script.ops() == [(3, "condition", "")]
    assert script.update("add", "fig") == ("ok", 3)
    script.update("close")
    assert script.result() == {"first_two": ["apple", "pear"], "all": ["apple", "pear", "fig"]}
    replay = script.replay()
    assert replay.final == script.final  # handlers re-applied at their t, conditions delivered at theirs


def test_a_rejected_update_leaves_no_trace_in_the_history() -> None:
    script = Script(cart)
    verdict, error = script.update("add", 42)
    assert verdict == "rejected" and isinstance(error, UpdateRejected) and "items are strings" in str(error)
    verdict, error = script.update("nope")
    assert verdict == "rejected" and "no update handler 'nope'" in str(error)
    assert script.log == {} and script.run.next_seq == 1


def test_an_update_handler_error_answers_the_caller_and_the_workflow_carries_on() -> None:
    script = Script(cart)
    verdict, error = script.update("add", "poison")
    assert verdict == "err" and error["type"] == "ValueError" and error["message"] == "poisoned"
    assert script.final is None
    script.update("add", "a")
    script.update("add", "b")
    script.update("close")
    assert script.result()["all"] == ["a", "b"]
    assert script.replay().final == script.final


def test_queries_see_state_changed_by_updates_also_after_replay() -> None:
    script = Script(cart)
    script.update("add", "x")
    assert script.run.query("items", ()) == ["x"]
    assert script.replay().run.query("items", ()) == ["x"]


def test_a_condition_that_holds_at_once_is_resolved_without_running_anything() -> None:
    @workflow
    async def immediate(ctx) -> str:
        await ctx.wait_condition(lambda: True)
        return "through"

    script = Script(immediate)
    assert script.resolved == [0] and script.ops() == []
    assert script.result() == "through"
    assert script.replay().commands == [script.final]


def test_signal_handlers_also_wake_conditions_and_timeouts_raise_timeout_error() -> None:
    @workflow
    async def gate(ctx) -> Any:
        seen: list[Any] = []
        ctx.on_signal("item", seen.append)
        try:
            await ctx.wait_condition(lambda: len(seen) >= 3, timeout=10)
        except TimeoutError as exc:
            return ["timeout", seen, str(exc)]
        return ["ok", seen]

    script = Script(gate)
    assert script.ops() == [(0, "condition", "")]
    script.signal("item", 1)
    script.signal("item", 2)
    script.signal("item", 3)
    assert script.result() == ["ok", [1, 2, 3]]
    assert script.replay().final == script.final

    slow = Script(gate)
    slow.signal("item", 1)
    slow.finish(0, error={"kind": "timeout", "type": "TimeoutError", "message": "condition not met in time"})
    assert slow.result() == ["timeout", [1], "condition not met in time"]
    assert slow.replay().final == slow.final


def test_a_failing_predicate_raises_at_the_wait() -> None:
    @workflow
    async def broken(ctx) -> Any:
        try:
            await ctx.wait_condition(lambda: 1 / 0)
        except WeftError as exc:  # recorded like any op's failure, so live and replay agree
            return str(exc)

    script = Script(broken)
    assert script.result() == "ZeroDivisionError: division by zero"
    assert script.replay().final == script.final


# -- patched ----------------------------------------------------------------------------------


@workflow(name="versioned")
async def versioned_old(ctx) -> Any:
    await ctx.sleep(1)
    return ["old", await ctx.uuid4()]


@workflow(name="versioned")
async def versioned_new(ctx) -> Any:
    await ctx.sleep(1)
    if await ctx.patched("use-random"):
        return ["new", await ctx.random()]
    return ["old", await ctx.uuid4()]


def test_patched_is_true_live_and_records_a_marker() -> None:
    live = FakeEngine(versioned_new)
    live.run_to_end()
    assert live.result()[0] == "new"
    assert live.log[1]["kind"] == "patch" and live.log[1]["name"] == "use-random" and decode(live.log[1]["ok"]) is True
    assert FakeEngine(versioned_new, history=live.log).run_to_end() == live.final


def test_patched_is_false_for_a_run_that_passed_the_point_before_the_change() -> None:
    old = FakeEngine(versioned_old)
    old.run_to_end()
    replay = FakeEngine(versioned_new, history=old.log)
    assert replay.run_to_end() == old.final  # old branch, same seqs, no marker consumed


def test_patched_is_true_for_a_run_from_before_the_change_that_had_not_reached_it() -> None:
    old = FakeEngine(versioned_old)
    started = old.start()
    assert started[0].op.kind == "sleep"  # the old code is still in its sleep when deployed
    resumed = FakeEngine(versioned_new, history={})
    assert resumed.run_to_end().kind == "complete" and resumed.result()[0] == "new"


def test_a_different_marker_at_that_point_is_non_determinism() -> None:
    new = FakeEngine(versioned_new)
    new.run_to_end()
    history = {**new.log, 1: {**new.log[1], "name": "other-change"}}
    final = FakeEngine(versioned_new, history=history).run_to_end()
    assert final.kind == "stuck"


# -- continue as new, cancellation --------------------------------------------------------------


def test_continue_as_new_returned_or_raised_ends_the_run_with_the_next_arguments() -> None:
    @workflow
    async def returns(ctx, n: int, tag: str = "") -> Any:
        await ctx.sleep(1)
        return ctx.continue_as_new(n + 1, "tag")

    @workflow
    async def raises(ctx, n: int) -> Any:
        try:
            raise ctx.continue_as_new(n * 2)
        except Exception:  # a BaseException: broad handlers do not swallow it
            return "swallowed"

    live = FakeEngine(returns, 1)
    final = live.run_to_end()
    assert final.kind == "continue" and decode_args(final.payload) == (2, "tag")
    assert FakeEngine(returns, 1, history=live.log).run_to_end() == final
    final = FakeEngine(raises, 5).run_to_end()
    assert final.kind == "continue" and decode_args(final.payload) == (10,)
    assert issubclass(ContinueAsNew, BaseException) and not issubclass(ContinueAsNew, Exception)


def test_a_cancelled_workflow_that_reraises_fails_as_cancelled() -> None:
    @workflow
    async def stubborn(ctx) -> Any:
        try:
            await ctx.sleep(100)
        except asyncio.CancelledError:
            await ctx.sleep(1)  # cleanup may await ops
            raise

    script = Script(stubborn)
    script.cancel()
    assert script.ops() == [(1, "sleep", "")]
    script.finish(1)
    assert script.final.kind == "fail" and script.final.error["kind"] == "cancelled"
    assert script.replay().final == script.final
