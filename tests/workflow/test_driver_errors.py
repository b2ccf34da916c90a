"""Failures as values: what the workflow sees for recorded errors, and how a run ends when it raises."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from wf_harness import FakeEngine

from weft_actors.codec import decode, encode
from weft_actors.errors import (
    ActivityError,
    InvalidAwait,
    InvalidRequest,
    SerializationError,
    UnknownQuery,
    WeftError,
    WorkflowNotFound,
)
from weft_actors.workflow import (
    Command,
    RetryPolicy,
    WorkflowRun,
    activity,
    error_from_record,
    error_record,
    workflow,
)


@activity(retry=RetryPolicy(max_attempts=3, initial_interval=0.1))
def lookup(key: str) -> str:
    raise ValueError("boom")


ACTIVITY_ERR = {
    "kind": "activity",
    "type": "ValueError",
    "message": "boom",
    "traceback": "Traceback (most recent call last):\n  ...\nValueError: boom\n",
    "activity": "lookup",
    "attempts": 3,
}


def run_with(fn: Any, history: dict[int, dict[str, Any]], *args: Any) -> Command:
    [cmd] = WorkflowRun(fn.__weft_workflow__, "wf-err", "run-1", args, history).start()
    return cmd


# -- activity failures ------------------------------------------------------------------------


def test_recorded_activity_failure_raises_activity_error_with_the_original_details() -> None:
    seen: dict[str, Any] = {}

    @workflow
    async def careful(ctx) -> str:
        try:
            await ctx.run(lookup, "k")
        except ActivityError as exc:
            seen.update(type=exc.type, cause=exc.cause_message, tb=exc.traceback, attempts=exc.attempts,
                        activity=exc.activity, code=exc.code, text=str(exc))
            return "handled"
        return "not raised"

    history = {0: {"kind": "activity", "name": "lookup", "t": 1, "err": dict(ACTIVITY_ERR), "attempts": 3}}
    cmd = run_with(careful, history)
    assert cmd == Command("complete", payload=encode("handled"))
    assert seen == {
        "type": "ValueError",
        "cause": "boom",
        "tb": ACTIVITY_ERR["traceback"],
        "attempts": 3,
        "activity": "lookup",
        "code": "activity_failed",
        "text": "activity 'lookup' failed: ValueError: boom",
    }


def test_uncaught_activity_failure_fails_the_run_with_activity_error() -> None:
    @workflow
    async def careless(ctx) -> str:
        return await ctx.run(lookup, "k")

    cmd = run_with(careless, {0: {"kind": "activity", "name": "lookup", "t": 1, "err": dict(ACTIVITY_ERR)}})
    assert cmd.kind == "fail"
    assert cmd.error["type"] == "weft_actors.errors.ActivityError"
    assert cmd.error["code"] == "activity_failed"
    assert "ValueError: boom" in cmd.error["message"]


def test_live_activity_failure_retries_per_policy_then_the_workflow_sees_activity_error() -> None:
    @workflow
    async def careful(ctx) -> list:
        try:
            await ctx.run(lookup, "k")
        except ActivityError as exc:
            return [exc.type, exc.cause_message, exc.attempts, "ValueError: boom" in exc.traceback]
        return []

    engine = FakeEngine(careful)
    engine.run_to_end()
    assert engine.result() == ["ValueError", "boom", 3, True]
    assert [name for name, _ in engine.activity_calls] == ["lookup"] * 3
    assert engine.log[0]["attempts"] == 3 and engine.log[0]["err"]["kind"] == "activity"
    # The replay sees the same failure without running the activity again.
    replay = FakeEngine(careful, history=engine.log)
    assert replay.run_to_end() == engine.final and replay.activity_calls == []


# -- timeouts and cancellation ----------------------------------------------------------------


def test_wait_signal_timeout_raises_builtin_timeout_error() -> None:
    @workflow
    async def impatient(ctx) -> str:
        try:
            await ctx.wait_signal("approve", timeout=5)
        except TimeoutError as exc:
            return f"timed out: {exc}"
        return "approved"

    err = {"kind": "timeout", "type": "TimeoutError", "message": "no signal 'approve' in time"}
    cmd = run_with(impatient, {0: {"kind": "signal", "name": "approve", "t": 1, "err": err}})
    assert decode(cmd.payload) == "timed out: no signal 'approve' in time"

    live = FakeEngine(impatient)
    live.run_to_end()
    assert live.result() == "timed out: no signal 'approve' in time"
    assert live.log[0]["fire_at"] == live.clock and live.log[0]["err"]["kind"] == "timeout"


def test_uncaught_signal_timeout_fails_the_run_as_timeout_error() -> None:
    @workflow
    async def impatient(ctx) -> Any:
        return await ctx.wait_signal("approve", timeout=5)

    err = {"kind": "timeout", "type": "TimeoutError", "message": "late"}
    cmd = run_with(impatient, {0: {"kind": "signal", "name": "approve", "t": 1, "err": err}})
    assert cmd.kind == "fail" and cmd.error["type"] == "TimeoutError" and cmd.error["message"] == "late"


def test_recorded_cancellation_raises_cancelled_error_that_the_workflow_may_handle() -> None:
    @workflow
    async def tidy(ctx) -> str:
        try:
            await ctx.sleep(100)
        except asyncio.CancelledError:
            return "cleaned up"
        return "slept"

    @workflow
    async def untidy(ctx) -> str:
        await ctx.sleep(100)
        return "slept"

    history = {0: {"kind": "sleep", "name": "", "t": 1, "err": {"kind": "cancelled", "message": "by user"}}}
    assert run_with(tidy, dict(history)) == Command("complete", payload=encode("cleaned up"))
    cmd = run_with(untidy, dict(history))
    assert cmd.kind == "fail"
    assert cmd.error["kind"] == "cancelled" and cmd.error["type"] == "CancelledError"


# -- invalid awaits ---------------------------------------------------------------------------


def test_awaiting_a_bare_future_raises_invalid_await_naming_the_future() -> None:
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        seen: list[BaseException] = []

        @workflow
        async def rogue(ctx) -> str:
            try:
                await future
            except InvalidAwait as exc:
                seen.append(exc)
                return "caught"
            return "awaited"

        assert run_with(rogue, {}) == Command("complete", payload=encode("caught"))
        [exc] = seen
        assert "Future" in str(exc) and "rogue" in str(exc) and "ctx" in str(exc)
        assert exc.code == "invalid_await" and "Future" in exc.awaited and exc.workflow_id == "wf-err"
    finally:
        loop.close()


def test_awaiting_asyncio_sleep_on_the_engine_loop_fails_the_run_with_invalid_await() -> None:
    """The shard drives runs from inside its event loop, where ``asyncio.sleep`` yields a Future."""

    @workflow
    async def sleepy(ctx) -> str:
        await asyncio.sleep(1)
        return "slept"

    async def drive() -> Command:
        return run_with(sleepy, {})

    cmd = asyncio.run(drive())
    assert cmd.kind == "fail"
    assert "InvalidAwait" in cmd.error["type"] and cmd.error["code"] == "invalid_await"
    assert "Future" in cmd.error["message"] and "sleepy" in cmd.error["message"]


def test_awaiting_a_bare_yield_raises_invalid_await_too() -> None:
    @workflow
    async def yielder(ctx) -> str:
        await asyncio.sleep(0)  # a bare ``yield``: no loop needed, still not a ctx op
        return "done"

    cmd = run_with(yielder, {})
    assert cmd.kind == "fail" and "InvalidAwait" in cmd.error["type"] and "None" in cmd.error["message"]


# -- how a run ends when it raises ------------------------------------------------------------


def test_workflow_exception_fails_the_run_with_type_message_and_traceback() -> None:
    @workflow
    async def broken(ctx, n: int) -> int:
        await ctx.sleep(1)
        raise KeyError(f"missing {n}")

    engine = FakeEngine(broken, 7)
    cmd = engine.run_to_end()
    assert cmd.kind == "fail"
    assert cmd.error["kind"] == "exception"
    assert cmd.error["type"] == "KeyError"
    assert cmd.error["message"] == "'missing 7'"
    assert "Traceback" in cmd.error["traceback"] and "in broken" in cmd.error["traceback"]
    assert "code" not in cmd.error
    # Replaying the finished log fails the same way, at the same point.
    assert FakeEngine(broken, 7, history=engine.log).start()[0].error["type"] == "KeyError"


def test_weft_error_raised_by_a_workflow_keeps_its_code() -> None:
    @workflow
    async def missing(ctx) -> None:
        raise WorkflowNotFound("no such thing", workflow_id="x")

    cmd = run_with(missing, {})
    assert cmd.error["type"] == "weft_actors.errors.WorkflowNotFound" and cmd.error["code"] == "workflow_not_found"


def test_unencodable_result_fails_the_run_with_serialization_error() -> None:
    @workflow
    async def leaky(ctx) -> Any:
        return {"lock": object()}

    cmd = run_with(leaky, {})
    assert cmd.kind == "fail"
    assert cmd.error["type"] == "weft_actors.errors.SerializationError"
    assert cmd.error["code"] == "serialization_error"
    assert "workflow result" in cmd.error["message"]


@pytest.mark.parametrize("args", [(), (1, 2, 3)])
def test_wrong_number_of_arguments_fails_the_run_instead_of_raising_from_start(args: tuple) -> None:
    @workflow
    async def two_args(ctx, a: int, b: int) -> int:
        return a + b

    run = WorkflowRun(two_args.__weft_workflow__, "w", "r", args)
    [cmd] = run.start()
    assert cmd.kind == "fail" and cmd.error["type"] == "TypeError"
    assert run.deliver() == [cmd]


def test_bad_ctx_calls_raise_inside_the_workflow_where_it_can_catch_them() -> None:
    def not_an_activity() -> None: ...

    @activity
    def echo(x: Any) -> Any:
        return x

    @workflow
    async def sloppy(ctx) -> list:
        caught = []
        for make in (
            lambda: ctx.run(not_an_activity),
            lambda: ctx.run(echo, object()),
            lambda: ctx.sleep(-1),
            lambda: ctx.wait_signal("s", timeout=-0.5),
        ):
            try:
                make()
            except WeftError as exc:
                caught.append(type(exc).__name__)
        return caught

    engine = FakeEngine(sloppy)
    engine.run_to_end()
    bad_request, unencodable = InvalidRequest.__name__, SerializationError.__name__
    assert engine.result() == [bad_request, unencodable, bad_request, bad_request]


def test_corrupt_recorded_outcome_raises_serialization_error_in_the_workflow() -> None:
    @workflow
    async def reader(ctx) -> str:
        try:
            await ctx.now()
        except SerializationError as exc:
            return f"unreadable: {exc.code}"
        return "read"

    cmd = run_with(reader, {0: {"kind": "now", "name": "", "t": 1, "ok": b"\xc1"}})
    assert cmd == Command("complete", payload=encode("unreadable: serialization_error"))


def test_query_of_an_unknown_name_raises_unknown_query() -> None:
    @workflow
    async def quiet(ctx) -> None:
        await ctx.sleep(1)

    run = WorkflowRun(quiet.__weft_workflow__, "wf-q", "r", ())
    run.start()
    with pytest.raises(UnknownQuery) as info:
        run.query("status", ())
    assert info.value.query == "status" and info.value.workflow_id == "wf-q"


# -- error records ----------------------------------------------------------------------------


def test_error_record_names_builtin_types_plainly_and_others_by_module() -> None:
    assert error_record(ValueError("v"))["type"] == "ValueError"
    assert error_record(asyncio.CancelledError())["type"] == "CancelledError"
    rec = error_record(UnknownQuery("q"), kind="custom")
    assert rec["type"] == "weft_actors.errors.UnknownQuery" and rec["code"] == "unknown_query" and rec["kind"] == "custom"


def test_error_from_record_maps_each_kind_to_the_exception_a_workflow_sees() -> None:
    assert type(error_from_record({"kind": "timeout", "message": "t"})) is TimeoutError
    assert type(error_from_record({"kind": "cancelled"})) is asyncio.CancelledError
    assert type(error_from_record(dict(ACTIVITY_ERR))) is ActivityError
    coded = error_from_record({"kind": "exception", "type": "x", "message": "gone", "code": "workflow_not_found"})
    assert type(coded) is WorkflowNotFound and str(coded) == "gone"
    plain = error_from_record({"kind": "exception", "type": "KeyError", "message": "k"})
    assert type(plain) is WeftError and str(plain) == "KeyError: k"
