"""The workflows and activities the simulation runs: small, but together they use every
kind of op (activities that finish inline or suspend, sleeps, signals with timeouts, updates,
queries, children under each parent-close policy, race/all, continue-as-new, cancellation
handlers). Each one ends by itself or on a ``stop`` signal, so a drained simulation must see
every workflow end. Nothing here reads a clock or a random source: the workload passes in the
durations, so a seed fixes everything.
"""

from __future__ import annotations

import asyncio
from typing import Any

from weft_actors import RetryPolicy, activity, workflow

RETRY = RetryPolicy(max_attempts=3, initial_interval=0.2, backoff=2.0, max_interval=1.0)


@activity
async def work(tag: str, delay: float, fail: bool = False) -> str:
    """Finishes inline (``delay`` 0) or suspends for ``delay`` simulated seconds; ``fail``
    makes every attempt raise (so the retry policy and its timers run)."""
    if delay > 0:
        await asyncio.sleep(delay)
    if fail:
        raise RuntimeError(f"{tag} failed")
    return tag


@workflow
async def steps(ctx, tag: str, plan: list[Any]) -> list[Any]:
    """One op per plan entry: ``["a", delay]`` an activity, ``["f", delay]`` a failing one
    (caught), ``["s", seconds]`` a sleep."""
    done: list[Any] = []
    ctx.on_query("done", lambda: len(done))
    for index, (kind, value) in enumerate(plan):
        if kind == "a":
            done.append(await ctx.run(work, f"{tag}.{index}", value, start_to_close=5.0))
        elif kind == "f":
            try:
                await ctx.run(work, f"{tag}.{index}", value, True, retry=RETRY)
            except Exception as exc:  # the activity's error, after its retries
                done.append(type(exc).__name__)
        else:
            await ctx.sleep(value)
            done.append("slept")
    return done


@workflow
async def collector(ctx, got: list[str], count: int, runs: int, patience: float) -> dict[str, Any]:
    """Takes ``s`` signals (unique tokens) until one is ``stop``; answers ``bump`` updates
    (each applied once: ``count`` grows by one per request id) and the ``count`` query. After
    three tokens in a run it continues as new (at most twice), carrying what it has."""
    state = {"count": count}

    def bump(by: int) -> list[Any]:
        state["count"] += by
        return [ctx.run_id, state["count"]]

    def check(by: int) -> None:
        if by < 1:
            raise ValueError("bump by at least 1")

    ctx.on_update("bump", bump, validator=check)
    ctx.on_query("count", lambda: state["count"])
    mine: list[str] = []
    while True:
        try:
            token = await ctx.wait_signal("s", timeout=patience)
        except TimeoutError:
            await ctx.sleep(0.1)
            continue
        if token == "stop":
            return {"got": got + mine, "count": state["count"]}
        mine.append(token)
        if len(mine) >= 3 and runs < 2:
            return ctx.continue_as_new(got + mine, state["count"], runs + 1, patience)


@workflow
async def parent(ctx, policy: str, plans: list[Any], linger: float) -> Any:
    """Children under ``policy``; ``linger`` >= 0 races them against a sleep, so the parent
    may end first and its parent-close policy applies to the children still running."""
    children = [ctx.child(steps, f"c{index}", plan, parent_close=policy) for index, plan in enumerate(plans)]
    if linger >= 0:
        index, value = await ctx.race([ctx.all(children), ctx.sleep(linger)])
        return [index, value]
    return await ctx.all(children)


@workflow
async def racer(ctx, delays: list[float], patience: float) -> Any:
    """A race of activities, a signal and a sleep; then a cleanup activity if cancelled."""
    try:
        ops = [ctx.run(work, f"r{index}", delay) for index, delay in enumerate(delays)]
        return await ctx.race([*ops, ctx.wait_signal("s"), ctx.sleep(patience)])
    except asyncio.CancelledError:
        await ctx.run(work, "cleanup", 0.0)
        raise


@workflow
async def looper(ctx, left: int, nap: float) -> int:
    """Continues as new ``left`` times, sleeping ``nap`` in each run."""
    await ctx.sleep(nap)
    if left > 0:
        return ctx.continue_as_new(left - 1, nap)
    return 0


@workflow
async def relay(ctx, left: int, plan: list[Any]) -> int:
    """Races a child against a signal, then continues as new: the child's end and the
    parent's continue-as-new may land in one group commit."""
    await ctx.race([ctx.child(steps, f"k{left}", plan), ctx.wait_signal("s")])
    if left > 0:
        return ctx.continue_as_new(left - 1, plan)
    return left


@workflow
async def spinner(ctx, count: int, patience: float) -> int:
    """``count`` activities that finish inline, so the run keeps going ahead of its commits
    (a query must still be answered within a commit), then a wait for a ``stop`` signal with
    a far timeout (an in-memory timer cancelled when the signal comes: it must not keep the
    finished actor alive)."""
    done = [0]
    ctx.on_query("done", lambda: done[0])
    for index in range(count):
        await ctx.run(work, f"p{index}", 0.0)
        done[0] += 1
    try:
        await ctx.wait_signal("s", timeout=patience)
    except TimeoutError:
        pass
    return done[0]


@workflow
async def quitter(ctx, where: str) -> None:
    """User code that raises ``SystemExit`` (``sys.exit()`` in workflow code): it must fail
    this workflow only, never its host."""
    if where == "after-step":
        await ctx.run(work, "q", 0.0)
    raise SystemExit(3)


@workflow
async def kid(ctx) -> Any:
    """A child that ends on its first ``s`` signal."""
    return await ctx.wait_signal("s")


@workflow
async def kin(ctx, kid_id: str, runs: int) -> Any:
    """Races its child against a signal, then continues as new once: signalled together,
    the child's end and the parent's continue-as-new land in one group commit."""
    if runs == 0:
        await ctx.race([ctx.child(kid, id=kid_id), ctx.wait_signal("s")])
        return ctx.continue_as_new(kid_id, 1)
    return "run 1"


@workflow(concurrency=1, concurrency_key=lambda key, delay: key)
async def queued(ctx, key: str, delay: float) -> str:
    """Flow control: one at a time per key; the rest wait in the store's queue, and every one
    must still end (the final check), with the group's count right (``check_flow``)."""
    await ctx.run(work, key, delay)
    await ctx.sleep(delay)
    return key


APP = [steps, collector, parent, racer, looper, relay, spinner, quitter, kid, kin, queued]
