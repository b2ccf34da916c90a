"""User code never stops its host: SystemExit, KeyboardInterrupt or any BaseException raised
by a workflow body, handler, predicate or activity fails only what raised it."""

from __future__ import annotations

import asyncio
import sys

import pytest

from _support import run
from weft_actors import Engine, RetryPolicy, activity, workflow
from weft_actors.errors import ActivityError, UpdateFailed, UpdateRejected, UserCodeExit, WorkflowFailed

ONCE = RetryPolicy(max_attempts=1)


class Abort(BaseException):
    """A user's own BaseException subclass."""


@activity(retry=ONCE)
async def exits_inline() -> None:
    sys.exit(3)


@activity(retry=ONCE)
async def interrupts_after_suspending() -> None:
    await asyncio.sleep(0.01)
    raise KeyboardInterrupt


@activity(retry=ONCE)
def exits_in_thread() -> None:
    sys.exit("bye")


@workflow
async def body_exits(ctx, how: str):
    if how == "exit":
        sys.exit(2)
    if how == "interrupt":
        raise KeyboardInterrupt
    if how == "generator_exit":
        raise GeneratorExit
    raise Abort("custom")


@workflow
async def exits_after_a_step(ctx):
    await ctx.sleep(0.01)
    sys.exit(1)


@workflow
async def handlers(ctx):
    state = {"n": 0}
    ctx.on_query("boom", lambda: sys.exit(4))
    ctx.on_query("n", lambda: state["n"])

    def validator(value):
        if value == "exit":
            sys.exit(5)

    def apply(value):
        if value == "interrupt":
            raise KeyboardInterrupt
        state["n"] += 1
        return state["n"]

    ctx.on_update("bump", apply, validator)
    ctx.on_signal("die", lambda _: sys.exit(6))
    await ctx.wait_signal("never")


@workflow
async def predicate_exits(ctx):
    flag = {"on": False}
    ctx.on_signal("go", lambda _: flag.update(on=True))

    def predicate():
        if flag["on"]:
            raise SystemExit(7)
        return False

    await ctx.wait_condition(predicate)


@workflow
async def calls(ctx, which: str):
    target = {"inline": exits_inline, "suspended": interrupts_after_suspending, "thread": exits_in_thread}[which]
    try:
        await ctx.run(target)
    except ActivityError as error:
        return error.type
    return "no error"


@workflow
async def echo(ctx, value):
    return value


APP = [body_exits, exits_after_a_step, handlers, predicate_exits, calls, echo]


async def _failed(handle) -> WorkflowFailed:
    with pytest.raises(WorkflowFailed) as info:
        await handle.result(timeout=5)
    return info.value


@pytest.mark.parametrize("how", ["exit", "interrupt"])
def test_system_exit_in_a_workflow_body_fails_that_workflow_with_user_code_exit(tmp_path, how):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            error = await _failed(await engine.start(body_exits, how))
            assert error.type == "weft_actors.errors.UserCodeExit"
            assert ("SystemExit" if how == "exit" else "KeyboardInterrupt") in error.cause_message
            error = await _failed(await engine.start(exits_after_a_step))  # live, not only at start
            assert error.type == "weft_actors.errors.UserCodeExit"
            assert engine.state == "running"
            assert await (await engine.start(echo, "still serving")).result(timeout=5) == "still serving"

    run(main())


@pytest.mark.parametrize("how", ["generator_exit", "custom"])
def test_any_other_base_exception_fails_that_workflow_with_its_own_type(tmp_path, how):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            error = await _failed(await engine.start(body_exits, how))
            assert error.type == ("GeneratorExit" if how == "generator_exit" else f"{__name__}.Abort")
            assert await (await engine.start(echo, 1)).result(timeout=5) == 1

    run(main())


def test_handlers_that_raise_system_exit_fail_their_call_or_their_workflow(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(handlers)
            with pytest.raises(UserCodeExit):
                await handle.query("boom")
            with pytest.raises(UpdateRejected, match="SystemExit"):
                await handle.update("bump", "exit")
            with pytest.raises(UpdateFailed):
                await handle.update("bump", "interrupt")
            assert await handle.update("bump", "fine") == 1
            assert await handle.query("n") == 1
            await handle.signal("die")
            error = await _failed(handle)
            assert error.type == "weft_actors.errors.UserCodeExit" and "signal handler 'die'" in error.cause_message
            predicate = await engine.start(predicate_exits)
            await predicate.signal("go")
            error = await _failed(predicate)
            assert error.type == "weft_actors.errors.UserCodeExit" and "condition predicate" in error.cause_message
            assert engine.state == "running"
            assert await (await engine.start(echo, 2)).result(timeout=5) == 2

    run(main())


@pytest.mark.parametrize("which", ["inline", "suspended", "thread"])
def test_an_activity_raising_system_exit_fails_that_attempt_only(tmp_path, which):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(calls, which)
            assert await handle.result(timeout=5) == "weft_actors.errors.UserCodeExit"
            assert engine.state == "running"
            assert await (await engine.start(echo, 3)).result(timeout=5) == 3

    run(main())
