"""Workflows for the kill -9 tests of the semantics, one per feature family, importable by path
in the test and run as a script in a child process that is killed mid-run.

    python semantics_app.py DATA        # runs before_crash(), notes "ready", waits to be killed

With ``WEFT_CRASH_BLOCK`` set, every ``blocker`` activity notes ``blocked <tag>`` and hangs, so
the kill catches each workflow in the middle of an op. ``before_crash`` and ``after_crash`` are
the same calls an uninterrupted run makes, so the two runs' results can be compared.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from weft_actors import Engine, activity, workflow
from weft_actors.errors import WorkflowCancelled


def note(line: str) -> None:
    path = os.environ.get("WEFT_TEST_LOG")
    if path:
        with open(path, "a") as log:
            log.write(line + "\n")
            log.flush()
            os.fsync(log.fileno())


def lines() -> list[str]:
    path = os.environ.get("WEFT_TEST_LOG", "")
    return open(path).read().splitlines() if path and os.path.exists(path) else []


@activity
async def blocker(tag: str) -> str:
    note(f"start {tag}")
    if os.environ.get("WEFT_CRASH_BLOCK"):
        note(f"blocked {tag}")
        await asyncio.sleep(3600)  # killed here, mid-activity
    if tag in ("race", "cancel-me"):
        await asyncio.sleep(30)  # only ever ends by cancellation: the signal wins, the cancel lands
    note(f"done {tag}")
    return tag


@activity
async def echo(value: Any) -> Any:
    return value


@workflow
async def upd_flow(ctx) -> Any:
    state: dict[str, Any] = {"items": [], "closed": False}

    def add(item: str) -> int:
        state["items"].append(item)
        return len(state["items"])

    def text_only(item: Any) -> None:
        if not isinstance(item, str):
            raise TypeError("text only")

    ctx.on_update("add", add, validator=text_only)
    ctx.on_update("close", lambda: state.update(closed=True))
    await ctx.wait_condition(lambda: len(state["items"]) >= 2)
    middle = await ctx.run(blocker, "upd")
    await ctx.wait_condition(lambda: state["closed"])
    return {"items": state["items"], "middle": middle}


@workflow
async def race_flow(ctx) -> Any:
    first = await ctx.race([ctx.run(blocker, "race"), ctx.wait_signal("go")])
    both = await ctx.all([ctx.run(echo, 42), ctx.wait_signal("more")])
    return [first, both]


@workflow
async def kid_flow(ctx, tag: str) -> str:
    return (await ctx.run(blocker, tag)) + "!"


@workflow
async def parent_flow(ctx) -> Any:
    first = await ctx.child(kid_flow, "kid", id="kid-1")
    second = await ctx.child(kid_flow, "kid-2")
    return [first, second]


@workflow
async def loop_flow(ctx, n: int) -> Any:
    if n < 2:
        await ctx.run(echo, n)
        return ctx.continue_as_new(n + 1)
    middle = await ctx.run(blocker, "loop")
    got = await ctx.wait_signal("x")
    return [n, middle, got]


@workflow
async def cancel_flow(ctx) -> str:
    try:
        await ctx.run(blocker, "cancel-me")
    except asyncio.CancelledError:
        await ctx.run(blocker, "cleanup")
        raise
    return "not cancelled"


@workflow
async def patch_flow(ctx) -> Any:
    if await ctx.patched("p1"):
        return ["new", await ctx.run(blocker, "patch")]
    return ["old"]


APP = [upd_flow, race_flow, kid_flow, parent_flow, loop_flow, cancel_flow, patch_flow]
IDS = ("upd", "race", "parent", "loop", "cancel", "patch")
BLOCKED = ("blocked upd", "blocked race", "blocked kid", "blocked loop", "blocked cleanup", "blocked patch")


async def _line(text: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in lines():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {text!r} in the log")
        await asyncio.sleep(0.01)


async def before_crash(engine: Engine) -> None:
    upd = await engine.start(upd_flow, id="upd")
    assert await upd.update("add", "a", request_id="u-1") == 1
    assert await upd.update("add", "b", request_id="u-2") == 2
    await engine.signal_with_start(race_flow, signal="more", payload="more!", id="race")
    await engine.start(parent_flow, id="parent")
    await engine.start(loop_flow, 0, id="loop")
    await engine.signal("loop", "x", "sig")  # buffered across two continue-as-new (and the crash)
    cancel = await engine.start(cancel_flow, id="cancel")
    await _line("start cancel-me")
    await cancel.cancel()
    await engine.start(patch_flow, id="patch")


async def after_crash(engine: Engine) -> dict[str, Any]:
    upd = engine.get_handle("upd")
    results: dict[str, Any] = {"retried update": await upd.update("add", "b", request_id="u-2")}
    await upd.update("close")
    await engine.signal("race", "go", "go!")
    for wid in IDS:
        try:
            results[wid] = await engine.get_handle(wid).result(timeout=15)
        except WorkflowCancelled:
            results[wid] = "cancelled"
    return results


async def _serve(data_dir: str) -> None:
    async with Engine(data_dir, app=APP) as engine:
        await before_crash(engine)
        note("ready")
        await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1]))
