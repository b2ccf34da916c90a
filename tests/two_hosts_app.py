"""The app served by the two-hosts PostgreSQL tests (``--app two_hosts_app``, tests/ on PYTHONPATH).

Exactly-once commits are proven from two independent records, as ``bench/bench_app`` does:

- the store's op log: what each op committed;
- an execution log the activity writes itself: every execution appends a start line and an
  end line (workflow id, run, seq, attempt, pid, wall time, and a token unique to that
  execution) to ``$WEFT_TWO_HOSTS_LOG/<pid>.log``, with unbuffered ``O_APPEND`` writes that
  survive ``kill -9`` (a torn last line is skipped by the reader).

The activity returns its token, and the workflow returns every token it consumed. So a
committed outcome can be traced to exactly one execution, and a second commit of an op
(a deposed engine overwriting an outcome another already committed and the workflow already
consumed) shows as a stored token that differs from the consumed one.

``relay(n, nap, work)``: three activities with a durable ``nap`` between them (five ops:
activity, timer, activity, timer, activity); each activity sleeps ``work`` seconds so some
are in flight when a host is killed or stopped. Result: ``{"n", "tokens", "sum"}`` where
``sum`` is ``expected_sum(n)``.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

from weft_actors import RetryPolicy, activity, workflow

LOG_ENV = "WEFT_TWO_HOSTS_LOG"
STEPS = 3
ACTIVITY_SEQS = (0, 2, 4)
"""The op seqs of the three activities (the timers between them are seqs 1 and 3)."""
OPS_PER_RUN = 5

_PROCESS_TAG = uuid.uuid4().hex[:8]
"""Tokens name their process by this too: a recycled pid never makes two tokens equal."""
_log_fd: int | None = None
_executions = 0


def _log(line: str) -> None:
    """One ``write`` per line on an ``O_APPEND`` descriptor: a kill -9 tears at most the last."""
    global _log_fd
    directory = os.environ.get(LOG_ENV)
    if not directory:
        return
    if _log_fd is None:
        _log_fd = os.open(os.path.join(directory, f"{os.getpid()}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(_log_fd, line.encode())


def _next_token() -> str:
    global _executions
    _executions += 1
    return f"{os.getpid()}:{_PROCESS_TAG}:{_executions}"


def step_value(n: int, step: int) -> int:
    return 10 * n + step


def expected_sum(n: int) -> int:
    return sum(step_value(n, step) for step in range(STEPS))


@activity(retry=RetryPolicy(max_attempts=100, initial_interval=0.05, backoff=2.0, max_interval=0.5), start_to_close=30)
async def mark(n: int, step: int, work: float) -> list:
    """Logs this execution (start, then end with its token) and returns ``[token, value]``."""
    info = activity.info()
    where = f"{info.workflow_id}\t{info.run_id}\t{info.seq}\t{info.attempt}\t{os.getpid()}"
    _log(f"S\t{where}\t{time.time():.6f}\n")
    await asyncio.sleep(work)
    token = _next_token()
    _log(f"E\t{where}\t{time.time():.6f}\t{token}\n")
    return [token, step_value(n, step)]


@workflow
async def relay(ctx, n: int, nap: float, work: float) -> dict:
    tokens = []
    total = 0
    for step in range(STEPS):
        if step:
            await ctx.sleep(nap)
        token, value = await ctx.run(mark, n, step, work)
        tokens.append(token)
        total += value
    return {"n": n, "tokens": tokens, "sum": total}
