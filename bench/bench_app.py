"""The app module the benchmarks serve: ``--app bench_app`` with ``bench/`` on PYTHONPATH.

Everything here is ordinary user code on the public API.

- ``three_steps`` / ``n_steps``: the throughput workflow, like ``weft_actors.examples``.
- ``held``: the takeover workflow. Its activity ``work`` logs every execution (start and end,
  with the pid) to ``$WEFT_BENCH_LOG/<pid>.log`` with unbuffered appends that survive
  ``kill -9``, and returns a token unique to that execution. Each workflow parks in a durable
  timer that fires at a time the bench chose (``wake_at``), just after the kill; right after
  that timer's outcome commits, the workflow records ``ctx.now()``: that stamp is when its
  next committed op landed (the ``now`` op runs in the commit's resume pass). Parking in a
  timer rather than inside an activity keeps every workflow in flight at once (a shard runs
  at most 1,000 activity attempts at a time) and leaves no activity in flight at the kill.
- ``waiter``: the signal-latency workflow. Each signal carries the client's send time; right
  after the op that consumes it commits, the workflow records ``ctx.now()``.
"""

from __future__ import annotations

import itertools
import os
import time

from weft_actors import activity, workflow

# -- throughput ---------------------------------------------------------------------------


@activity
async def add_one(x: int) -> int:
    return x + 1


@workflow
async def three_steps(ctx, x: int) -> int:
    a = await ctx.run(add_one, x)
    b = await ctx.run(add_one, a)
    return await ctx.run(add_one, b)


@workflow
async def n_steps(ctx, x: int, steps: int) -> int:
    for _ in range(steps):
        x = await ctx.run(add_one, x)
    return x


# -- takeover -----------------------------------------------------------------------------

_log_fd: int | None = None
_counter = itertools.count()


def _log(line: str) -> None:
    global _log_fd
    directory = os.environ.get("WEFT_BENCH_LOG")
    if not directory:
        return
    if _log_fd is None:
        _log_fd = os.open(os.path.join(directory, f"{os.getpid()}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(_log_fd, line.encode())


@activity
async def work(step: int) -> str:
    """Logs its execution (start and end, with the pid) and returns a token unique to it."""
    key = activity.info().key
    _log(f"S\t{key}\t{os.getpid()}\t{time.time():.6f}\n")
    token = f"{os.getpid()}:{next(_counter)}"
    _log(f"E\t{key}\t{os.getpid()}\t{time.time():.6f}\t{token}\n")
    return token


@workflow
async def held(ctx, wake_at: float, pause: float) -> list:
    """work, sleep, work, then parked in a durable timer until ``wake_at`` (epoch seconds),
    then work, sleep, work: nine ops. Returns what it consumed: the four tokens, the time it
    parked, and the stamp taken right after the parking timer's outcome committed."""
    a = await ctx.run(work, 0)  # seq 0
    await ctx.sleep(pause)  # seq 1
    b = await ctx.run(work, 1)  # seq 2: its end in the log means "about to park"
    parked = await ctx.now()  # seq 3
    await ctx.sleep(max(0.0, wake_at - parked.timestamp()))  # seq 4: parked here at the kill
    stamp = await ctx.now()  # seq 5: runs in the resume pass of seq 4's commit
    c = await ctx.run(work, 2)  # seq 6
    await ctx.sleep(pause)  # seq 7
    d = await ctx.run(work, 3)  # seq 8
    return [a, b, parked.timestamp(), stamp.timestamp(), c, d]


# -- signal latency -----------------------------------------------------------------------


@workflow
async def waiter(ctx, count: int) -> list:
    """Waits for ``count`` signals ``go``; returns ``[sent_at, committed_by]`` for each."""
    stamps = []
    for _ in range(count):
        sent = await ctx.wait_signal("go")
        stamp = await ctx.now()
        stamps.append([sent, stamp.timestamp()])
    return stamps


# -- activity rate limit ------------------------------------------------------------------


@activity(rate_limit="50/s")
async def rate_limited_stamp() -> list:
    """The wall time this attempt started (at most 50 a second, across every shard) and the
    shard's pid."""
    return [time.time(), os.getpid()]


@workflow
async def rate_limited(ctx) -> list:
    return await ctx.run(rate_limited_stamp)


# -- flow control -------------------------------------------------------------------------


@workflow(concurrency=8)
async def queued_steps(ctx, x: int) -> int:
    """Three steps, at most 8 running at once across every shard: the rest wait in the queue."""
    a = await ctx.run(add_one, x)
    b = await ctx.run(add_one, a)
    return await ctx.run(add_one, b)


# -- rolling restart (``rolling.py``) ------------------------------------------------------


@activity
async def half_second(step: int) -> int:
    """Sleeps 0.5 s; logs each attempt it begins (``R`` and its activity key), so an attempt
    run twice (a key logged twice) is counted."""
    import asyncio

    _log(f"R\t{activity.info().key}\t{os.getpid()}\n")
    await asyncio.sleep(0.5)
    return step


@workflow
async def two_halves(ctx) -> list:
    return [await ctx.run(half_second, 1), await ctx.run(half_second, 2)]
