"""Replayed code that diverges from its history stops the run ("stuck"); it never corrupts it."""

from __future__ import annotations

from typing import Any

from wf_harness import FakeEngine

from weft_actors.codec import encode
from weft_actors.workflow import Command, WorkflowRun, activity, workflow


@activity
def fetch(x: int) -> int:
    return x + 1


@activity
def fetch_v2(x: int) -> int:
    return x + 2


@activity
def cleanup() -> str:
    return "clean"


@workflow
async def original(ctx) -> int:
    a = await ctx.run(fetch, 1)
    b = await ctx.run(fetch, a)
    c = await ctx.run(fetch, b)
    return c


def recorded_log() -> dict[int, dict[str, Any]]:
    engine = FakeEngine(original)
    assert engine.run_to_end() == Command("complete", payload=encode(4))
    return engine.log


def replay(fn: Any, history: dict[int, dict[str, Any]]) -> tuple[Command, FakeEngine]:
    engine = FakeEngine(fn, history=history, workflow_id="wf-nd")
    [cmd] = engine.start()
    return cmd, engine


def assert_stuck(cmd: Command, *fragments: str) -> None:
    assert cmd.kind == "stuck", cmd
    error = cmd.error
    assert error["kind"] == "non_determinism"
    assert error["type"] == "weft_actors.errors.NonDeterminismError"
    assert error["code"] == "non_determinism"
    assert "wf-nd" in error["message"]
    for fragment in fragments:
        assert fragment in error["message"], (fragment, error["message"])


def test_a_different_activity_at_the_same_seq_is_stuck_naming_the_seq_and_both_names() -> None:
    @workflow(name="original")
    async def renamed(ctx) -> int:
        a = await ctx.run(fetch, 1)
        b = await ctx.run(fetch_v2, a)
        return b

    cmd, engine = replay(renamed, recorded_log())
    assert_stuck(cmd, "#1", "'fetch_v2'", "'fetch'")
    assert engine.activity_calls == []


def test_a_sleep_where_an_activity_was_recorded_is_stuck() -> None:
    @workflow(name="original")
    async def napping(ctx) -> int:
        a = await ctx.run(fetch, 1)
        await ctx.sleep(10)
        return a

    cmd, _ = replay(napping, recorded_log())
    assert_stuck(cmd, "#1", "sleep", "activity 'fetch'")


def test_a_differing_op_against_a_started_but_unfinished_record_is_stuck() -> None:
    @workflow
    async def timer_now(ctx) -> None:
        await ctx.run(fetch, 1)

    cmd, _ = replay(timer_now, {0: {"kind": "sleep", "name": "", "fire_at": 5.0}})
    assert_stuck(cmd, "#0", "activity 'fetch'", "sleep")


def test_returning_while_the_history_has_more_recorded_events_is_stuck() -> None:
    @workflow(name="original")
    async def shorter(ctx) -> int:
        return await ctx.run(fetch, 1)

    cmd, _ = replay(shorter, recorded_log())
    assert_stuck(cmd, "returned", "more recorded events")


def test_not_awaiting_a_recorded_op_is_stuck() -> None:
    @workflow
    async def skips(ctx) -> None:
        await ctx.run(fetch, 1)
        await ctx.run(fetch, 2)

    history = recorded_log()
    del history[1]  # seq 2 is recorded but the code waits on seq 1
    cmd, _ = replay(skips, history)
    assert_stuck(cmd, "op #2", "not awaiting")


def test_a_recorded_handler_that_the_code_never_registers_is_stuck() -> None:
    @workflow
    async def deaf(ctx) -> None:
        await ctx.sleep(1)

    history = {
        0: {"kind": "sleep", "name": "", "t": 2, "ok": encode(None)},
        1: {"kind": "handler", "name": "poke", "t": 1, "ok": encode(1), "inbox": 1},
    }
    cmd, _ = replay(deaf, history)
    assert_stuck(cmd, "'poke'", "not registered")


def test_a_recorded_handler_at_a_seq_the_code_has_not_reached_is_stuck() -> None:
    @workflow
    async def listener(ctx) -> None:
        ctx.on_signal("poke", lambda payload: None)
        await ctx.sleep(1)
        await ctx.sleep(1)

    history = {
        0: {"kind": "sleep", "name": "", "t": 2, "ok": encode(None)},
        # a handler recorded at #3 while the code (waiting on #0) would give it #1
        3: {"kind": "handler", "name": "poke", "t": 1, "ok": encode(1), "inbox": 1},
    }
    cmd, _ = replay(listener, history)
    assert_stuck(cmd, "#3", "#1")


def test_a_stuck_run_stays_stuck_and_issues_nothing_more() -> None:
    @workflow(name="original")
    async def renamed(ctx) -> int:
        await ctx.run(fetch_v2, 1)
        return 0

    run = WorkflowRun(renamed.__weft_workflow__, "wf-nd", "r", (), recorded_log())
    [cmd] = run.start()
    assert cmd.kind == "stuck"
    assert run.deliver() == [cmd]
    assert run.outcome == cmd


def test_raising_while_the_history_has_more_recorded_events_is_stuck_not_failed() -> None:
    """Changed code that now raises early must not fail a run whose history went further."""

    @workflow(name="original")
    async def raises_now(ctx) -> int:
        a = await ctx.run(fetch, 1)
        raise RuntimeError(f"new validation rejects {a}")

    cmd, _ = replay(raises_now, recorded_log())
    assert_stuck(cmd, "RuntimeError", "new validation rejects 2")


def test_changed_signature_with_recorded_history_is_stuck_not_failed() -> None:
    @workflow(name="original")
    async def needs_an_arg(ctx, extra: int) -> int:
        return await ctx.run(fetch, extra)

    cmd, _ = replay(needs_an_arg, recorded_log())
    assert_stuck(cmd, "TypeError")


def test_divergence_inside_try_finally_that_awaits_an_op_is_stuck_without_raising() -> None:
    """Closing the abandoned coroutine runs its ``finally``; an await there must not escape."""
    finally_ran: list[bool] = []

    @workflow(name="original")
    async def saga(ctx) -> int:
        try:
            a = await ctx.run(fetch, 1)
            return await ctx.run(fetch_v2, a)
        finally:
            finally_ran.append(True)
            await ctx.run(cleanup)

    cmd, engine = replay(saga, recorded_log())
    assert_stuck(cmd, "#1", "'fetch_v2'")
    assert finally_ran and engine.activity_calls == []
    engine.run.close()  # closing again is harmless


def test_handler_failure_inside_try_finally_that_awaits_an_op_fails_without_raising() -> None:
    @workflow
    async def fragile(ctx) -> None:
        def boom(payload: Any) -> None:
            raise ValueError(f"bad payload {payload}")

        ctx.on_signal("poke", boom)
        try:
            await ctx.sleep(10)
        finally:
            await ctx.run(cleanup)

    engine = FakeEngine(fragile, arrivals={0: [("poke", 3)]})
    cmd = engine.run_to_end()
    assert cmd.kind == "fail" and cmd.error["type"] == "ValueError" and cmd.error["message"] == "bad payload 3"
    assert engine.activity_calls == []
