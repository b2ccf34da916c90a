"""The app the chaos test serves (``--app chaos_app``, with tests/chaos on PYTHONPATH).

Every workflow's result is computable from what the client acknowledged, so the harness can
check each one exactly:

- ``accumulator(n)``: sums the values of ``add`` signals and updates, each carrying a unique
  token (a client that cannot tell whether a send landed sends it again; the workflow counts
  each token once). ``close(count)`` says how many distinct tokens to wait for. Result:
  ``{"sum": 2n + sum of values, "count": tokens, "dups": repeated sends seen}``.
- ``parent(n)``: two children in ``ctx.all``, then ``+ 1``: ``4n + 3``.
- ``counter(n, acc)``: one activity per run, continuing as new down to 0: ``acc + n(n+1)``.
- ``racer(n)``: races signal ``go`` against a long sleep: ``n + payload``.
- ``limited(key, n)``: flow control, at most 2 running per key (the checker counts the
  slots): one activity and a timer, ``2n``.

The fault-isolation faults have their own workflows:

- ``poisoned(flag, seconds)``: its ``async def`` activity blocks the shard's loop with
  ``time.sleep(seconds)`` (past the lease) unless the file ``flag`` exists (the deployed fix);
  its owners are lost until it is quarantined. Lifted after the fix: ``"fixed"``.
- ``exits(how)``: raises ``SystemExit`` or ``KeyboardInterrupt`` from workflow code; it must
  fail alone (``UserCodeExit``), never stop the shard hosting it.
- ``parked(n, seconds)``: one timer, then ``n``: the backlog of a large takeover.
- ``napper(seconds)``: one timer, returning ``ctx.now()`` before and after it (epoch seconds):
  a timer must never wake before its time on the wall clock, whatever the clock jumps.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from weft_actors import RetryPolicy, activity, workflow

RETRY = RetryPolicy(max_attempts=1000, initial_interval=0.05, backoff=2.0, max_interval=0.5)


@activity(retry=RETRY, start_to_close=10)
async def work(n: int) -> int:
    await asyncio.sleep(0.002 + (n % 5) * 0.002)
    return 2 * n


@workflow
async def accumulator(ctx, n: int) -> dict:
    state: dict[str, Any] = {"sum": 0, "expect": None, "dups": 0}
    seen: set[str] = set()

    def add(token: str, value: int) -> int:
        if token in seen:
            state["dups"] += 1
        else:
            seen.add(token)
            state["sum"] += value
        return state["sum"]

    def close(count: int) -> None:
        state["expect"] = count

    ctx.on_signal("add", lambda payload: add(payload[0], payload[1]))
    ctx.on_update("add", add)
    ctx.on_signal("close", close)
    ctx.on_query("count", lambda: len(seen))
    base = await ctx.run(work, n)
    await ctx.wait_condition(lambda: state["expect"] is not None and len(seen) >= state["expect"])
    await ctx.sleep(0.01)
    return {"sum": base + state["sum"], "count": len(seen), "dups": state["dups"]}


@workflow
async def child_wf(ctx, n: int) -> int:
    value = await ctx.run(work, n)
    await ctx.sleep(0.01)
    return value


@workflow
async def parent(ctx, n: int) -> int:
    first, second = await ctx.all([ctx.child(child_wf, n), ctx.child(child_wf, n + 1)])
    return first + second + 1


@workflow
async def counter(ctx, n: int, acc: int) -> int:
    if n <= 0:
        return acc
    acc += await ctx.run(work, n)
    return ctx.continue_as_new(n - 1, acc)


@workflow
async def racer(ctx, n: int) -> int:
    index, value = await ctx.race([ctx.wait_signal("go"), ctx.sleep(3600)])
    return n + value if index == 0 else -1


@activity(retry=RetryPolicy(max_attempts=1), start_to_close=60)
async def blocks_unless_fixed(flag: str, seconds: float) -> str:
    if os.path.exists(flag):
        return "fixed"
    time.sleep(seconds)  # the poison: a blocking call on the shard's event loop
    return "slept"


@workflow
async def poisoned(ctx, flag: str, seconds: float) -> str:
    return await ctx.run(blocks_unless_fixed, flag, seconds)


EXIT_CODE = 77
"""``sys.exit(EXIT_CODE)``: a shard exiting with it would be this workflow's doing."""


@workflow
async def exits(ctx, how: str, n: int) -> int:
    await ctx.run(work, n)
    if how == "interrupt":
        raise KeyboardInterrupt(f"chaos {n}")
    sys.exit(EXIT_CODE)


@workflow
async def parked(ctx, n: int, seconds: float) -> int:
    await ctx.sleep(seconds)
    return n


@workflow
async def napper(ctx, seconds: float) -> list[float]:
    before = await ctx.now()
    await ctx.sleep(seconds)
    after = await ctx.now()
    return [before.timestamp(), after.timestamp()]


@workflow(concurrency=2, concurrency_key=lambda key, n: key)
async def limited(ctx, key: str, n: int) -> int:
    value = await ctx.run(work, n)
    await ctx.sleep(0.05)
    return value


def expected_parent(n: int) -> int:
    return 4 * n + 3


def expected_counter(n: int, acc: int) -> int:
    return acc + n * (n + 1)
