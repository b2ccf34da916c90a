"""The app module the benchmarks serve: ``--app bench_app`` with ``bench/`` on PYTHONPATH.

Everything here is ordinary user code on the public API.

- ``three_steps`` / ``n_steps``: the throughput workflow, like ``weft_actors.examples``.
- ``held``: the takeover workflow. Activities log every execution (start and end, with the
  pid) to ``$WEFT_BENCH_LOG/<pid>.log`` with unbuffered appends that survive ``kill -9``, and
  return a token unique to that execution. ``hold`` waits while the file ``$WEFT_BENCH_GATE``
  exists, so every workflow can be parked in flight before the kill; right after the outcome
  of ``hold`` commits, the workflow records ``ctx.now()``: that stamp is when its next
  committed op landed (the ``now`` op runs in the commit's resume pass).
- ``waiter``: the signal-latency workflow. Each signal carries the client's send time; right
  after the op that consumes it commits, the workflow records ``ctx.now()``.
"""

from __future__ import annotations

import asyncio
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
_gate_open: asyncio.Future | None = None


def _log(line: str) -> None:
    global _log_fd
    directory = os.environ.get("WEFT_BENCH_LOG")
    if not directory:
        return
    if _log_fd is None:
        _log_fd = os.open(os.path.join(directory, f"{os.getpid()}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(_log_fd, line.encode())


def _token() -> str:
    return f"{os.getpid()}:{next(_counter)}"


@activity
async def work(step: int) -> str:
    key = activity.info().key
    token = _token()
    _log(f"S\t{key}\t{os.getpid()}\t{time.time():.6f}\n")
    _log(f"E\t{key}\t{os.getpid()}\t{time.time():.6f}\t{token}\n")
    return token


async def _watch_gate(path: str, opened: asyncio.Future) -> None:
    while os.path.exists(path):
        await asyncio.sleep(0.002)
    opened.set_result(None)


@activity
async def hold() -> str:
    """Returns once the gate file is gone (at once if there is none)."""
    global _gate_open
    key = activity.info().key
    _log(f"S\t{key}\t{os.getpid()}\t{time.time():.6f}\n")
    gate = os.environ.get("WEFT_BENCH_GATE")
    if gate and os.path.exists(gate):
        if _gate_open is None or _gate_open.done():
            _gate_open = asyncio.get_running_loop().create_future()
            asyncio.ensure_future(_watch_gate(gate, _gate_open))
        await asyncio.shield(_gate_open)
    token = _token()
    _log(f"E\t{key}\t{os.getpid()}\t{time.time():.6f}\t{token}\n")
    return token


@workflow
async def held(ctx, pause: float) -> list:
    """work, sleep, hold (the gate), now, work, sleep, work: seven ops; returns the tokens it
    saw and the stamp taken right after ``hold``'s outcome committed."""
    a = await ctx.run(work, 0)
    await ctx.sleep(pause)
    b = await ctx.run(hold)
    stamp = await ctx.now()
    c = await ctx.run(work, 1)
    await ctx.sleep(pause)
    d = await ctx.run(work, 2)
    return [a, b, c, d, stamp.timestamp()]


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
